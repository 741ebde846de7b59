"""The weight-sync client's call sequence and failure handling (vLLM replaced by a recording stub)."""

import json
from pathlib import Path

import httpx
import pytest
from inference_client import WeightSyncClient, WeightSyncError, publish_checkpoint


class StubServer:
    """Answers vLLM's dev-mode routes and records the calls; ``fail`` names a path to answer 500."""

    def __init__(self, fail: str | None = None, hang: str | None = None) -> None:
        self.calls: list[str] = []
        self.version = "default"
        self.fail, self.hang = fail, hang

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls.append(path)
        if path == self.hang:
            raise httpx.ReadTimeout("timed out", request=request)
        if path == self.fail:
            return httpx.Response(500, text="boom")
        if path == "/update_weight_version":
            self.version = json.loads(request.content)["new_version"]
        if path == "/weight_info":
            return httpx.Response(200, json={"weight_version": self.version})
        if path == "/collective_rpc":
            return httpx.Response(200, json={"results": [None]})
        return httpx.Response(200, json={})


def client(stub: StubServer) -> WeightSyncClient:
    return WeightSyncClient("http://inference:8000", timeout_s=1, transport=httpx.MockTransport(stub))


def test_reload_pauses_reloads_resets_versions_and_resumes_in_order() -> None:
    stub = StubServer()
    assert client(stub).reload("/weights/step-3", "step-3") == "step-3"
    assert stub.calls == [
        "/pause",
        "/collective_rpc",
        "/reset_prefix_cache",
        "/update_weight_version",
        "/resume",
        "/weight_info",
    ]


@pytest.mark.parametrize("step", ["/collective_rpc", "/reset_prefix_cache", "/update_weight_version"])
def test_a_failing_step_raises_naming_it_and_the_server_is_resumed(step: str) -> None:
    stub = StubServer(fail=step)
    with pytest.raises(WeightSyncError, match="HTTP 500"):
        client(stub).reload("/weights/x", "x")
    assert stub.calls[-1] == "/resume"


def test_a_hanging_server_times_out_loudly() -> None:
    with pytest.raises(WeightSyncError, match="no answer .* within 1s"):
        client(StubServer(hang="/collective_rpc")).reload("/weights/x", "x")


def test_worker_errors_in_the_rpc_result_fail_the_update() -> None:
    stub = StubServer()
    original = stub.__call__

    def with_worker_error(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/collective_rpc":
            stub.calls.append(request.url.path)
            return httpx.Response(200, json={"results": ["FileNotFoundError: /weights/x"]})
        return original(request)

    sync = WeightSyncClient("http://inference:8000", timeout_s=1, transport=httpx.MockTransport(with_worker_error))
    with pytest.raises(WeightSyncError, match="workers reported"):
        sync.reload("/weights/x", "x")
    assert stub.version == "default"


def test_unreachable_server_is_an_error() -> None:
    with pytest.raises(WeightSyncError, match="unreachable"):
        WeightSyncClient("http://127.0.0.1:9", timeout_s=1).reload("/w", "v")


class FakeModel:
    def __init__(self, payload: str) -> None:
        self.payload = payload

    def save_pretrained(self, save_directory: str, **kwargs: object) -> None:
        assert kwargs.get("safe_serialization") is True
        Path(save_directory).mkdir(parents=True, exist_ok=True)
        (Path(save_directory) / "model.safetensors").write_text(self.payload)


def test_publish_checkpoint_is_atomic_and_keeps_the_newest(tmp_path: Path) -> None:
    for step in range(4):
        path = publish_checkpoint(FakeModel(f"w{step}"), tmp_path, f"step-{step}", keep=2)
        assert (path / "model.safetensors").read_text() == f"w{step}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-2", "step-3"]
