"""Inference service of the stack: vLLM launcher and the offline default model."""
