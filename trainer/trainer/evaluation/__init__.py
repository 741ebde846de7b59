"""Held-out evaluation, shared by the training jobs (before and after) and ``python -m trainer eval``:
the held-out questions, how a policy answers them, the statistics and the report."""
