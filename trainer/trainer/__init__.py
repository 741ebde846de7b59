"""TRL training jobs against the stack's environment services (through their clients only)."""
