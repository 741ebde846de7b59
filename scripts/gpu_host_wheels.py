"""``make gpu-host-wheels``: the wheels the GPU host check (``scripts/gpu-host-check.sh``) needs on a
host that already has CUDA PyTorch and transformers, for a chosen Python, manylinux x86_64.

The folder holds our packages (the reasoning-gym server and client, the other clients the trainer
imports, the default-model generator, the trainer) and every package they require, pinned by
``docker/requirements/trainer-gpu.lock`` (then ``reasoning-gym-env.lock`` for what only the server
needs). Left out: torch, transformers and everything they require (the host has them), and with
``--host-packages`` (a ``pip freeze`` of the host) whatever the host already holds at a version our
packages accept. Packages with no wheel on PyPI (pycosat, cellpylib, zss) are built with the target
Python (``--target-python``, an interpreter on this machine). The folder also gets the check's script and a manifest.

    python3 scripts/gpu_host_wheels.py [--target-python python3.12] [--out gpu-host-wheels] [--host-packages FILE]

Needs PyPI (or the pip index this machine is configured with); downloads are kept in
``.cache/gpu-host-wheels/`` for the next build.
"""

import argparse
import functools
import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# Pins, in order of precedence: the trainer's GPU image, then the reasoning-gym server's image.
LOCKS = (ROOT / "docker/requirements/trainer-gpu.lock", ROOT / "docker/requirements/reasoning-gym-env.lock")
OUR_PACKAGES = (
    "services/reasoning_gym_env/client",
    "services/reasoning_gym_env/server",
    "services/opencode_env/client",
    "services/inference/client",
    "services/inference/default_model",
    "trainer",
)
# What the host brings: transformers with its requirements, and torch's requirements (torch 2.13's
# Requires-Dist less its CUDA libraries; torch itself is never downloaded: its wheel is ~0.5 GB).
HOST_ROOTS = ("transformers",)
TORCH_REQUIRES = ("filelock", "typing-extensions", "setuptools", "sympy", "networkx", "jinja2", "fsspec")
HOST_GPU_STACK = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")
# manylinux x86_64 up to glibc 2.28 (RHEL 8, Ubuntu 18.10, Debian 10 and newer).
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
# What the device tool carries to a GPU machine (64 MiB, the repository included).
SIZE_BUDGET_MB = 60
CHECK_SCRIPT = ROOT / "scripts/gpu-host-check.sh"
MANIFEST = "manifest.json"


def locked_pins(locks: Iterable[Path] = LOCKS) -> dict[str, str]:
    """name -> version from the lock files; an earlier lock wins over a later one."""
    pins: dict[str, str] = {}
    for lock in locks:
        for line in lock.read_text().splitlines():
            match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
            if match:
                pins.setdefault(canonicalize_name(match.group(1)), match.group(2))
    return pins


class Metadata:
    """Name, version and requirements of the wheels in some folders."""

    def __init__(self) -> None:
        self.wheels: dict[str, Path] = {}
        self.requires: dict[str, list[str]] = {}
        self.versions: dict[str, str] = {}

    def add(self, wheel: Path) -> str:
        name, version, _, _ = parse_wheel_filename(wheel.name)
        with zipfile.ZipFile(wheel) as archive:
            entry = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            text = archive.read(entry).decode("utf-8")
        self.wheels[name] = wheel
        self.versions[name] = str(version)
        self.requires[name] = [
            line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")
        ]
        return name


def marker_environment(python_version: str) -> dict[str, str]:
    """The markers of a CPython ``python_version`` on Linux x86_64."""
    return {
        "python_version": python_version,
        "python_full_version": f"{python_version}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
    }


def requirements_of(meta: Metadata, name: str, extras: frozenset[str], env: dict[str, str]) -> list[Requirement]:
    """The requirements of ``name`` (with ``extras``) that apply on the target."""
    applying = []
    for text in meta.requires.get(name, []):
        requirement = Requirement(text)
        if requirement.marker is None or any(
            requirement.marker.evaluate({**env, "extra": extra}) for extra in (extras or {""})
        ):
            applying.append(requirement)
    return applying


