"""The heap keyed-state backend: keyed state in Python dicts per key group (:mod:`.backend`).

Exports :class:`HeapKeyedStateBackend` (what ``epochal.state.heap`` held before it became this
package)."""

from __future__ import annotations

from epochal.state.heap.backend import HeapKeyedStateBackend

__all__ = ["HeapKeyedStateBackend"]
