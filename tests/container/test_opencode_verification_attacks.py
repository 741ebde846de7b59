"""Reward-integrity attacks on what runs after the agent: held-out checks that run the agent's code
(memory, disk, survivors that read the next check), a work dir made to blow up in its copy, racing
`/verify` calls, and model calls that overshoot the token budget or record past a stop string.
Each test fails on the code before these defences. See services/opencode_env/README.md "Threat model".
"""

import concurrent.futures
import time

import httpx
import pytest

from tests.container.conftest import program
from tests.container.test_opencode_attacks import close
from tests.container.test_opencode_env import REVERSE_TESTS, create, in_container, task

HOGS = {
    "memory": (program("check_memory_hog"), {"memory_mb": 128}, "memory limit"),
    "disk": (program("check_disk_hog"), {"disk_mb": 16}, "disk limit"),
}


def placed(url: str, files: dict, **fields) -> dict:
    """An external-agent rollout whose work dir holds ``files``, finished once they are placed."""
    rollout = create(url, task(files=files, **fields), agent="external")
    deadline = time.monotonic() + 60
    while httpx.get(f"{url}/rollouts/{rollout['rollout_id']}", timeout=30).json()["status"] == "pending":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    httpx.post(f"{url}/rollouts/{rollout['rollout_id']}/finish", timeout=30)
    return rollout


def verify(url: str, rollout: dict) -> dict:
    answer = httpx.post(f"{url}/rollouts/{rollout['rollout_id']}/verify", timeout=180)
    assert answer.status_code == 200, answer.text
    return answer.json()


def verifier_threads(container, rollout: dict) -> str:
    """Threads of the seat's verifier uid still alive in the container."""
    uid = int(in_container(container, "stat", "-c", "%u", f"/sandboxes/{rollout['rollout_id']}/work").stdout) + 10000
    found = in_container(container, "sh", "-c", f"grep -l '^Uid:\\s*{uid}\\s' /proc/[0-9]*/task/*/status")
    return found.stdout.strip()


@pytest.mark.parametrize("resource", list(HOGS))
def test_a_check_over_the_rollouts_limits_is_stopped_and_says_so(opencode_env, resource) -> None:
    url = opencode_env.url
    solution, limits, named = HOGS[resource]
    rollout = placed(url, {"solution.py": solution}, limits={"wall_s": 240, **limits})
    try:
        verdict = verify(url, rollout)
        assert verdict["reward"] is not None and verdict["reward"] < 1, verdict
        assert verdict["status"] == "limit_exceeded", verdict
        first, rest = verdict["results"][0], verdict["results"][1:]
        assert not first["passed"] and named in first["limit"], first
        assert all(not r["passed"] and "not run" in r["stderr"] for r in rest), rest
        assert named in verdict["reason"], verdict
        assert verify(url, rollout) == verdict  # asked again: the one result
        assert verifier_threads(opencode_env, rollout) == ""
    finally:
        close(url, rollout)


def test_no_check_survives_into_the_next_and_no_verifier_operation_into_the_next(opencode_env) -> None:
    url = opencode_env.url
    checks = ["python3 -P solution.py", "sleep 1; test -f held_out_marker_7731"]
    rollout = placed(url, {"solution.py": program("check_survivor")}, tests=[], verify_commands=checks)
    try:
        verdict = verify(url, rollout)
        assert [r["passed"] for r in verdict["results"]] == [True, False], verdict
        exec_url = f"{url}/rollouts/{rollout['rollout_id']}/sandbox/exec"
        left = httpx.post(exec_url, json={"command": "setsid sleep 61 >/dev/null 2>&1 </dev/null &"}, timeout=60)
        assert left.status_code == 200 and left.json()["context"] == "verification", left.text
        seen = httpx.post(exec_url, json={"command": 'pgrep -u "$(id -u)" -x sleep'}, timeout=60).json()
        assert seen["exit_code"] == 1, seen  # the previous operation's sleep is gone
        assert verifier_threads(opencode_env, rollout) == ""
    finally:
        close(url, rollout)


