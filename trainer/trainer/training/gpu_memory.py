"""The GPU memory figures of a training step (for its metrics record and step line)."""

from typing import Any

GIB = 1024**3


def gpu_memory() -> dict[str, Any]:
    """PyTorch's peak allocated and reserved memory since the start, what it reserves now, and what
    the whole device has in use now (the CUDA context and other processes included), in GiB; empty
    where CUDA is not in use."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return {}
    free, total = torch.cuda.mem_get_info()
    return {
        "gpu_max_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
        "gpu_max_reserved_gib": torch.cuda.max_memory_reserved() / GIB,
        "gpu_reserved_gib": torch.cuda.memory_reserved() / GIB,
        "gpu_used_gib": (total - free) / GIB,
    }
