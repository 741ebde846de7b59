"""The stack's default model, made offline: ``python -m rlstack_default_model --out DIR``."""
