"""The env services as the jobs see them, through their clients only: reasoning-gym as TRL's
``environment_factory`` tool env, OpenCode as TRL's harness session factory, and the coding tasks."""
