"""Does the default CPU GRPO job learn? Held-out accuracy before and after, per seed.

Runs what `make up` runs for the shipped `grpo-cpu.yaml` job in the trainer image against the
reasoning-gym env image on a private Docker network: `model-init`'s base model, `policy-init`'s
pre-training (once: it is deterministic), then the GRPO job once per seed. Prints the pre-training
time, and per seed: held-out accuracy (sampled at the training temperature, and greedy) before and
after training with the paired 95% interval of the change, the training reward of the first and
last steps, the distinct questions a training step's rollouts answered (from the job's
`rollouts.jsonl`; with `question_seeds: per_group`, one per GRPO group), and wall time per phase
(evaluation before, training, evaluation after); then each
seed's training reward curve (mean per 10 steps) and on how many seeds each target was met. Targets
live here, not in tests: +20 points sampled and a greedy gain, every seed; the whole default job
(with the OpenCode part, `bench/opencode_learning_cpu.py`) within 8 minutes.

    python bench/learning_cpu.py [--seeds 42 43 44] [--tag dev] [--set KEY=VALUE ...]
"""

import argparse
import json
import re
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

from containers import pretraining_setup

TARGET_POINTS, TARGET_SECONDS = 20.0, 8 * 60
BLOCK = 10  # steps per point of the printed reward curve
STAMP = re.compile(
    r"^(\d\d:\d\d:\d\d) INFO trainer\.(?:jobs\.grpo|evaluation\.reasoning_gym): "
    r"(GRPO:|held-out evaluation \((before|after)\))"
)


def phases(log: str) -> dict[str, float]:
    """Seconds of each phase, from the job's time-stamped log lines."""
    marks = {}
    for line in log.splitlines():
        match = STAMP.match(line)
        if match:
            marks[match.group(3) or "start"] = datetime.strptime(match.group(1), "%H:%M:%S")
    if not {"start", "before", "after"} <= set(marks):
        return {}
    return {
        "eval before + load": (marks["before"] - marks["start"]).total_seconds(),
        "train + eval after": (marks["after"] - marks["before"]).total_seconds(),
    }


def reward_curve(rewards: list[float], block: int) -> str:
    """The mean reward of each ``block`` steps, e.g. ``0.41 0.46 0.70``."""
    return " ".join(f"{sum(b) / len(b):.2f}" for b in (rewards[i : i + block] for i in range(0, len(rewards), block)))


def questions_per_step(rollouts: Path) -> float:
    """Mean number of distinct questions the rollouts of one training step answered."""
    asked: dict[int, set[str]] = {}
    for line in rollouts.read_text().splitlines():
        row = json.loads(line)
        asked.setdefault(row["step"], set()).add(row["question"])
    return sum(len(q) for q in asked.values()) / max(1, len(asked))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--tag", default="dev")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    with pretraining_setup(args.tag, "rlstack-learn") as (net, models):
        began = time.monotonic()
        pretrain = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                net,
                "-v",
                f"{models}:/models",
                f"rlstack/trainer-cpu:{args.tag}",
                "pretrain",
                "--config",
                "grpo-cpu.yaml",
                *[a for o in args.overrides for a in ("--set", o)],
            ],
            capture_output=True,
            text=True,
        )
        if pretrain.returncode != 0:
            raise SystemExit(f"pre-training failed:\n{(pretrain.stdout + pretrain.stderr)[-3000:]}")
        lines = (pretrain.stdout + pretrain.stderr).splitlines()
        done = next(line for line in lines if "pretrain: wrote" in line).split("pretrain: ")[-1]
        start = next(line for line in lines if "pretrain: the policy's" in line).split("the policy's ")[-1]
        print(f"pre-training (policy-init): {time.monotonic() - began:.0f} s; {done}\nthe policy's {start}")
        print(
            f"default CPU GRPO job (grpo-cpu.yaml), {len(args.seeds)} seeds; targets: >= +{TARGET_POINTS:g} pts "
            f"sampled and a greedy gain on every seed, <= {TARGET_SECONDS / 60:g} min"
        )
        print(
            f"{'seed':>5}{'sampled before':>16}{'after':>8}{'change (95% CI)':>24}{'greedy before':>15}{'after':>8}"
            f"{'reward first/last 3':>21}{'questions/step':>16}{'job s':>8}  phases"
        )
        curves, gains, greedy_gains = {}, {}, {}
        for seed in args.seeds:
            with tempfile.TemporaryDirectory(prefix="rlstack-learn-") as out:
                Path(out).chmod(0o777)
                began = time.monotonic()
                run = subprocess.run(
                    [
                        "docker",
                        "run",
                        "--rm",
                        "--network",
                        net,
                        "-v",
                        f"{models}:/models:ro",
                        "-v",
                        f"{out}:/outputs",
                        f"rlstack/trainer-cpu:{args.tag}",
                        "grpo",
                        "--config",
                        "grpo-cpu.yaml",
                        "--set",
                        "output_dir=/outputs/grpo",
                        "--set",
                        f"seed={seed}",
                        "--set",
                        "grpo.report_to=[]",
                        *[a for o in args.overrides for a in ("--set", o)],
                    ],
                    capture_output=True,
                    text=True,
                )
                seconds = time.monotonic() - began
                if run.returncode != 0:
                    raise SystemExit(f"seed {seed}: the job failed:\n{(run.stdout + run.stderr)[-3000:]}")
                summary = json.loads((Path(out) / "grpo" / "summary.json").read_text())
                questions = questions_per_step(Path(out) / "grpo" / "rollouts.jsonl")
            held = summary["held_out"]
            sampled, greedy = held[next(m for m in held if m.startswith("T="))], held.get("greedy", {})
            rewards = [r for r in summary["rewards"] if r is not None]
            n = min(3, len(rewards))
            print(
                f"{seed:>5}{100 * sampled['before']:>15.1f}%{100 * sampled['after']:>7.1f}%"
                f"{sampled['points']:>+9.1f} ({sampled['ci_low']:+.1f}..{sampled['ci_high']:+.1f})"
                f"{100 * greedy.get('before', 0):>14.1f}%{100 * greedy.get('after', 0):>7.1f}%"
                f"{sum(rewards[:n]) / n:>12.3f} / {sum(rewards[-n:]) / n:.3f}{questions:>16.1f}{seconds:>8.0f}  "
                + ", ".join(f"{k} {v:.0f} s" for k, v in phases(run.stdout + run.stderr).items())
            )
            curves[seed], gains[seed], greedy_gains[seed] = rewards, sampled["points"], greedy.get("points", 0.0)
        print(f"\ntraining reward, mean of each {BLOCK} steps:")
        for seed, rewards in curves.items():
            print(f"{seed:>5}  {reward_curve(rewards, BLOCK)}")
        met = sum(points >= TARGET_POINTS for points in gains.values())
        print(f"held-out gain >= +{TARGET_POINTS:g} pts sampled: {met} of {len(gains)} seeds")
        greedy_met = sum(points > 0 for points in greedy_gains.values())
        print(f"held-out greedy accuracy higher after training: {greedy_met} of {len(greedy_gains)} seeds")


if __name__ == "__main__":
    main()
