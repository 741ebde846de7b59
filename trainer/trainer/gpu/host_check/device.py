"""Stage ``device``: what this host's GPU is, and whether the trainer can use it (the GPU stack's
pre-flight facts and the trainer's own device check).

``python -m trainer.gpu.host_check.device --out FILE [--cpu]`` writes the facts as JSON; the check
runs it as a child, so that this process never holds a CUDA context beside the stages it measures.
"""

import argparse
import importlib.metadata as metadata
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..device_check import check_training_device
from ..preflight import driver_at_least, parse_nvidia_smi, plan, query_nvidia_smi
from .jobs import child_env
from .processes import run_logged
from .report import StageReport
from .settings import CheckSettings

GIB = 1024**3


def facts(cuda: bool) -> dict[str, Any]:
    """Python, torch, transformers, TRL; each GPU torch sees; nvidia-smi's driver and the pre-flight's
    lines for one GPU; with ``cuda``, the trainer's device check (its problems)."""
    import torch

    found: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": metadata.version("transformers"),
        "trl": metadata.version("trl"),
        "cuda_available": torch.cuda.is_available(),
        "gpus": [],
    }
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            found["gpus"].append(
                {
                    "index": index,
                    "name": props.name,
                    "compute_capability": f"{props.major}.{props.minor}",
                    "memory_gib": round(props.total_memory / GIB, 2),
                    "multiprocessors": props.multi_processor_count,
                }
            )
    try:
        gpus = parse_nvidia_smi(query_nvidia_smi())
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        found["nvidia_smi"] = f"not usable: {error}"
    else:
        found["driver"] = gpus[0].driver_version if gpus else None
        found["preflight"] = plan(gpus, {"GPU_TOPOLOGY": "one"}).lines
    if cuda:
        found["problems"] = check_training_device(async_grpo=False)
    return found


def run(stage: StageReport, settings: CheckSettings) -> None:
    """Gather the facts in a child; on ``--device cuda`` fail unless torch can use a GPU and the driver
    is new enough for it."""
    out = settings.work / "device.json"
    command = [sys.executable, "-m", "trainer.gpu.host_check.device", "--out", str(out)]
    command += ["--cuda"] if settings.device == "cuda" else []
    run_logged(command, Path(stage.log), stage.timeout_s, child_env(settings))
    found = json.loads(out.read_text())
    if settings.device == "cpu":
        stage.passed(**found)
        return
    problems = list(found.get("problems", []))
    if found.get("driver") and not driver_at_least(found["driver"]):
        problems.append(f"NVIDIA driver {found['driver']} is older than the CUDA 13.0 builds need (580)")
    if problems:
        stage.failed("; ".join(problems), **found)
    else:
        stage.passed(**found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cuda", action="store_true", help="also run the trainer's CUDA device check")
    args = parser.parse_args(argv)
    found = facts(args.cuda)
    args.out.write_text(json.dumps(found, indent=1))
    print(json.dumps(found, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
