"""`make up`/`make test`'s pre-flight: a host without the Compose plugin, as a user who cannot
provision it, gets one message naming the command to run."""

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def fake_docker(folder: Path, compose: bool) -> None:
    """A `docker` whose engine answers and whose Compose plugin is there or not."""
    script = folder / "docker"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in info) exit 0;; compose) '
        + ("exit 0" if compose else "echo \"docker: 'compose' is not a docker command.\" >&2; exit 1")
        + ";; esac\nexit 1\n"
    )
    script.chmod(0o755)
    (folder / "chromium").write_text("#!/bin/sh\nexit 0\n")
    (folder / "chromium").chmod(0o755)


def preflight(folder: Path, purpose: str) -> subprocess.CompletedProcess:
    # As an unprivileged user (nobody), with the fake docker first on PATH.
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(ROOT / "scripts" / "preflight.sh")],
        env={"PATH": f"{folder}:/usr/bin:/bin", "PURPOSE": purpose, "HOME": str(folder)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def bin_dir() -> Iterator[Path]:
    # Not under pytest's tmp_path: its parents are private to root, and the test runs as nobody.
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        yield Path(folder)


@pytest.mark.skipif(os.geteuid() != 0, reason="switches to the nobody user")
@pytest.mark.parametrize("purpose", ["up", "test"])
def test_missing_compose_plugin_names_the_command_to_run(bin_dir: Path, purpose: str) -> None:
    fake_docker(bin_dir, compose=False)
    out = preflight(bin_dir, purpose)
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"make {purpose}: this host lacks the Docker Compose v2 plugin" in lines[0]
    assert "Run once as root: sudo bash scripts/provision-docker.sh" in lines[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="switches to the nobody user")
def test_a_provisioned_host_passes_silently(bin_dir: Path) -> None:
    fake_docker(bin_dir, compose=True)
    out = preflight(bin_dir, "test")
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
