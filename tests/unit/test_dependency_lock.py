"""constraints.txt (the versions ``make`` installs) stays in step with pyproject.toml's ranges."""

from __future__ import annotations

import importlib.metadata
import pathlib
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parents[2]


def locked() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt pins exact versions only: {line!r}"
            pins[canonicalize_name(name)] = Version(version)
    return pins


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]


def test_every_dependency_is_pinned_within_its_range():
    pins = locked()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is in pyproject.toml, not in constraints.txt: run make upgrade-deps"
        assert requirement.specifier.contains(pins[name], prereleases=True), \
            f"constraints.txt pins {requirement.name}=={pins[name]}, outside pyproject.toml's {requirement}"


def test_the_test_environment_has_the_locked_versions():
    pins = locked()
    for requirement in declared():
        installed = Version(importlib.metadata.version(requirement.name))
        pinned = pins[canonicalize_name(requirement.name)]
        assert installed == pinned, (
            f"{requirement.name} {installed} is installed but constraints.txt pins {pinned}: "
            "run 'make setup' (or 'make upgrade-deps' to move the lock)")
