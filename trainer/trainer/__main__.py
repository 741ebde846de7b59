"""``python -m trainer {grpo,async-grpo,eval,pretrain} --config FILE [--set KEY=VALUE ...] [--dry-run]``.

``eval`` evaluates a model (``--model``: the base model, a checkpoint, ``final/``; default the
config's) on the held-out questions of a GRPO config, or on the held-out coding tasks of an
AsyncGRPO config (with the model the inference service serves). ``pretrain`` makes the config's
``model`` from its ``pretrain`` section (``--if-missing``: unless it is already there).
"""

import argparse
import json
import logging
import sys
from pathlib import Path

from .config import ConfigError, load_config
from .reasoning_gym_tools import EnvUnavailable

JOBS = ("grpo", "async-grpo", "eval", "pretrain")


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, load the config and run the job."""
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__)
    parser.add_argument("job", choices=JOBS)
    parser.add_argument("--config", type=Path, required=True,
                        help="YAML file (trainer/configs/*.yaml; a bare shipped name like grpo-cpu.yaml works too)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting, e.g. --set grpo.max_steps=5 (repeatable; also TRAINER_GRPO__MAX_STEPS)")
    parser.add_argument("--model", help="eval: the model to evaluate (default: the config's model)")
    parser.add_argument("--generate", choices=("local", "inference"),
                        help="eval: generate in this process or on the inference service (default: eval.generate)")
    parser.add_argument("--out", type=Path, help="eval: where eval.json goes (default: OUTPUT_DIR/eval.json)")
    parser.add_argument("--if-missing", action="store_true",
                        help="pretrain: do nothing if the model folder already holds what these settings make")
    parser.add_argument("--dry-run", action="store_true",
                        help="grpo/async-grpo: validate the config, build TRL's config objects, print what TRL would "
                             "get (sampling settings, dtypes, memory settings) as JSON, and stop before loading the "
                             "model; needs no GPU and no service")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    try:
        config = load_config(args.config, args.overrides + ([f"eval.generate={args.generate}"] if args.generate else []))
        if args.job == "eval":
            from .evaluate import run as evaluate

            evaluate(config, args.model, args.out)
            return 0
        if args.job == "pretrain":
            from . import pretrain

            if args.if_missing and pretrain.already_done(config):
                print(f"trainer: {config['model']} already holds this pre-trained policy", flush=True)
            else:
                pretrain.run(config)
            return 0
        if config.get("job", args.job) != args.job:
            raise ConfigError(f"{args.config} is a {config['job']!r} config; run `python -m trainer {config['job']}`")
        if args.job == "grpo":
            from .grpo import plan, run
        else:
            from .async_grpo import plan, run
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


if __name__ == "__main__":
    sys.exit(main())
