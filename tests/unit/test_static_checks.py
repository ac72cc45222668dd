"""The code stays lint-clean and type-checked: ruff over src/tests, mypy over src/epochal
(configuration in pyproject.toml). Part of `make test`, so CI enforces both."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("command", [["ruff", "check", "src", "tests", "benchmarks", "examples"], ["mypy"]],
                         ids=["ruff", "mypy"])
def test_static_check_is_clean(command):
    run = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{' '.join(command)} found problems:\n{run.stdout}{run.stderr}"
