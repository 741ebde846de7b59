"""The GPU host check's logic without a GPU or its children: settings, stage verdicts, figures from
a job's outputs, the installed-requirements proof, the wheel folder's closure."""

import importlib.util
import json
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
from trainer.gpu.host_check import learning, walkthrough
from trainer.gpu.host_check.figures import CARDS_GIB, gpu_memory, held_out_change, timing
from trainer.gpu.host_check.installed import unmet_requirements
from trainer.gpu.host_check.random_model import INFO
from trainer.gpu.host_check.report import HostCheckReport, StageReport
from trainer.gpu.host_check.settings import TIMEOUTS_S, parse

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_host_wheels", ROOT / "scripts" / "gpu_host_wheels.py")
gpu_host_wheels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_host_wheels)


def test_settings_default_to_the_gpu_run_and_take_stage_timeouts(tmp_path):
    settings = parse(["--work", str(tmp_path), "--timeout", "walkthrough=600"])
    assert (settings.device, settings.steps, settings.shape, settings.learning) == ("cuda", 10, "qwen3-1.7b", "full")
    assert settings.min_gain == 15
    assert settings.timeouts["walkthrough"] == 600
    assert settings.timeouts["learning"] == TIMEOUTS_S["learning"]
    with pytest.raises(SystemExit):
        parse(["--timeout", "nonsense=1"])
    with pytest.raises(SystemExit):
        parse(["--steps", "0"])


def test_the_budget_of_the_stages_fits_eight_minutes():
    assert sum(TIMEOUTS_S[s] for s in ("install", "device", "walkthrough", "learning")) <= 8 * 60
    # the policy is made beside device and walkthrough, and ready before learning's own budget ends
    assert TIMEOUTS_S["policy"] <= TIMEOUTS_S["device"] + TIMEOUTS_S["walkthrough"] + TIMEOUTS_S["learning"]


def test_report_passes_only_when_every_stage_passed(tmp_path):
    stages = [StageReport("install"), StageReport("device")]
    report = HostCheckReport(settings={}, stages=stages, started="now")
    stages[0].passed()
    assert report.verdict == "FAIL" and report.reason == "device: skipped"
    stages[1].failed("no GPU")
    assert report.reason == "device: no GPU"
    stages[1].passed(gpus=[])
    report.write(tmp_path / "report.json")
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["verdict"] == "PASS" and written["reason"] is None and written["schema_version"] == 1
    assert [s["name"] for s in written["stages"]] == ["install", "device"]


def step(n, seconds, length, **gpu):
    return {"step": n, "step_time_s": seconds, "completions/mean_length": length, **gpu}


def test_timing_leaves_the_first_step_out_of_the_steady_figures():
    records = [step(1, 30.0, 256), step(2, 10.0, 256), step(3, 12.0, 200), step(4, 11.0, 256)]
    figures = timing(records, completions_per_step=4)
    assert figures["first_step_s"] == 30.0
    assert figures["s_per_step"] == 11.0
    assert figures["generated_tokens_per_s"] == pytest.approx(4 * (256 + 200 + 256) / 33.0, abs=0.1)


def test_gpu_memory_needs_the_reserved_peak_plus_what_sits_beside_the_allocator():
    gib = {"gpu_max_allocated_gib": 30.0, "gpu_max_reserved_gib": 37.0, "gpu_reserved_gib": 36.0, "gpu_used_gib": 37.5}
    figures = gpu_memory([step(1, 1.0, 1, **gib)])
    assert figures["peak_reserved_gib"] == 37.0 and figures["beside_allocator_gib"] == 1.5
    assert figures["need_gib"] == 38.5
    assert figures["fits"] == {"40GB": True, "80GB": True}
    figures = gpu_memory([step(1, 1.0, 1, **{**gib, "gpu_max_reserved_gib": 39.5})])
    assert figures["fits"]["40GB"] is False and CARDS_GIB["40GB"] == 40.0
    assert gpu_memory([step(1, 1.0, 1)])["fits"] is None  # on CPU: nothing measured, nothing claimed


