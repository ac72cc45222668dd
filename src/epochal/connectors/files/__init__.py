"""The file connectors: text, CSV and Parquet sources and the file sinks, in one place.

User code imports from here (``from epochal.connectors.files import ...``); each name lives where
its concern is implemented:

- :mod:`epochal.connectors.files.text_source`: :class:`TextFileSource`;
- :mod:`epochal.connectors.files.table_sources`: :class:`CsvFileSource`, :class:`ParquetFileSource`;
- :mod:`epochal.connectors.files.sinks`: :class:`TextFileSink`, :class:`ParquetFileSink` (two-phase
  commit: :class:`FileCommittable`, :data:`PENDING_DIR`);
- :mod:`epochal.connectors.files.transactional`: :class:`ExactlyOnceFileSink` (the text sink under
  the name of its guarantee), :func:`read_committed_lines` and :func:`cleanup_pending`.

Which files a source path names and the Parquet split are shared with the Delta Lake and
DataFrame sources: :mod:`epochal.connectors.file_splits`, :mod:`epochal.connectors.parquet_split`.

A path is a plain local path, a ``file://`` URI, or any URI that
:meth:`pyarrow.fs.FileSystem.from_uri` understands (``s3://``, ``gs://``, ``hdfs://`` ...). Every
file is one split, and every split records a position it can seek back to, so file sources are
replayable from a checkpoint.

Everything here is picklable: the objects hold only strings and numbers until ``open()`` (or a
sink writer, created on the worker) creates the filesystem and file handles, and pickling drops
those again.
"""

from __future__ import annotations

from epochal.connectors.files.sinks import PENDING_DIR, FileCommittable, ParquetFileSink, TextFileSink
from epochal.connectors.files.table_sources import CsvFileSource, ParquetFileSource
from epochal.connectors.files.text_source import TextFileSource
from epochal.connectors.files.transactional import ExactlyOnceFileSink, cleanup_pending, read_committed_lines

__all__ = ["CsvFileSource", "ExactlyOnceFileSink", "FileCommittable", "PENDING_DIR", "ParquetFileSink",
           "ParquetFileSource", "TextFileSink", "TextFileSource", "cleanup_pending", "read_committed_lines"]
