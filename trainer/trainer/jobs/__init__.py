"""The commands of ``python -m trainer``, one module each: ``grpo``, ``async_grpo``, ``pretrain``,
``eval``. A job imports what it needs from the other rooms, never from another job."""
