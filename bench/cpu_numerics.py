"""What the pinned CPU arithmetic costs: pre-training step time with the trainer's pinned kernels
(ATen's AVX2 build, MKL's AVX2 branch: the same weights on every x86-64 CPU) against the machine's
own (ATen's best build for this CPU, MKL's automatic branch).

Runs `python -m trainer pretrain` (the shipped `grpo-cpu.yaml`, `policy-init`'s job, cut to its
first skill steps) in the trainer image against the reasoning-gym env image, alternating the two
settings ``--repeats`` times each, nothing else running. Prints seconds per step for each run, the
mean ratio, and the losses at the last timed step (the same within a setting; the machine's own
kernels round differently, which is why the trainer pins them).

    python bench/cpu_numerics.py [--tag dev] [--steps 100] [--repeats 2]
"""

import argparse
import statistics
from pathlib import Path

from containers import pretraining_setup
from cpu_threads import pretrain, seconds_per_step

PINNED = "pinned (ATEN_CPU_CAPABILITY=avx2, MKL_CBWR=AVX2)"


def best_capability() -> str:
    """ATen's best kernel build for this machine's CPU (from the host's CPU flags)."""
    flags = set(Path("/proc/cpuinfo").read_text().split())
    return "avx512" if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags else "avx2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tag", default="dev")
    parser.add_argument("--steps", type=int, default=100, help="skill steps timed per run (the log has every 50th)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    capability = best_capability()
    own = f"the machine's own (ATEN_CPU_CAPABILITY={capability}, MKL_CBWR=AUTO)"
    settings = {
        PINNED: [],  # the trainer's default
        own: ["-e", f"ATEN_CPU_CAPABILITY={capability}", "-e", "MKL_CBWR=AUTO"],
    }
    runs: dict[str, list[tuple[float, str]]] = {label: [] for label in settings}
    with pretraining_setup(args.tag, "rlstack-numerics") as (net, models):
        for _ in range(args.repeats):
            for label, extra in settings.items():
                runs[label].append(
                    seconds_per_step(pretrain(args.tag, net, models, "2", extra, args.steps), args.steps)
                )
    print(f"pre-training skill steps (grpo-cpu.yaml's pretrain section), first {args.steps} steps, 2 threads")
    mean = {label: statistics.mean(s for s, _ in rows) for label, rows in runs.items()}
    for label, rows in runs.items():
        per_run = " ".join(f"{s:.3f}" for s, _ in rows)
        losses = sorted({loss for _, loss in rows})
        print(f"{label:<62} s/step {per_run} (mean {mean[label]:.3f}); loss / answer loss {' '.join(losses)}")
    print(f"the pinned arithmetic takes {mean[PINNED] / mean[own]:.2f}x the machine's own time per step")


if __name__ == "__main__":
    main()