@functools.cache
def interpreter_version(python: str) -> str:
    """``3.12`` for a python3.12 interpreter (a clear exit when it does not run)."""
    try:
        return subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as error:
        raise SystemExit(
            f"gpu-host-wheels: {python} does not run ({error}); some pinned packages (pycosat) have no wheel "
            "and are built with an interpreter of the target version: install one or name it with --target-python"
        ) from None


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], check=True)


def build_our_wheels(folder: Path, meta: Metadata) -> list[str]:
    """Wheels of our packages (pure Python), built fresh every time."""
    shutil.rmtree(folder, ignore_errors=True)
    pip("wheel", "-q", "--no-deps", "-w", str(folder), *(str(ROOT / p) for p in OUR_PACKAGES))
    return [meta.add(wheel) for wheel in sorted(folder.glob("*.whl"))]


def fetch(names: list[str], pins: dict[str, str], cache: Path, target_python: str, meta: Metadata) -> None:
    """Download the pinned wheels of ``names`` into ``cache``; a package with no wheel on the index is
    built from its sdist by ``target_python`` (an interpreter of the target version)."""
    python_version = interpreter_version(target_python)
    missing = [n for n in names if not any(w for w in cache.glob("*.whl") if parse_wheel_filename(w.name)[0] == n)]
    unpinned = [n for n in missing if n not in pins]
    if unpinned:
        raise SystemExit(f"gpu-host-wheels: no pin in {', '.join(p.name for p in LOCKS)} for {', '.join(unpinned)}")
    if missing:
        downloads = cache / "downloads"
        platforms = [f"--platform={p}" for p in PLATFORMS]
        abi = f"cp{python_version.replace('.', '')}"
        pip(
            "download", "-q", "--no-deps", "--prefer-binary", f"--python-version={python_version}",
            "--implementation=cp", f"--abi={abi}", "--abi=abi3", "--abi=none", *platforms,
            "-d", str(downloads), *(f"{n}=={pins[n]}" for n in missing),
        )  # fmt: skip
        for sdist in sorted(downloads.glob("*.tar.gz")) + sorted(downloads.glob("*.zip")):
            subprocess.run(
                [target_python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(cache), str(sdist)], check=True
            )
            sdist.unlink()
        for wheel in downloads.glob("*.whl"):
            wheel.replace(cache / wheel.name)
    for wheel in cache.glob("*.whl"):
        name = parse_wheel_filename(wheel.name)[0]
        if name in names and name not in meta.wheels:
            meta.add(wheel)


def closure(
    roots: Iterable[tuple[str, frozenset[str]]],
    pins: dict[str, str],
    cache: Path,
    target_python: str,
    meta: Metadata,
    stop: set[str] = frozenset(),
) -> set[str]:
    """Every package ``roots`` require, transitively (fetched level by level), except ``stop``; an
    extra asked of a ``stop`` package (``pydantic[email]`` of the host's pydantic) still brings what
    the extra adds."""
    env = marker_environment(interpreter_version(target_python))
    seen: set[tuple[str, frozenset[str]]] = set()
    level = [(canonicalize_name(n), e) for n, e in roots]
    while level:
        level = [(n, e) for n, e in level if (n, e) not in seen and (n not in stop or e)]
        seen.update(level)
        fetch(sorted({n for n, _ in level if n not in meta.wheels}), pins, cache, target_python, meta)
        following = []
        for name, extras in level:
            requirements = requirements_of(meta, name, extras, env)
            if name in stop:
                base = {str(r) for r in requirements_of(meta, name, frozenset(), env)}
                requirements = [r for r in requirements if str(r) not in base]
            following += [(canonicalize_name(r.name), frozenset(r.extras)) for r in requirements]
        level = following
    return {n for n, _ in seen if n not in stop}


def copy_wheel(wheel: Path, out: Path, lzma: bool) -> None:
    """Copy ``wheel`` into ``out``; with ``lzma``, every member re-compressed with LZMA (pip installs
    such a wheel: it reads wheels with ``zipfile``; RECORD's hashes are of the uncompressed files)."""
    if not lzma:
        shutil.copy2(wheel, out / wheel.name)
        return
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(out / wheel.name, "w") as target:
        for member in source.infolist():
            data = source.read(member)
            member.compress_type = zipfile.ZIP_LZMA
            target.writestr(member, data)