def test_the_work_dirs_copy_cannot_amplify(opencode_env) -> None:
    url = opencode_env.url
    limits = {"wall_s": 240, "disk_mb": 16}
    amplifier = {"files": {"amplify.py": program("copy_amplifier")}, "tests": [], "limits": limits}
    du_check = ["test $(du -sk . | cut -f1) -lt 16384"]
    links = create(
        url, task(setup=["python3 amplify.py links"], verify_commands=du_check, **amplifier), agent="external"
    )
    sparse = create(
        url, task(setup=["python3 amplify.py sparse"], verify_commands=["true"], **amplifier), agent="external"
    )
    try:
        for rollout in (links, sparse):
            deadline = time.monotonic() + 120
            while not httpx.get(f"{url}/rollouts/{rollout['rollout_id']}", timeout=30).json()["setup_results"]:
                assert time.monotonic() < deadline
                time.sleep(0.25)
            httpx.post(f"{url}/rollouts/{rollout['rollout_id']}/finish", timeout=30)
        linked = verify(url, links)  # 12 MB once: the checks see one file with 41 names, as the agent left it
        assert linked["reward"] == 1.0 and linked["status"] == "scored", linked
        spread = verify(url, sparse)  # 600 MB apparent: refused, not written out
        assert spread.get("status") == "limit_exceeded", spread
        assert "work dir copy" in spread["reason"] and "more than 16 MB" in spread["reason"], spread
        assert spread["reward"] == 0.0, spread
    finally:
        close(url, links, sparse)


def test_verify_is_one_result_for_concurrent_calls_and_harness_operations(opencode_env) -> None:
    url = opencode_env.url
    checks = ["sleep 3 && test -f solution.py"]
    rollout = placed(url, {"solution.py": "print(input()[::-1])\n"}, tests=REVERSE_TESTS, verify_commands=checks)
    base = f"{url}/rollouts/{rollout['rollout_id']}"
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            calls = [pool.submit(httpx.post, f"{base}/verify", timeout=180) for _ in range(3)]
            time.sleep(1)  # the first call's checks are running
            harness = pool.submit(httpx.post, f"{base}/sandbox/exec", json={"command": "cat solution.py"}, timeout=180)
            answers = [c.result() for c in calls]
            operation = harness.result()
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
        verdicts = [a.json() for a in answers]
        assert verdicts[0]["reward"] == 1.0 and verdicts[0]["status"] == "scored", verdicts[0]
        assert verdicts[1] == verdicts[0] == verdicts[2]
        assert operation.status_code == 200 and "[::-1]" in operation.json()["stdout"], operation.text
    finally:
        close(url, rollout)


def chat(url: str, key: str, **body) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"messages": [{"role": "user", "content": "hi"}], **body},
        timeout=180,
    )


def test_parallel_model_calls_cannot_overshoot_the_token_budget(opencode_env) -> None:
    url = opencode_env.url
    rollout = create(url, task(limits={"wall_s": 240, "max_turns": 8, "max_completion_tokens": 30}), agent="external")
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: chat(url, rollout["api_key"]), range(4)))
        assert 429 in [a.status_code for a in answers], [a.text for a in answers]
        turns = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/turns", timeout=30).json()
        assert sum(len(t["completion_token_ids"]) for t in turns) <= 30, [len(t["completion_token_ids"]) for t in turns]
        assert httpx.get(f"{url}/rollouts/{rollout['rollout_id']}", timeout=30).json()["completion_tokens"] <= 30
    finally:
        close(url, rollout)


BASH_TOOL = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
}


def test_a_reply_cut_at_a_stop_string_is_not_trained_on(opencode_env) -> None:
    url = opencode_env.url
    rollout = create(url, task(), agent="external")
    try:
        answer = chat(url, rollout["api_key"], tools=[BASH_TOOL], stop=["solution"])
        assert answer.status_code == 200, answer.text
        [turn] = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/turns", timeout=30).json()
        # The agent got the text up to the stop string; the engine's ids ran past it, and the agent's
        # next prompt cannot extend them: the turn is recorded, and marked untrainable.
        assert turn["stopped_at"] == "solution", turn["response"]
        assert turn["trainable"] is False
        assert "solution" not in (answer.json()["choices"][0]["message"].get("content") or "")
    finally:
        close(url, rollout)
