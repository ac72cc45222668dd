"""Operator state: named lists per subtask, redistributed on restore by their mode.

``split`` (even-split redistribution): the lists of all old subtasks are concatenated and cut
into contiguous, near-equal parts, one per new subtask. ``union``: every new subtask gets the
whole concatenation (papers/001 §3.1.2).
"""

from __future__ import annotations

from typing import Any

SPLIT = "split"
UNION = "union"


class OperatorStateStore:
    """The operator state of one subtask."""

    def __init__(self) -> None:
        self.lists: dict[str, list[Any]] = {}
        self.modes: dict[str, str] = {}

    def get_list_state(self, name: str, mode: str = SPLIT) -> list[Any]:
        """The list named ``name``; mutate it in place (it is what gets snapshotted)."""
        if mode not in (SPLIT, UNION):
            raise ValueError(f"operator state mode must be 'split' or 'union', got {mode!r}")
        self.modes[name] = mode
        return self.lists.setdefault(name, [])

    def capture(self) -> dict[str, tuple[str, list[Any]]]:
        """Synchronous snapshot: ``{name: (mode, copy of the list)}``."""
        return {name: (self.modes.get(name, SPLIT), list(items)) for name, items in self.lists.items()}


def redistribute(old: list[dict[str, tuple[str, list[Any]]]], index: int, parallelism: int) -> dict[str, list[Any]]:
    """The lists new subtask ``index`` of ``parallelism`` gets from the old subtasks' snapshots
    (``old`` is ordered by old subtask index)."""
    merged: dict[str, tuple[str, list[Any]]] = {}
    for snapshot in old:
        for name, (mode, items) in snapshot.items():
            merged.setdefault(name, (mode, []))[1].extend(items)
    result = {}
    for name, (mode, items) in merged.items():
        if mode == UNION:
            result[name] = list(items)
        else:
            start = index * len(items) // parallelism
            end = (index + 1) * len(items) // parallelism
            result[name] = items[start:end]
    return result