def host_freeze(path: Path) -> dict[str, str | None]:
    """name -> version from a ``pip freeze`` / ``pip list --format=freeze`` of the target host; a
    line with a bare name says the host has the package at a version not given (None)."""
    found: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)(?:==(\S+))?\s*$", line.strip())
        if match:
            found[canonicalize_name(match.group(1))] = match.group(2)
    return found


def held_by_host(needed: set[str], host: dict[str, str | None], meta: Metadata, python_version: str) -> set[str]:
    """The packages of ``needed`` the host holds at a version every requirement on them accepts (at
    any version when it was not given: the check's install stage then tests it on the host)."""
    env = marker_environment(python_version)
    wanted: dict[str, list[Requirement]] = {}
    for name in needed:
        for requirement in requirements_of(meta, name, frozenset({""}), env):
            wanted.setdefault(canonicalize_name(requirement.name), []).append(requirement)
    return {
        name
        for name in needed
        if name in host
        and (
            host[name] is None
            or all(r.specifier.contains(Version(host[name]), prereleases=True) for r in wanted.get(name, []))
        )
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--target-python",
        default="python3.12",
        help="an interpreter of the host's Python version (default python3.12); it builds the pinned "
        "packages that have no wheel",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-host-wheels", help="the folder to fill (emptied first)")
    parser.add_argument(
        "--host-packages", type=Path, help="a `pip freeze` of the host (or bare names): leave out what it holds"
    )
    parser.add_argument(
        "--lzma",
        action="store_true",
        help="re-compress the wheels with LZMA (~10%% smaller, slower to build; the host's Python needs lzma)",
    )
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache/gpu-host-wheels", help="download cache")
    args = parser.parse_args(argv)
    version = interpreter_version(args.target_python)
    cache = args.cache / f"py{version}"
    cache.mkdir(parents=True, exist_ok=True)
    pins = locked_pins()
    meta = Metadata()
    ours = build_our_wheels(cache / "ours", meta)
    gpu_stack = {n for n in pins if HOST_GPU_STACK.match(n)} | {"torch", "transformers"}
    freeze = host_freeze(args.host_packages) if args.host_packages else {}
    if args.host_packages:
        host = gpu_stack  # the host's own list says what it has: nothing more is assumed of it
    else:
        # Any host with torch and transformers has what they require.
        roots = [(n, frozenset()) for n in HOST_ROOTS + TORCH_REQUIRES]
        host = closure(roots, pins, cache, args.target_python, meta) | gpu_stack
    roots = [(canonicalize_name(r.name), frozenset(r.extras)) for n in ours for r in map(Requirement, meta.requires[n])]
    needed = closure(roots, pins, cache, args.target_python, meta, stop=host | set(ours)) | set(ours)
    left_to_host = held_by_host(needed - set(ours), freeze, meta, version)
    host |= left_to_host
    shipped = sorted(needed - left_to_host)

    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    for name in shipped:
        copy_wheel(meta.wheels[name], args.out, args.lzma)
    shutil.copy2(CHECK_SCRIPT, args.out / CHECK_SCRIPT.name)
    (args.out / MANIFEST).write_text(
        json.dumps(
            {
                "python_version": version,
                "platforms": list(PLATFORMS),
                "packages": {n: meta.versions[n] for n in shipped},
                "host_provides": sorted(host),
                "left_to_host": sorted(left_to_host),
                "lzma": args.lzma,
            },
            indent=1,
        )
        + "\n"
    )
    sizes = sorted(((f.stat().st_size, f.name) for f in args.out.iterdir()), reverse=True)
    total_mb = sum(s for s, _ in sizes) / 1e6
    print(f"gpu-host-wheels: {len(shipped)} wheels for Python {version} in {args.out}: {total_mb:.1f} MB")
    print("  largest: " + ", ".join(f"{n.split('-')[0]} {s / 1e6:.1f} MB" for s, n in sizes[:6]))
    if left_to_host:
        print(f"  left to the host ({args.host_packages}): {', '.join(sorted(left_to_host))}")
    if total_mb > SIZE_BUDGET_MB:
        print(
            f"  over {SIZE_BUDGET_MB} MB: a host without these packages needs them all; --host-packages "
            "(HOST_PACKAGES=, a `pip freeze` of the host) leaves out what it already has, --lzma "
            "(GPU_HOST_WHEELS_LZMA=1) re-compresses"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
