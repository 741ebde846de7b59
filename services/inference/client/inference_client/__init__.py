"""Client of the stack's vLLM inference service."""

from .weights import WeightSyncClient, WeightSyncError, publish_checkpoint

__all__ = ["WeightSyncClient", "WeightSyncError", "publish_checkpoint"]
