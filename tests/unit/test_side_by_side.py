"""Training jobs side by side (the default job's runner): prefixed output, each job's closing text
again at the end, the first failure's exit status, and bad --job arguments."""

import argparse
import io
import signal
import subprocess
import sys
import time

import pytest
from trainer.ops.side_by_side import Job, main, parse_job, run_side_by_side

pytestmark = pytest.mark.unit


def script(*lines: str, code: int = 0, delay_s: float = 0.0) -> list[str]:
    body = f"import time; time.sleep({delay_s})\n" + "".join(f"print({line!r})\n" for line in lines)
    return [sys.executable, "-c", body + f"raise SystemExit({code})"]


def test_output_is_prefixed_and_closing_texts_come_again_in_the_order_given():
    out = io.StringIO()
    jobs = [
        Job("async-grpo", script("step 1/2", "finished 2 optimizer steps", "reward: first 0.2", delay_s=0.3)),
        Job("grpo", script("step 1/80", "finished 80 optimizer steps", "held-out accuracy: 40% -> 70%")),
    ]
    assert run_side_by_side(jobs, out) == 0
    lines = out.getvalue().splitlines()
    assert "[grpo] step 1/80" in lines
    assert "[async-grpo] step 1/2" in lines
    # grpo ended first, but the closing texts follow the order given: its held-out line is last.
    tail = lines[-7:]
    assert tail[:6] == [
        "[async-grpo] done",
        "[async-grpo] finished 2 optimizer steps",
        "[async-grpo] reward: first 0.2",
        "[grpo] done",
        "[grpo] finished 80 optimizer steps",
        "[grpo] held-out accuracy: 40% -> 70%",
    ]
    assert tail[6].startswith("2 jobs side by side in 0 min")
    assert "failed" not in tail[6]


def test_stderr_stays_stderr_and_progress_redraws_keep_the_prefix():
    out, err = io.StringIO(), io.StringIO()
    bar = [sys.executable, "-c", "import sys; sys.stderr.write('training: 1/2\\rtraining: 2/2\\n'); print('step 2/2')"]
    assert run_side_by_side([Job("grpo", bar)], out, err) == 0
    assert err.getvalue() == "[grpo] training: 1/2\r[grpo] training: 2/2\n"
    assert out.getvalue().startswith("[grpo] step 2/2\n")


def test_a_failing_job_fails_the_run_after_the_others_have_finished():
    out = io.StringIO()
    jobs = [
        Job("grpo", script("config error", code=2)),
        Job("async-grpo", script("finished 1 optimizer steps", delay_s=0.5)),
        Job("eval", script(code=3)),
    ]
    assert run_side_by_side(jobs, out) == 2
    text = out.getvalue()
    assert "[grpo] exited with 2" in text
    assert "[eval] exited with 3" in text
    assert "[async-grpo] done\n[async-grpo] finished 1 optimizer steps" in text
    assert text.rstrip().endswith("failed: grpo, eval")


def test_sigterm_stops_every_job():
    runner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from trainer.ops.side_by_side import Job, run_side_by_side; "
            "sys.exit(run_side_by_side([Job('a', [sys.executable, '-c', 'print(1, flush=True); import time; "
            "time.sleep(60)']), Job('b', [sys.executable, '-c', 'import time; time.sleep(60)'])]))",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert runner.stdout.readline() == "[a] 1\n"
    runner.send_signal(signal.SIGTERM)
    started = time.monotonic()
    rest = runner.communicate(timeout=30)[0]
    assert time.monotonic() - started < 30
    assert runner.returncode != 0
    assert "[a] exited with" in rest
    assert "[b] exited with" in rest


@pytest.mark.parametrize("text", ["grpo", "=grpo-cpu.yaml", "grpo="])
def test_a_job_must_name_its_config(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected JOB=CONFIG"):
        parse_job(text)


def test_the_cli_runs_python_m_trainer_job_config():
    job = parse_job("async-grpo=async-grpo-cpu.yaml")
    assert job.label == "async-grpo"
    assert job.argv == [sys.executable, "-m", "trainer", "async-grpo", "--config", "async-grpo-cpu.yaml"]
    with pytest.raises(SystemExit):
        main([])
