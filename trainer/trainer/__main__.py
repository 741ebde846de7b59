"""``python -m trainer {grpo,async-grpo,eval,pretrain,config} --config FILE [--set KEY=VALUE ...] [--dry-run]``.

``eval`` evaluates a model (``--model``: the base model, a checkpoint, ``final/``; default the
config's) on the held-out questions of a GRPO config, or on the held-out coding tasks of an
AsyncGRPO config (with the model the inference service serves). ``pretrain`` makes the config's
``model`` from its ``pretrain`` section (``--if-missing``: unless it is already there). ``config``
prints the effective configuration (with ``--config``) and the reference of every key.
"""

import argparse
import json
import logging
import sys
from pathlib import Path

import yaml

from .config import ConfigError, load_config
from .config.reference import effective, reference
from .cpu.numerics import pin_cpu_numerics
from .envs.errors import EnvUnavailable

JOBS = ("grpo", "async-grpo", "eval", "pretrain", "config")
# Jobs whose figures the README quotes for the CPU path: one arithmetic on every x86-64 CPU.
PINNED_NUMERICS_JOBS = ("grpo", "eval", "pretrain")


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, load the config and run the job."""
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__)
    parser.add_argument("job", choices=JOBS)
    parser.add_argument(
        "--config",
        type=Path,
        help="YAML file (trainer/trainer/configs/*.yaml; a bare shipped name like grpo-cpu.yaml works too); "
        "required except for `config`",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, e.g. --set grpo.max_steps=5 (repeatable; also TRAINER_GRPO__MAX_STEPS)",
    )
    parser.add_argument("--model", help="eval: the model to evaluate (default: the config's model)")
    parser.add_argument(
        "--generate",
        choices=("local", "inference"),
        help="eval: generate in this process or on the inference service (default: eval.generate)",
    )
    parser.add_argument("--out", type=Path, help="eval: where eval.json goes (default: OUTPUT_DIR/eval.json)")
    parser.add_argument(
        "--if-missing",
        action="store_true",
        help="pretrain: do nothing if the model folder already holds what these settings make",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        metavar="DIR",
        help="pretrain: copy a policy made before from the same inputs from DIR, and keep a new one there",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="grpo/async-grpo: validate the config, build TRL's config objects, print what TRL would "
        "get (sampling settings, dtypes, memory settings) as JSON, and stop before loading the "
        "model; needs no GPU and no service",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    if args.config is None and args.job != "config":
        parser.error(f"{args.job} needs --config FILE")
    if args.job in PINNED_NUMERICS_JOBS:
        pin_cpu_numerics()  # before anything imports torch (loading a GRPO config imports TRL)
    try:
        if args.job == "config":
            print(config_text(args.config, args.overrides), flush=True)
            return 0
        training = args.job in ("grpo", "async-grpo")
        config = load_config(
            args.config,
            args.overrides + ([f"eval.generate={args.generate}"] if args.generate else []),
            job=args.job if training else None,
        )
        if not args.dry_run:
            limit_cpu_threads(config.cpu_threads)
        if args.job == "eval":
            from .jobs.eval import run as evaluate

            evaluate(config, args.model, args.out)
            return 0
        if args.job == "pretrain":
            from .jobs import pretrain

            if config.job != "grpo":
                raise ConfigError(f"{args.config} is a {config.job!r} config; pretrain makes a GRPO config's policy")
            manifest = pretrain.already_done(config) if args.if_missing else None
            if manifest is not None:
                print(
                    f"trainer: {config.model} already holds this pre-trained policy; "
                    f"its {pretrain.starting_point(manifest)}",
                    flush=True,
                )
            else:
                pretrain.run(config, args.cache)
            return 0
        if args.job == "grpo":
            from .jobs.grpo import plan, run
        else:
            from .jobs.async_grpo import plan, run
        if args.dry_run:
            print(json.dumps(plan(config), indent=2, default=str))
            return 0
        run(config)
    except ConfigError as exc:
        print(f"trainer: configuration error: {exc}", file=sys.stderr)
        return 2
    except EnvUnavailable as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return 3
    return 0


def limit_cpu_threads(threads: int) -> None:
    """Run torch's CPU kernels on ``threads`` threads (0: leave torch's default, one per core).

    Measured on 2 cores with the CPU pre-training's tiny model (``bench/cpu_threads.py``): 2 threads
    0.22 s a step alone and 0.92 s beside another 2-thread job (OpenMP threads spin-wait on a
    preempted peer), 1 thread 0.32 s and 0.38 s; the CPU trainer image's ``OMP_WAIT_POLICY=PASSIVE``
    gives 2 threads 0.24 s and 0.38 s. The weights come out the same either way."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def config_text(path: Path | None, overrides: list[str]) -> str:
    """``python -m trainer config``: the effective configuration of ``path`` (overrides applied,
    defaults filled in), then the reference of every key."""
    parts = []
    if path is not None:
        config = effective(load_config(path, overrides))
        parts += [
            f"# effective configuration of {path} (file, then TRAINER_* variables, then --set; defaults filled in)",
            yaml.safe_dump(config, sort_keys=False, width=120).rstrip(),
            "",
        ]
    parts += [
        "# every key: path (type, default) meaning; set with --set KEY=VALUE or TRAINER_KEY__SUBKEY=VALUE",
        reference(),
    ]
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
