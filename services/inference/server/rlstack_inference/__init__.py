"""Inference service of the stack: the vLLM launcher."""
