"""One float arithmetic for CPU training on every x86-64 CPU, so that a job's weights depend on its
settings and packages, not on the machine.

torch picks its CPU kernels by instruction set (ATen's AVX-512 or AVX2 builds) and MKL picks its
matrix-multiply code path by CPU model; each sums in a different order, so the same job rounds
differently on another CPU and, over hundreds of optimizer steps, ends with another policy.
Pinning both to the AVX2 paths (present on every x86-64 CPU of the last decade) and fixing the
thread count (a parallel reduction's order follows its threads) makes the arithmetic the same.
Both choices are read once, when torch loads, so they must be made before the first ``import torch``.
"""

import logging
import os
import sys

log = logging.getLogger(__name__)
# ATen's kernel build (its "CPU capability") and MKL's Conditional Numerical Reproducibility branch.
PINNED_ENVIRONMENT = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}


def pin_cpu_numerics() -> bool:
    """Pin torch's and MKL's CPU code paths for this process (a value the user exported wins).
    False, with a warning, when torch is already loaded (its choice is made; ``numerics_in_effect``
    tells which)."""
    if "torch" in sys.modules:
        log.warning("torch was imported before its CPU arithmetic could be pinned; results may differ by CPU")
        return False
    for name, value in PINNED_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    return True


def numerics_in_effect() -> dict[str, str]:
    """What this process computes with: ATen's kernel build, MKL's branch, torch and thread count."""
    import torch

    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "MKL_CBWR": os.environ.get("MKL_CBWR", ""),
        "threads": str(torch.get_num_threads()),
        "torch": torch.__version__,
    }


def deterministic_torch(threads: int) -> None:
    """Fixed thread count and torch's deterministic kernels (where it has a choice)."""
    import torch

    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
