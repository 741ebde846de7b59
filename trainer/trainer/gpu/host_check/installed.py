"""The ``install`` stage's proof: every requirement of what went into the target folder is met by
what this Python sees (the folder first, then the host's packages)."""

import importlib.metadata as metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version


def unmet_requirements(site: Path) -> list[str]:
    """One line per requirement of a distribution in ``site`` that nothing on ``sys.path`` meets."""
    unmet = []
    for dist in metadata.distributions(path=[str(site)]):
        unmet += _unmet(dist.metadata["Name"], dist.requires or [], frozenset())
    return sorted(set(unmet))


def _unmet(owner: str, requirements: list[str], extras: frozenset[str]) -> list[str]:
    problems = []
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not any(
            requirement.marker.evaluate({"extra": extra}) for extra in (extras or {""})
        ):
            continue
        try:
            found = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{owner} needs {requirement}: not installed")
            continue
        if not requirement.specifier.contains(Version(found.version), prereleases=True):
            problems.append(f"{owner} needs {requirement}: found {found.version}")
        if requirement.extras:
            problems += _unmet(found.metadata["Name"], found.requires or [], frozenset(requirement.extras))
    return problems
