"""Read-only views of a RocksDB backend's state at one moment, for ``read_committed`` queries
(:mod:`epochal.dataflow.queries.committed`): a local checkpoint of the database, made at a
checkpoint's barrier, which the views read.

Copying a queryable state into Python dicts at every barrier would cost the processing thread
the whole state at every checkpoint (a scan and an unpickle of every entry). A local checkpoint
costs a flush of the memtables, which the snapshot at the same barrier has just done, and a hard
link per SST file: milliseconds whatever the state's size. The views open it read-only when they
are first read (a job whose clients never ask ``read_committed`` opens nothing) and read it as
:class:`~epochal.state.rocksdb.keys.GroupView` reads the live database: a point read per key, a
range scan per group. The checkpoint's files never change, so what a view shows never changes.

The checkpoint directory lives as long as a view of it: when the last one is dropped (the
committed view was replaced, the pending one aborted, the worker closed) the instance is closed
and the directory deleted.
"""

from __future__ import annotations

import shutil
import weakref
from collections.abc import ItemsView, Iterator, Mapping
from typing import Any

from epochal.state.canonical import KeyEncoder
from epochal.state.rocksdb.keys import GroupView
from epochal.state.rocksdb.reads import close_database, open_read_only

__all__ = ["CheckpointViews", "CommittedGroup"]

#: a :class:`CommittedGroup` whose group was not looked up yet
_UNREAD: Any = object()


class CheckpointViews:
    """The local checkpoint at ``directory`` (made by
    :meth:`~epochal.state.rocksdb.backend.RocksDBKeyedStateBackend.local_checkpoint`, which nothing
    writes to afterwards) and the views of its groups. Opened on the first read; closed and
    deleted once neither it nor any :class:`CommittedGroup` of it is referenced. Used by one
    thread at a time (the worker's processing thread)."""

    def __init__(self, directory: str, encode: KeyEncoder) -> None:
        self.directory = directory
        self._encode = encode
        #: the read-only instance and its column families, once opened (shared with the finalizer)
        self._opened: dict[str, Any] = {}
        weakref.finalize(self, _release, self._opened, directory)

    def views(self, name: str, key_groups: range) -> dict[int, CommittedGroup]:
        """State ``name``'s groups ``key_groups`` as ``{group: view}`` (nothing is read yet)."""
        return {group: CommittedGroup(self, name, group) for group in key_groups}

    def group_view(self, name: str, group: int) -> GroupView | None:
        """Group ``group`` of state ``name`` in the checkpoint; None if it has no such state."""
        if "db" not in self._opened:
            self._opened["db"], self._opened["cfs"] = open_read_only(self.directory)
        cf = self._opened["cfs"].get(name)
        return None if cf is None else GroupView(cf, group, self._encode)


def _release(opened: dict[str, Any], directory: str) -> None:
    if "db" in opened:
        close_database(opened.pop("db"), opened.pop("cfs"))
    shutil.rmtree(directory, ignore_errors=True)


class CommittedGroup(Mapping[Any, Any]):
    """One key group of one state in a :class:`CheckpointViews`, as a read-only ``{key: value}``
    (values are fresh copies, as :class:`~epochal.state.rocksdb.keys.GroupView` reads them;
    ``len`` counts by a range scan)."""

    __slots__ = ("_checkpoint", "_group", "_name", "_view")

    def __init__(self, checkpoint: CheckpointViews, name: str, group: int) -> None:
        self._checkpoint = checkpoint
        self._name = name
        self._group = group
        self._view: Any = _UNREAD

    def _opened(self) -> GroupView | None:
        if self._view is _UNREAD:
            self._view = self._checkpoint.group_view(self._name, self._group)
        return self._view

    def get(self, key: Any, default: Any = None) -> Any:
        view = self._opened()
        return default if view is None else view.get(key, default)

    def __getitem__(self, key: Any) -> Any:
        view = self._opened()
        if view is None:
            raise KeyError(key)
        return view[key]

    def __contains__(self, key: object) -> bool:
        view = self._opened()
        return view is not None and key in view

    def __iter__(self) -> Iterator[Any]:
        view = self._opened()
        return iter(()) if view is None else iter(view)

    def __len__(self) -> int:
        view = self._opened()
        return 0 if view is None else len(view)

    def items(self) -> ItemsView[Any, Any]:
        view = self._opened()
        return ItemsView({}) if view is None else view.items()

    def __repr__(self) -> str:
        return f"<committed key group {self._group} of state {self._name!r} in {self._checkpoint.directory}>"
