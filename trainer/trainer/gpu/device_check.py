"""In the trainer container, at the start of a CUDA job: what the host-side pre-flight
(``preflight``) cannot see."""

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from .preflight import FA3_CAPABILITIES


def unwritable(folders: Sequence[str]) -> list[str]:
    """The folders (created if missing) this user cannot create a file in, each with the reason."""
    bad = []
    for folder in folders:
        path = Path(folder)
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".rlstack-write-probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as error:
            bad.append(f"{folder} ({error.strerror or error})")
    return bad


def check_training_device(async_grpo: bool, env: Mapping[str, str] | None = None) -> list[str]:
    """In the trainer container, before the model loads: CUDA usable, the FA3 capability for
    AsyncGRPO, and writable caches. Returns the problems (empty: go on)."""
    import torch

    env = os.environ if env is None else env
    problems = []
    if not torch.cuda.is_available():
        problems.append(
            "CUDA is not usable by torch here (torch is built for CUDA 13.0: NVIDIA driver >= 580, "
            "and the container needs a GPU: deploy.resources.reservations.devices)"
        )
    elif async_grpo:
        major, minor = torch.cuda.get_device_capability()
        if f"{major}.{minor}" not in FA3_CAPABILITIES:
            problems.append(
                f"{torch.cuda.get_device_name()} has compute capability {major}.{minor}; AsyncGRPO's "
                f"FA3 kernel is built for {' and '.join(FA3_CAPABILITIES)} only"
            )
    caches = [env[name] for name in ("HF_HOME", "KERNELS_CACHE", "TRACKIO_DIR") if env.get(name)]
    problems += [f"cache folder not writable: {bad}" for bad in unwritable(caches)]
    return problems
