"""``python -m trainer {grpo,async-grpo} --config FILE [--set KEY=VALUE ...]``."""

import argparse
import logging
import sys
from pathlib import Path

from .config import ConfigError, load_config

JOBS = ("grpo", "async-grpo")


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, load the config and run the job."""
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__)
    parser.add_argument("job", choices=JOBS)
    parser.add_argument("--config", type=Path, required=True,
                        help="YAML file (trainer/configs/*.yaml; a bare shipped name like grpo-cpu.yaml works too)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting, e.g. --set grpo.max_steps=5 (repeatable; also TRAINER_GRPO__MAX_STEPS)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    try:
        config = load_config(args.config, args.overrides)
        if config.get("job", args.job) != args.job:
            raise ConfigError(f"{args.config} is a {config['job']!r} config; run `python -m trainer {config['job']}`")
        if args.job == "grpo":
            from .grpo import run
        else:
            from .async_grpo import run
        run(config)
    except ConfigError as exc:
        print(f"trainer: configuration error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
