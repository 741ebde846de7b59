"""The GPU image's build-time kernel download: it downloads what TRL loads, and never imports it
(importing needs libcuda, which a build has not)."""

import sys
import types

import pytest
from trainer.gpu import precache_fa3


def test_the_kernel_is_downloaded_not_imported(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    calls = []

    def install_kernel(repo_id: str, *, version: int) -> str:
        calls.append((repo_id, version))
        return "/opt/kernels-cache/flash-attn3/variant"

    def get_kernel(*args: object, **kwargs: object) -> None:
        raise AssertionError("get_kernel imports the kernel's shared library: it needs libcuda.so.1")

    fake = types.ModuleType("kernels")
    fake.install_kernel = install_kernel
    fake.get_kernel = get_kernel
    monkeypatch.setitem(sys.modules, "kernels", fake)
    assert precache_fa3.main() == 0
    assert calls == [("kernels-community/flash-attn3", 1)]  # trl/experimental/async_grpo/packing.py
    assert "/opt/kernels-cache/flash-attn3/variant" in capsys.readouterr().out
