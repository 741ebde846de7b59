"""`make up` (scripts/up.sh) brings the stack up, runs the default job, and `down -v` removes it."""

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import httpx

from tests.container.conftest import ROOT, left_by_project


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


E2E_STEPS = 6
E2E_ASYNC_STEPS = 2


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def dashboard_page(url: str, screenshot: Path) -> str:
    """The dashboard's DOM after its scripts ran, from Debian's Chromium in headless mode; saves a screenshot."""
    chrome = [
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1400,2400",
        "--virtual-time-budget=20000",
    ]
    subprocess.run([*chrome, f"--screenshot={screenshot}", url], check=True, capture_output=True, timeout=120)
    return subprocess.run([*chrome, "--dump-dom", url], check=True, capture_output=True, text=True, timeout=120).stdout


def test_one_command_runs_the_whole_loop(trainer_image: str, base_image: str, tmp_path: Path) -> None:
    """The CPU stack comes up (GRPO first, the services it does not need while it trains), the default
    job runs to the end with its outputs, an env restart mid-run does not kill it, the services are
    healthy, the dashboard shows the run, and `down -v` leaves nothing."""
    ports = {
        name: _free_port()
        for name in ("REASONING_GYM_ENV_PORT", "INFERENCE_PORT", "OPENCODE_ENV_PORT", "DASHBOARD_PORT")
    }
    env = {
        **os.environ,
        "COMPOSE_PROJECT_NAME": "rlstack-test-compose",
        "BASE_IMAGE": base_image,
        "GRPO_MAX_STEPS": str(E2E_STEPS),
        "ASYNC_GRPO_MAX_STEPS": str(E2E_ASYNC_STEPS),
        **{k: str(v) for k, v in ports.items()},
    }
    compose = ["docker", "compose"]
    cache = tmp_path / "policy-cache"
    env["POLICY_CACHE_DIR"] = str(cache)
    try:
        # `make up`'s own script: GRPO starts once the policy is ready, while inference compiles.
        job = subprocess.Popen(
            ["bash", "scripts/up.sh"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        log, restarted = [], False
        for line in job.stdout:  # the job's own output, as a user sees it
            log.append(line)
            if not restarted and line.startswith("[grpo] step 2/"):
                subprocess.run([*compose, "restart", "reasoning-gym-env"], cwd=ROOT, env=env, check=True)
                restarted = True
        job.wait(timeout=60)
        text = "".join(log)
        assert job.returncode == 0, text[-5000:]
        assert restarted
        assert re.search(r"make up: policy ready; the job starts .*\(\d+ s\)", text)
        assert re.search(r"held-out accuracy \(200 questions of seed 1042\): T=1\.0 [\d.]+%, greedy [\d.]+%", text)
        assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 1  # the policy, kept for next time

        health = httpx.get(f"http://127.0.0.1:{ports['REASONING_GYM_ENV_PORT']}/health", timeout=5).json()
        assert health["status"] == "healthy"
        assert health["max_sessions"] == 64
        inference = f"http://127.0.0.1:{ports['INFERENCE_PORT']}"
        assert [m["id"] for m in httpx.get(f"{inference}/v1/models", timeout=5).json()["data"]] == [
            "rlstack/tiny-qwen3"
        ]
        opencode = httpx.get(f"http://127.0.0.1:{ports['OPENCODE_ENV_PORT']}/health", timeout=5).json()
        assert opencode["network_isolation"] is True
        assert opencode["inference_url"] == "http://inference:8000"
        assert f"[grpo] step {E2E_STEPS}/{E2E_STEPS} | reward" in text
        assert f"[async-grpo] step {E2E_ASYNC_STEPS}/{E2E_ASYNC_STEPS} | reward" in text  # AsyncGRPO beside it
        # Both closing texts again at the end, GRPO's (with the held-out accuracy) last.
        closing = text[text.rindex("[async-grpo] done") :]
        assert f"[async-grpo] finished {E2E_ASYNC_STEPS} optimizer steps" in closing
        assert re.search(r"\[grpo\] done\n\[grpo\] finished \d+ optimizer steps\n", closing)
        assert re.search(r"\[grpo\] held-out accuracy \(greedy, 200 questions\).*\n2 jobs side by side in", closing)

        out = tmp_path / "outputs"
        subprocess.run([*compose, "cp", "trainer:/outputs", str(out)], cwd=ROOT, env=env, check=True)
        grpo = out / "grpo-cpu"
        assert [m["step"] for m in read_jsonl(grpo / "metrics.jsonl")] == list(range(1, E2E_STEPS + 1))
        for name in ("reward.png", "summary.json", "eval.json", "final/model.safetensors"):
            assert (grpo / name).exists(), name
        # The pre-trained policy was evaluated before and after, on held-out questions.
        assert re.search(r"held-out accuracy \(T=1\.0, 200 questions\): [\d.]+% -> [\d.]+% \([+-][\d.]+ pts", text)
        held_out = json.loads((grpo / "summary.json").read_text())["held_out"]["T=1.0"]
        assert 0.0 < held_out["before"] < 1.0
        assert 0.0 <= held_out["after"] <= 1.0
        assert any((grpo / "checkpoints").iterdir())
        # The env restart cost no question: every step still got the next one (reconnect + replay),
        # and an answer lost to it (if any) is unscored, not scored 0.
        rollouts = read_jsonl(grpo / "rollouts.jsonl")
        assert sorted({r["question_index"] for r in rollouts}) == list(range(E2E_STEPS))
        assert all(r["reward"] is None for r in rollouts if r["error"])
        rows = read_jsonl(out / "async-grpo-cpu" / "rows.jsonl")
        assert rows
        assert all(r["trained_tokens"] > 0 for r in rows)
        metrics = read_jsonl(out / "async-grpo-cpu" / "metrics.jsonl")
        assert [m["weight_version"] for m in metrics] == [f"step-{i}" for i in range(1, E2E_ASYNC_STEPS + 1)]
        assert all(m["logprob_max_diff"] <= 1e-3 for m in metrics), metrics
        sessions = read_jsonl(out / "async-grpo-cpu" / "sessions.jsonl")
        traces = subprocess.run(
            [*compose, "exec", "-T", "opencode-env", "ls", "/data/traces"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        assert {f"{s['rollout_id']}.json" for s in sessions} <= set(traces)

        screenshot = Path(os.environ.get("RLSTACK_SCREENSHOT", tmp_path / "dashboard.png"))
        page = dashboard_page(f"http://127.0.0.1:{ports['DASHBOARD_PORT']}/", screenshot)
        assert "grpo-cpu" in page
        assert "reward" in page
        # The first screen: the held-out table (summary.json's figures), the training reward, then the
        # held-out accuracy plot; TRL's profiling timers last.
        row = (
            f'<td>grpo-cpu</td><td>T=1.0</td><td class="n">{100 * held_out["before"]:.1f}% (step 0)</td>'
            f'<td class="n">{100 * held_out["after"]:.1f}% (step {E2E_STEPS})</td>'
        )
        assert row in page
        assert page.index(row) < page.index("train/reward")
        assert page.index("train/reward") < page.index("train/held_out_accuracy_T=1.0") < page.index("profiling/")
        assert screenshot.stat().st_size > 10_000
    finally:
        subprocess.run([*compose, "down", "-v", "--remove-orphans"], cwd=ROOT, env=env, check=True)
    assert left_by_project("rlstack-test-compose") == []
    assert left_by_project("rlstack-test-compose", "volume") == []
