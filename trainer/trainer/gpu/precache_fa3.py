"""``python -m trainer.gpu.precache_fa3``: download AsyncGRPO's FA3 attention kernel into
``KERNELS_CACHE`` at image build time (``PRECACHE_FA3=1``), so training starts offline.

Only downloads: ``kernels.install_kernel`` fetches the build for this image's torch without
importing it. Importing (``get_kernel``, what TRL does at run time) loads the kernel's shared
library, which needs ``libcuda.so.1``, present only in a container started with a GPU.
"""

import sys

# What TRL 1.16's AsyncGRPO loads (trl/experimental/async_grpo/packing.py) on CUDA.
FA3_REPO = "kernels-community/flash-attn3"
FA3_VERSION = 1


def main() -> int:
    from kernels import install_kernel

    path = install_kernel(FA3_REPO, version=FA3_VERSION)
    print(f"precache: {FA3_REPO} version {FA3_VERSION} in {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
