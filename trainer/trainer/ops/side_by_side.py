"""``python -m trainer.ops.side_by_side --job JOB=CONFIG [--job JOB=CONFIG ...]``: training jobs at once.

Each job runs as ``python -m trainer JOB --config CONFIG`` in this environment (a ``TRAINER_*``
variable of one job's section is read by that job and skipped by the other). Each job's output
lines are prefixed with ``[JOB]``, stdout to stdout and stderr (log records, progress bars: every
``\r`` redraw keeps the prefix) to stderr. When all have ended, each job's
closing text (from its ``finished N optimizer steps`` line on) is printed again, in the order given,
and the exit status is the first failing job's (0 if none failed). SIGTERM/SIGINT stop every job.

Why the default job uses it: one job alone leaves a small host's cores partly idle (CPU GRPO keeps
about 1.1 of 2 cores busy; AsyncGRPO waits on OpenCode's server start-ups), so its two jobs run at
once (docs/benchmarks.md: the CPU default job).
"""

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import BinaryIO, TextIO

CLOSING = "finished "  # summarize()'s first line: "finished N optimizer steps"


@dataclass
class Job:
    """One job: its label, its command, and what it printed from its closing text on."""

    label: str
    argv: list[str]
    closing: list[str] = field(default_factory=list)
    process: subprocess.Popen | None = None


def run_side_by_side(jobs: list[Job], out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Start every job, relay their output line by line with ``[label]`` prefixes, wait for all of
    them; returns the first failing job's exit status, else 0."""
    started = time.monotonic()
    lock = threading.Lock()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # Before the first job prints: a signal once its output is relayed must stop the jobs, not us alone.
    previous = {sig: signal.signal(sig, lambda *_: _stop(jobs)) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for job in jobs:
            job.process = subprocess.Popen(job.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        relays = [
            threading.Thread(target=_relay, args=(job, stream, target, lock), daemon=True)
            for job in jobs
            for stream, target in ((job.process.stdout, out), (job.process.stderr, err))
        ]
        for relay in relays:
            relay.start()
        codes = [job.process.wait() for job in jobs]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for relay in relays:
        relay.join(timeout=10)
    for job, code in zip(jobs, codes):
        print(f"[{job.label}] " + (f"exited with {code}" if code else "done"), file=out)
        for line in job.closing:
            print(f"[{job.label}] {line}", file=out)
    minutes, seconds = divmod(round(time.monotonic() - started), 60)
    failed = [job.label for job, code in zip(jobs, codes) if code]
    print(
        f"{len(jobs)} jobs side by side in {minutes} min {seconds:02d} s"
        + (f"; failed: {', '.join(failed)}" if failed else ""),
        file=out,
        flush=True,
    )
    return next((code for code in codes if code), 0)


def _relay(job: Job, stream: BinaryIO, target: TextIO, lock: threading.Lock) -> None:
    prefix = f"[{job.label}] "
    for raw in stream:  # split on "\n" only: a progress bar's "\r" redraws stay on their line
        line = raw.decode(errors="replace").rstrip("\n")
        if stream is job.process.stdout and (line.startswith(CLOSING) or job.closing):
            job.closing.append(line)
        with lock:
            print(prefix + line.replace("\r", "\r" + prefix), file=target, flush=True)


def _stop(jobs: list[Job]) -> None:
    for job in jobs:
        if job.process is not None and job.process.poll() is None:
            job.process.terminate()


def parse_job(text: str) -> Job:
    """``JOB=CONFIG`` -> the job ``python -m trainer JOB --config CONFIG``."""
    name, sep, config = text.partition("=")
    if not sep or not name or not config:
        raise argparse.ArgumentTypeError(f"expected JOB=CONFIG (e.g. grpo=grpo-cpu.yaml), got {text!r}")
    return Job(name, [sys.executable, "-m", "trainer", name, "--config", config])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.ops.side_by_side",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--job", dest="jobs", action="append", type=parse_job, required=True, metavar="JOB=CONFIG")
    return run_side_by_side(parser.parse_args(argv).jobs)


if __name__ == "__main__":
    sys.exit(main())
