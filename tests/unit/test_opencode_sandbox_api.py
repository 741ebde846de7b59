"""The sandbox API's path mapping and the setup phase's network settings and rules, in process."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from opencode_env_server.api.sandbox_operations import SandboxOperations
from opencode_env_server.sandbox.firewall import setup_rules
from opencode_env_server.settings import parse_destinations


def operations(sandbox_home: str | None) -> SandboxOperations:
    rollout = SimpleNamespace(request=SimpleNamespace(sandbox_home=sandbox_home))
    return SandboxOperations(rollout, "opencode")


SANDBOX = SimpleNamespace(work=Path("/sandboxes/r1/work"), home=Path("/sandboxes/r1/home"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cd /home/user/workdir && python3 a.py", "cd /sandboxes/r1/work && python3 a.py"),
        ("/home/user/workdir", "/sandboxes/r1/work"),
        ("cat /home/user/task/instruction.md", "cat /sandboxes/r1/home/task/instruction.md"),
        ("/home/user", "/sandboxes/r1/home"),
        ("/home/user/workdirs/x", "/sandboxes/r1/home/workdirs/x"),  # not the work dir
        ("/home/username/x", "/home/username/x"),  # another path
        ("a=/home/user/.config/opencode/opencode.json", "a=/sandboxes/r1/home/.config/opencode/opencode.json"),
    ],
)
def test_sandbox_home_maps_to_the_contexts_directories(text: str, expected: str) -> None:
    assert operations("/home/user").mapped(text, SANDBOX) == expected


def test_without_sandbox_home_nothing_is_mapped() -> None:
    assert operations(None).mapped("cd /home/user/workdir", SANDBOX) == "cd /home/user/workdir"


def test_setup_network_destinations_parse_and_bad_ones_are_refused() -> None:
    assert parse_destinations(" pypi.org, files.pythonhosted.org:443,index:8080,") == (
        ("pypi.org", 443),
        ("files.pythonhosted.org", 443),
        ("index", 8080),
    )
    assert parse_destinations("") == ()
    for bad in ("index:http", "index:0", ":80", "http://pypi.org/simple"):
        with pytest.raises(SystemExit, match="SETUP_NETWORK_ALLOW"):
            parse_destinations(bad)


def test_setup_rules_open_the_resolver_and_the_listed_ports_for_one_uid_only() -> None:
    rules = setup_rules(20001, [("10.0.0.5", 443), ("10.0.0.6", 8080)], ["127.0.0.11"])
    owner = ["-m", "owner", "--uid-owner", "20001"]
    assert rules == [
        [*owner, "-d", "127.0.0.11", "-j", "ACCEPT"],
        [*owner, "-p", "tcp", "-d", "10.0.0.5", "--dport", "443", "-j", "ACCEPT"],
        [*owner, "-p", "tcp", "-d", "10.0.0.6", "--dport", "8080", "-j", "ACCEPT"],
    ]
