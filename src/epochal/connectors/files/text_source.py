"""The text file source: :class:`TextFileSource`, the lines of text files, one split per file.

Lines are found by searching bytes for ``\\n``, so a split's position is the exact byte offset of
its next line and a restored split seeks straight to it (hence only ASCII-compatible encodings).
Which files a path names is decided in :mod:`epochal.connectors.file_splits`.
"""

from __future__ import annotations

import codecs
from typing import Any

import pyarrow as pa

from epochal.connectors.base import Source, SourceSplit
from epochal.connectors.file_splits import FileRef, FileSplit, file_sizes, list_files
from epochal.errors import PlanError, SourceError
from epochal.filesystems import TEXT_CHUNK as _TEXT_CHUNK

__all__ = ["TextFileSource"]


def _check_line_encoding(encoding: str) -> None:
    """Reject encodings in which a newline is not the single byte ``\\n`` (UTF-16, UTF-32).

    Lines are found by searching bytes for ``\\n``, which keeps positions exact byte offsets;
    that is only correct for ASCII-compatible encodings (UTF-8, Latin-1, cp1252, Shift-JIS ...).
    """
    try:
        codecs.lookup(encoding)
        one, two = "\n".encode(encoding), "\n\n".encode(encoding)
    except LookupError as exc:
        raise PlanError(f"TextFileSource: unknown encoding {encoding!r}") from exc
    if not one.endswith(b"\n") or len(two) - len(one) != 1:
        raise PlanError(f"TextFileSource: encoding {encoding!r} is not ASCII-compatible; "
                        "use UTF-8, Latin-1 or another encoding in which a newline is one byte")


class _TextSplit(FileSplit):
    """The lines of one text file; the position is the byte offset of the next line."""

    _TRANSIENT = ("_file", "_buf")

    def __init__(self, file: FileRef, encoding: str, size: int | None = None) -> None:
        self.file = file
        self.split_id = str(file)
        self.encoding = encoding
        #: the file's bytes when the job was submitted (None: unknown)
        self.size = size
        self._offset = 0  # file offset of _buf[0]
        self._pos = 0  # index in _buf of the next unread byte
        self._buf = b""
        self._eof = False
        self._file: Any = None

    def open(self) -> None:
        try:
            self._file = self.file.filesystem().open_input_file(self.file.path)
        except (pa.ArrowException, OSError) as exc:
            raise self._fail("cannot open", exc) from exc
        self._reset(self._offset + self._pos)

    def _reset(self, offset: int) -> None:
        self._offset, self._pos, self._buf, self._eof = offset, 0, b"", False
        if self._file is not None:
            self._file.seek(offset)

    def _fill(self) -> None:
        """Drop consumed bytes and append the next chunk of the file (or note the end)."""
        chunk = self._file.read(_TEXT_CHUNK)
        self._offset += self._pos
        self._buf = self._buf[self._pos:] + chunk
        self._pos = 0
        if not chunk:
            self._eof = True

    def read_batch(self, max_records: int) -> list[str] | None:
        if self._file is None:
            self.open()
        start = self._offset + self._pos
        raw: list[bytes] = []
        buf, pos = self._buf, self._pos
        while len(raw) < max_records:
            newline = buf.find(b"\n", pos)
            if newline >= 0:
                raw.append(buf[pos:newline])
                pos = newline + 1
                continue
            if self._eof:
                if pos < len(buf):  # a last line without a trailing newline
                    raw.append(buf[pos:])
                    pos = len(buf)
                break
            self._pos = pos
            try:
                self._fill()
            except (pa.ArrowException, OSError) as exc:
                raise self._fail(f"read error at byte {self._offset + self._pos}", exc) from exc
            buf, pos = self._buf, self._pos
        self._pos = pos
        if not raw:
            return None if self._eof and pos >= len(buf) else []
        return self._decode(raw, start)

    def _decode(self, raw: list[bytes], start: int) -> list[str]:
        """Decode raw lines (``\r`` stripped); ``start`` is the byte offset of the first one."""
        encoding = self.encoding
        lines = []
        for line in raw:
            try:
                lines.append((line[:-1] if line.endswith(b"\r") else line).decode(encoding))
            except UnicodeDecodeError as exc:
                raise SourceError(f"cannot read {self.file}: the line at byte {start} is not valid "
                                  f"{encoding}: {exc}") from exc
            start += len(line) + 1
        return lines

    def position(self) -> int:
        return self._offset + self._pos

    def seek(self, position: int) -> None:
        position = int(position)
        if position < 0:
            raise SourceError(f"cannot seek {self.file} to byte {position}")
        self._reset(position)

    def progress(self, position: Any) -> tuple[int, int] | None:
        """Bytes before ``position`` (a byte offset) of the file's size at submit."""
        if self.size is None:
            return None
        return min(int(position), self.size), self.size

    def close(self) -> None:
        if self._file is not None:
            offset = self.position()
            self._file.close()
            self._file = None
            self._offset, self._pos, self._buf = offset, 0, b""


class TextFileSource(Source):
    """The lines of text files, without their line ends (``\\n`` or ``\\r\\n``); one split per file.

    Each split remembers the byte offset of its next line, so a restarted job continues
    exactly where the checkpoint left off without re-reading the file from the start.
    """

    def __init__(self, path: str, encoding: str = "utf-8") -> None:
        _check_line_encoding(encoding)
        self.path = path
        self.encoding = encoding

    progress_unit = "bytes"

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        files = list_files(self.path, "text file")
        return [_TextSplit(f, self.encoding, size) for f, size in zip(files, file_sizes(files), strict=True)]
