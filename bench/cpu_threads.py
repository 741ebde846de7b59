"""Torch CPU threads on a shared machine: the CPU pre-training's step time per thread setting.

Runs `python -m trainer pretrain` (the shipped `grpo-cpu.yaml`, `policy-init`'s job, cut to its
first 50 skill steps) in the trainer image against the reasoning-gym env image, once per setting
(`pretrain.threads` 2, with OpenMP's spinning waits and with the image's `OMP_WAIT_POLICY=PASSIVE`,
and 1), first alone and then beside a second pre-training on
2 threads (what `make up` does when vllm-cpu compiles while the policy pre-trains). Prints seconds
per step, the speed-up over spinning threads, and whether the answer loss at step 50 is the same in
every run.

    python bench/cpu_threads.py [--tag dev] [--steps 50]
"""

import argparse
import re
import subprocess
import time
import uuid

from containers import pretraining_setup

# The image sets OMP_WAIT_POLICY=PASSIVE; ACTIVE is OpenMP's spinning default, as before.
SETTINGS = {
    "2 threads, spinning (OpenMP's default)": ("2", ["-e", "OMP_WAIT_POLICY=ACTIVE"]),
    "2 threads, OMP_WAIT_POLICY=PASSIVE (the image's)": ("2", ["-e", "OMP_WAIT_POLICY=PASSIVE"]),
    "1 thread": ("1", []),
}
LOADS = ("alone", "beside a 2-thread pre-training")
STEP = re.compile(r"pretrain skill: step (\d+) \| loss ([\d.]+) \| answer loss ([\d.]+) \| (\d+) s")


def pretrain(tag: str, net: str, models: str, threads: str, extra: list[str], steps: int) -> list[str]:
    """The ``docker run`` command of a pre-training cut to ``steps`` skill steps (it ends with the
    "did not learn" error, after its step log and held-out evaluation)."""
    return [
        "docker",
        "run",
        "--rm",
        "--network",
        net,
        "-v",
        f"{models}:/models",
        *extra,
        f"rlstack/trainer-cpu:{tag}",
        "pretrain",
        "--config",
        "grpo-cpu.yaml",
        "--set",
        f"model=/models/bench-{uuid.uuid4().hex[:6]}",
        "--set",
        f"pretrain.threads={threads}",
        "--set",
        f"pretrain.skill_steps={steps}",
        "--set",
        "pretrain.max_skill_steps=null",
    ]


def seconds_per_step(command: list[str], steps: int) -> tuple[float, str]:
    """Seconds per skill step over the first ``steps`` steps (from the job's own log), and the step's losses."""
    out = subprocess.run(command, capture_output=True, text=True)
    rows = [m for m in STEP.finditer(out.stdout + out.stderr) if int(m.group(1)) == steps]
    if not rows:
        raise SystemExit(f"no step-{steps} line:\n{(out.stdout + out.stderr)[-2000:]}")
    return int(rows[0].group(4)) / steps, f"{rows[0].group(2)}/{rows[0].group(3)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tag", default="dev")
    parser.add_argument("--steps", type=int, default=50, help="skill steps timed per run (the log has every 50th)")
    args = parser.parse_args()
    results: dict[tuple[str, str], tuple[float, str]] = {}
    with pretraining_setup(args.tag, "rlstack-threads") as (net, models):
        rival = None
        try:
            for load in LOADS:
                if load != LOADS[0]:
                    rival = subprocess.Popen(
                        pretrain(args.tag, net, models, "2", ["--name", f"{net}-rival"], 100_000),
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    time.sleep(20)  # past its question fetch and tokenizer: into its steps
                for label, (threads, extra) in SETTINGS.items():
                    results[label, load] = seconds_per_step(
                        pretrain(args.tag, net, models, threads, extra, args.steps), args.steps
                    )
        finally:
            if rival is not None:
                subprocess.run(["docker", "rm", "-f", f"{net}-rival"], capture_output=True)
                rival.wait()
    print(f"pre-training skill steps (grpo-cpu.yaml's pretrain section), first {args.steps} steps, 2 cores")
    print(f"{'setting':<50}{'alone s/step':>14}{'speed-up':>12}{'beside a job s/step':>21}{'speed-up':>12}")
    for label in SETTINGS:
        cells = []
        for load in LOADS:
            seconds = results[label, load][0]
            cells.append(
                f"{seconds:>{14 if not cells else 21}.3f}{results[next(iter(SETTINGS)), load][0] / seconds:>11.2f}x"
            )
        print(f"{label:<50}{''.join(cells)}")
    losses = {loss for _, loss in results.values()}
    print(
        f"loss / answer loss at step {args.steps}: {' '.join(sorted(losses))} "
        f"({'the same in every run' if len(losses) == 1 else 'DIFFERENT between runs'})"
    )


if __name__ == "__main__":
    main()
