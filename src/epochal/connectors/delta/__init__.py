"""Delta Lake in and out, through ``deltalake`` (delta-rs): :class:`DeltaSource` (a table at a
version or a timestamp, split by data file, optionally following new versions) and
:class:`DeltaSink` (appends, exactly once by committing each checkpoint's files in one Delta
transaction).

User code imports from here. The modules: ``source``, ``sink``, and ``tables`` (what both share:
opening a table, its schema as Arrow, records to Arrow, partition values and directories)."""

from __future__ import annotations

from epochal.connectors.delta.sink import DeltaSink
from epochal.connectors.delta.source import DeltaSource

__all__ = ["DeltaSink", "DeltaSource"]