def write_summary(path: Path, before: float, after: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    modes = {"T=1.0": {"before": before, "after": after}, "greedy": {"before": 0.9, "after": 0.92}}
    path.write_text(json.dumps({"held_out": modes}))


def test_held_out_change_in_points(tmp_path):
    write_summary(tmp_path / "summary.json", 0.45, 0.83)
    change = held_out_change(tmp_path / "summary.json")
    assert change["sampled"] == {"mode": "T=1.0", "before": 45.0, "after": 83.0}
    assert change["sampled_gain_points"] == 38.0
    assert change["greedy"]["after"] == 92.0


class ReadyPolicy:
    """A PolicyMaker whose models are already made."""

    def __init__(self, work: Path) -> None:
        self.base, self.policy = work / "models" / "default", work / "models" / "reasoning-policy"
        self.base_ready, self.done = threading.Event(), threading.Event()
        self.base_ready.set()
        self.done.set()
        self.seconds = {"default_model": 1.0, "pretrain": 2.0}

    def wait(self, event, timeout_s):
        assert event.is_set()

    def eval_overrides(self):
        return []


def fake_job(tmp_path, monkeypatch, module, records, summary=None):
    """Replace the stage's children: the trainer job writes ``records`` (and a summary)."""
    commands = []

    def run_logged(command, log, timeout_s, env, cancel=None):
        commands.append(command)
        if "trainer.gpu.host_check.random_model" in command:
            out = Path(command[command.index("--out") + 1])
            out.mkdir(parents=True)
            (out / INFO).write_text(json.dumps({"parameters": 1_720_574_976}))
            return
        output = Path(next(s.split("=", 1)[1] for s in command if s.startswith("output_dir=")))
        output.mkdir(parents=True, exist_ok=True)
        (output / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        if summary is not None:
            write_summary(output / "summary.json", *summary)

    monkeypatch.setattr(module, "run_logged", run_logged)
    return commands


def test_walkthrough_runs_the_walkthrough_config_and_reports_its_shape(tmp_path, monkeypatch):
    settings = parse(["--work", str(tmp_path), "--model", "random", "--steps", "3"])
    gib = {"gpu_max_allocated_gib": 20.0, "gpu_max_reserved_gib": 24.0, "gpu_reserved_gib": 24.0, "gpu_used_gib": 25.0}
    records = [step(i, 20.0, 256, **gib) for i in (1, 2, 3)]
    commands = fake_job(tmp_path, monkeypatch, walkthrough, records)
    stage = StageReport("walkthrough", timeout_s=60, log=str(tmp_path / "w.log"))
    walkthrough.run(stage, settings, "http://127.0.0.1:1", ReadyPolicy(tmp_path))
    assert stage.verdict == "PASS", stage.reason
    job = commands[-1]
    assert job[2:6] == ["trainer", "grpo", "--config", "grpo-walkthrough.yaml"]
    assert "grpo.max_steps=3" in job and "grpo.use_cpu=false" in job and "eval.before_after=false" in job
    f = stage.figures
    assert f["completions_per_step"] == 4  # the walkthrough: batch 1, gradient accumulation 4
    assert f["model_parameters"] == 1_720_574_976
    assert f["projected_walkthrough_s"] == 150 * 20
    assert f["need_gib"] == 25.0 and f["fits"] == {"40GB": True, "80GB": True}


def test_walkthrough_fails_when_the_job_logged_fewer_steps(tmp_path, monkeypatch):
    settings = parse(["--work", str(tmp_path), "--model", "random", "--steps", "3"])
    fake_job(tmp_path, monkeypatch, walkthrough, [step(1, 20.0, 256)])
    stage = StageReport("walkthrough", timeout_s=60, log=str(tmp_path / "w.log"))
    with pytest.raises(walkthrough.ChildFailed, match="1 of 3 steps"):
        walkthrough.run(stage, settings, "http://127.0.0.1:1", ReadyPolicy(tmp_path))


@pytest.mark.parametrize(("after", "verdict"), [(0.66, "PASS"), (0.55, "FAIL")])
def test_learning_passes_on_a_sampled_gain_of_at_least_the_minimum(tmp_path, monkeypatch, after, verdict):
    settings = parse(["--work", str(tmp_path), "--device", "cpu"])
    commands = fake_job(tmp_path, monkeypatch, learning, [step(i, 0.5, 20) for i in range(80)], (0.5, after))
    stage = StageReport("learning", timeout_s=60, log=str(tmp_path / "l.log"))
    learning.run(stage, settings, "http://127.0.0.1:1", ReadyPolicy(tmp_path))
    assert stage.verdict == verdict
    assert stage.figures["steps"] == 80 and stage.figures["steps_per_s"] == 2.0
    if verdict == "FAIL":
        assert "+5.0 points, below the +15" in stage.reason
    assert "grpo.use_cpu=true" in commands[0] and "grpo.report_to=[]" in commands[0]


def dist_info(site: Path, name: str, version: str, *requires: str) -> None:
    folder = site / f"{name}-{version}.dist-info"
    folder.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    (folder / "METADATA").write_text("\n".join(lines + [f"Requires-Dist: {r}" for r in requires]) + "\n")


def test_installed_requirements_name_what_is_missing_or_too_old(tmp_path, monkeypatch):
    site = tmp_path / "site"
    dist_info(
        site, "ours", "1.0", "leaf==2.0", "absent-package-xyz", "pytest>=1", 'only-on-windows; sys_platform == "win32"'
    )
    dist_info(site, "leaf", "1.0")
    monkeypatch.syspath_prepend(str(site))
    unmet = unmet_requirements(site)
    assert unmet == ["ours needs absent-package-xyz: not installed", "ours needs leaf==2.0: found 1.0"]


def test_the_wheel_closure_follows_markers_and_extras():
    meta = gpu_host_wheels.Metadata()
    meta.requires = {
        "a": ["b", 'c; python_version < "3.10"', 'd; extra == "fast"'],
        "b": [],
        "d": [],
    }
    env = gpu_host_wheels.marker_environment("3.12")
    names = lambda reqs: [r.name for r in reqs]  # noqa: E731
    assert names(gpu_host_wheels.requirements_of(meta, "a", frozenset(), env)) == ["b"]
    assert names(gpu_host_wheels.requirements_of(meta, "a", frozenset({"fast"}), env)) == ["b", "d"]


def test_packages_the_host_holds_at_an_accepted_version_are_left_to_it():
    meta = gpu_host_wheels.Metadata()
    meta.requires = {"trl": ["pandas>=2.1", "pyarrow>=21"], "pandas": [], "pyarrow": []}
    host = {"pandas": "2.3.0", "pyarrow": "19.0.0"}
    assert gpu_host_wheels.held_by_host({"trl", "pandas", "pyarrow"}, host, meta, "3.12") == {"pandas"}


def test_locks_pin_every_package_and_the_trainer_lock_wins():
    pins = gpu_host_wheels.locked_pins()
    assert pins["trl"] == "1.16.0" and pins["reasoning-gym"] == "0.1.24"
    trainer_lock = (ROOT / "docker/requirements/trainer-gpu.lock").read_text()
    assert f"fastapi=={pins['fastapi']}" in trainer_lock


def test_a_host_list_of_bare_names_leaves_those_packages_to_the_host(tmp_path):
    freeze = tmp_path / "host.txt"
    freeze.write_text("pandas==2.3.0\npyarrow\n# a comment\n")
    assert gpu_host_wheels.host_freeze(freeze) == {"pandas": "2.3.0", "pyarrow": None}
    meta = gpu_host_wheels.Metadata()
    meta.requires = {"trl": ["pandas>=2.1", "pyarrow>=21"]}
    held = gpu_host_wheels.held_by_host({"trl", "pandas", "pyarrow"}, {"pyarrow": None}, meta, "3.12")
    assert held == {"pyarrow"}  # its version is the install stage's to check, on the host


def test_an_lzma_wheel_installs_with_pip(tmp_path):
    wheel = tmp_path / "src" / "tinypkg-1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    members = {
        "tinypkg/__init__.py": "ANSWER = 42\n" * 200,
        "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    members["tinypkg-1.0.dist-info/RECORD"] = (
        "".join(f"{name},,\n" for name in members) + "tinypkg-1.0.dist-info/RECORD,,\n"
    )
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    out = tmp_path / "out"
    out.mkdir()
    gpu_host_wheels.copy_wheel(wheel, out, lzma=True)
    with zipfile.ZipFile(out / wheel.name) as archive:
        assert {m.compress_type for m in archive.infolist()} == {zipfile.ZIP_LZMA}
    site = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site)]
    subprocess.run([*install, str(out / wheel.name)], check=True, capture_output=True)
    assert "ANSWER = 42" in (site / "tinypkg" / "__init__.py").read_text()
