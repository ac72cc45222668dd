"""The file connectors' public face: text, CSV and Parquet sources and the file sinks, in one place.

This module owns no code, only the names user code imports (``from epochal.connectors.files
import ...``); each lives where its concern is implemented:

- :mod:`epochal.connectors.file_splits`: which files a source path names (a file, a directory,
  or a local glob; hidden ``.``/``_`` files skipped) and the base of the per-file splits;
- :mod:`epochal.connectors.text_file_source`: :class:`TextFileSource`;
- :mod:`epochal.connectors.table_file_sources`: :class:`CsvFileSource`, :class:`ParquetFileSource`;
- :mod:`epochal.connectors.file_sinks`: :class:`TextFileSink`, :class:`ParquetFileSink` (two-phase
  commit: :class:`FileCommittable`, :data:`PENDING_DIR`).

A path is a plain local path, a ``file://`` URI, or any URI that
:meth:`pyarrow.fs.FileSystem.from_uri` understands (``s3://``, ``gs://``, ``hdfs://`` ...). Every
file is one split, and every split records a position it can seek back to, so file sources are
replayable from a checkpoint.

Everything here is picklable: the objects hold only strings and numbers until ``open()`` (or a
sink writer, created on the worker) creates the filesystem and file handles, and pickling drops
those again.
"""

from __future__ import annotations

from epochal.connectors.file_sinks import PENDING_DIR, FileCommittable, ParquetFileSink, TextFileSink
from epochal.connectors.table_file_sources import CsvFileSource, ParquetFileSource
from epochal.connectors.text_file_source import TextFileSource

__all__ = ["CsvFileSource", "FileCommittable", "PENDING_DIR", "ParquetFileSink", "ParquetFileSource",
           "TextFileSink", "TextFileSource"]
