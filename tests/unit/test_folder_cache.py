"""The cache of deterministically made folders (the CPU policy): copied back whole or not at all."""

from pathlib import Path

import pytest
from trainer.training.folder_cache import cache_key, restore, store

pytestmark = pytest.mark.unit


def made(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "manifest.json").write_text("{}")
    return folder


def test_a_stored_folder_comes_back_under_its_key(tmp_path: Path) -> None:
    key = cache_key({"recipe": {"steps": 300}, "packages": {"torch": "2.13.0"}})
    store(tmp_path / "cache", key, made(tmp_path / "policy"))
    assert restore(tmp_path / "cache", key, tmp_path / "fresh", "manifest.json")
    assert (tmp_path / "fresh" / "model.safetensors").read_bytes() == b"weights"
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [key]  # nothing half-written left beside it


def test_other_inputs_are_another_key_and_a_miss(tmp_path: Path) -> None:
    key = cache_key({"recipe": {"steps": 300}})
    assert key == cache_key({"recipe": {"steps": 300}})
    assert key != cache_key({"recipe": {"steps": 301}})
    store(tmp_path / "cache", key, made(tmp_path / "policy"))
    assert not restore(tmp_path / "cache", cache_key({"recipe": {"steps": 301}}), tmp_path / "fresh", "manifest.json")
    assert not (tmp_path / "fresh").exists()


def test_a_folder_without_its_marker_is_not_restored(tmp_path: Path) -> None:
    (tmp_path / "cache" / "k").mkdir(parents=True)
    (tmp_path / "cache" / "k" / "model.safetensors").write_bytes(b"half")
    assert not restore(tmp_path / "cache", "k", tmp_path / "fresh", "manifest.json")


def test_an_unwritable_cache_is_skipped_with_a_warning(tmp_path: Path, caplog) -> None:
    (tmp_path / "cache").write_text("a file where the cache folder should be")
    store(tmp_path / "cache", "k", made(tmp_path / "policy"))
    assert "not kept" in caplog.text
