"""Integration tests: what only this directory needs (the SparkSession is tests/conftest.py's)."""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``subset_of(name)`` checks a part of what test ``name`` of its module checks
    (the quick subset of a slow matrix): when that test runs in the same session too, the subset
    is left out (CI time). Runs after ``-m`` and ``-k`` chose the session's tests."""
    chosen = {(item.module.__name__, item.originalname) for item in items if isinstance(item, pytest.Function)}
    dropped = []
    for item in items:
        marker = item.get_closest_marker("subset_of")
        if marker is None or not isinstance(item, pytest.Function):
            continue
        if (item.module.__name__, marker.args[0]) in chosen:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]
