"""The persisted output queue of an operator instance (papers/002 Appendix, Fig. 10).

CEC (issue 14) writes an operator's output, data and control tuples in timestamp order, to a log
before forwarding it, so that the operator's eventual checkpoint can be rebuilt by reading the
log backwards and downstream replay can be served from it. This module is that log, with no
knowledge of windows or tuples: it stores *stream events* (SEs), opaque payloads each with a
sequence number and the timestamp range of the tuples inside.

Layout (one directory per operator instance, e.g. under the executor's local disk):

- ``seg-<first seq, 20 digits>.log``: frames ``header | payload``. The header (``_HEADER``) holds
  a magic, the payload length, the sequence number, the tuples' smallest and largest timestamp
  and a CRC32 over the header fields and the payload, so a frame is either whole and intact or
  detected as torn or corrupt.
- ``seg-<...>.idx``: the segment's index, fixed-size entries ``(seq, min_ts, max_ts, offset,
  length)`` appended after the frame's write completed (the paper's per-stream index). It is a
  hint, never the truth: :meth:`OutputLog.open` reconciles it with the log's length (papers/002
  Appendix, Recovery step 1), keeps only entries whose frame lies inside the file, recovers
  frames written after the last index entry by scanning them, and cuts a torn or corrupt tail at
  the end of the last good frame (file and index both).

Promises: sequence numbers are strictly increasing across segments (``append`` refuses one that
is not); a reopened log continues after its last intact frame; :meth:`OutputLog.read_from`
yields frames in sequence order starting at the first frame that may contain a tuple at or
after a timestamp (or at a sequence number); :meth:`OutputLog.read_backwards` yields them newest
first; :meth:`OutputLog.trim` removes only whole segments every reader has passed. The log is
not thread-safe: one writer (:class:`~epochal.cec.log_writer.LogWriter` serialises appends on its
thread) and reads between writes.

What the log survives: the worker process (a SIGKILL mid-write leaves at most a torn tail, cut on
open). What it does not survive: the loss of the disk holding the directory, after which the
instance cannot be rebuilt from its log (the job must restart from its sources).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

_MAGIC = b"SE01"
#: magic, payload length, sequence number, min timestamp, max timestamp, crc32
_HEADER = struct.Struct("<4sIqddI")
#: seq, min timestamp, max timestamp, offset, length (of the whole frame)
_INDEX = struct.Struct("<qddqI")


class LogError(Exception):
    """A misuse of the log (a sequence number that does not increase)."""


@dataclass(frozen=True)
class Frame:
    """One stream event as stored: where it is and what it holds."""

    seq: int
    min_ts: float
    max_ts: float
    segment: int  # first seq of its segment
    offset: int
    length: int  # header + payload


@dataclass(frozen=True)
class Repair:
    """What :meth:`OutputLog.open` found and fixed in one segment."""

    segment: int
    indexed: int  # index entries kept
    recovered: int  # frames found after the last index entry
    cut_bytes: int  # torn or corrupt tail removed


def _crc(seq: int, min_ts: float, max_ts: float, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(struct.pack("<qdd", seq, min_ts, max_ts)))


def encode(seq: int, min_ts: float, max_ts: float, payload: bytes) -> bytes:
    """One frame: header and payload."""
    return _HEADER.pack(_MAGIC, len(payload), seq, min_ts, max_ts, _crc(seq, min_ts, max_ts, payload)) + payload


def decode(data: bytes, offset: int) -> tuple[int, float, float, bytes, int] | None:
    """``(seq, min_ts, max_ts, payload, frame length)`` of the frame at ``offset``, or None if it is
    torn (shorter than its header says) or corrupt (bad magic or checksum)."""
    end = offset + _HEADER.size
    if end > len(data):
        return None
    magic, size, seq, min_ts, max_ts, crc = _HEADER.unpack_from(data, offset)
    if magic != _MAGIC or end + size > len(data):
        return None
    payload = bytes(data[end:end + size])
    if _crc(seq, min_ts, max_ts, payload) != crc:
        return None
    return seq, min_ts, max_ts, payload, _HEADER.size + size


class OutputLog:
    """A directory of segments (see the module docstring). Open it with :meth:`open`."""

    def __init__(self, directory: Path, segment_bytes: int, fsync: bool) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.frames: list[Frame] = []  # every intact frame, in seq order
        self.repairs: list[Repair] = []
        self._log: BinaryIO | None = None
        self._idx: BinaryIO | None = None
        self._segment = -1
        self._size = 0

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, directory: str | os.PathLike[str], segment_bytes: int = 64 << 20, fsync: bool = True) -> OutputLog:
        """Open (creating) the log in ``directory``, reconciling every segment's index with its
        file; the last segment's torn or corrupt tail is cut (a frame in the middle that fails its
        checksum ends the log there too: nothing after it can be trusted)."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        log = cls(path, segment_bytes, fsync)
        segments = sorted(int(p.stem.split("-")[1]) for p in path.glob("seg-*.log"))
        for i, first in enumerate(segments):
            frames, repair = log._reconcile(first)
            log.frames.extend(frames)
            log.repairs.append(repair)
            if repair.cut_bytes and i + 1 < len(segments):  # damage before the end: drop later segments
                for later in segments[i + 1:]:
                    log._path(later, "log").unlink(missing_ok=True)
                    log._path(later, "idx").unlink(missing_ok=True)
                break
        return log

    def _path(self, first: int, suffix: str) -> Path:
        return self.directory / f"seg-{first:020d}.{suffix}"

    def _reconcile(self, first: int) -> tuple[list[Frame], Repair]:
        data = self._path(first, "log").read_bytes()
        entries = _read_index(self._path(first, "idx"))
        frames: list[Frame] = []
        for seq, min_ts, max_ts, offset, length in entries:  # trust an entry only if its frame is there
            if offset != (frames[-1].offset + frames[-1].length if frames else 0):
                break
            found = decode(data, offset)
            if found is None or found[0] != seq or found[4] != length:
                break
            frames.append(Frame(seq, min_ts, max_ts, first, offset, length))
        indexed = len(frames)
        offset = frames[-1].offset + frames[-1].length if frames else 0
        while (found := decode(data, offset)) is not None:  # written, not yet indexed
            seq, min_ts, max_ts, _, length = found
            if frames and seq <= frames[-1].seq:
                break
            frames.append(Frame(seq, min_ts, max_ts, first, offset, length))
            offset += length
        cut = len(data) - offset
        if cut:
            with open(self._path(first, "log"), "r+b") as f:
                f.truncate(offset)
                os.fsync(f.fileno())
        if cut or indexed != len(entries) or indexed != len(frames):
            _write_index(self._path(first, "idx"), frames)
        return frames, Repair(first, indexed, len(frames) - indexed, cut)

    # ------------------------------------------------------------------ writing
    @property
    def last_seq(self) -> int:
        """The sequence number of the newest intact frame (-1: empty)."""
        return self.frames[-1].seq if self.frames else -1

    def append(self, seq: int, min_ts: float, max_ts: float, payload: bytes) -> Frame:
        """Write one stream event and, once it is on disk (fsync'd unless ``fsync=False``), its
        index entry. ``seq`` must exceed :attr:`last_seq`, and the log stays in timestamp order:
        ``min_ts <= max_ts`` and ``min_ts`` is not below the previous frame's ``max_ts`` (what
        :meth:`find` by timestamp relies on)."""
        if seq <= self.last_seq:
            raise LogError(f"sequence number {seq} does not follow {self.last_seq}")
        if min_ts > max_ts or (self.frames and min_ts < self.frames[-1].max_ts):
            previous = self.frames[-1].max_ts if self.frames else None
            raise LogError(f"frame {seq} [{min_ts}, {max_ts}] breaks timestamp order "
                           f"(the previous frame ends at {previous})")
        frame_bytes = encode(seq, min_ts, max_ts, payload)
        if self._log is None or (self._size and self._size + len(frame_bytes) > self.segment_bytes):
            self._roll(seq)
        assert self._log is not None and self._idx is not None
        offset = self._size
        self._log.write(frame_bytes)
        self._log.flush()
        if self.fsync:
            os.fsync(self._log.fileno())
        self._size += len(frame_bytes)
        frame = Frame(seq, min_ts, max_ts, self._segment, offset, len(frame_bytes))
        self._idx.write(_INDEX.pack(seq, min_ts, max_ts, offset, len(frame_bytes)))
        self._idx.flush()
        self.frames.append(frame)
        return frame

    def _roll(self, seq: int) -> None:
        """Continue the newest segment if it has room, else start one at ``seq``."""
        self.close()
        last = self.frames[-1] if self.frames else None
        if last is not None and last.offset + last.length < self.segment_bytes and self._segment < 0:
            self._segment = last.segment  # reopened: append to the newest segment
        else:
            self._segment = seq
        self._log = open(self._path(self._segment, "log"), "ab")
        self._idx = open(self._path(self._segment, "idx"), "ab")
        self._size = self._log.tell()

    def close(self) -> None:
        for handle in (self._log, self._idx):
            if handle is not None:
                handle.close()
        self._log = self._idx = None

    # ------------------------------------------------------------------ reading
    def read(self, frame: Frame) -> bytes:
        """The payload of ``frame`` (checked against its checksum)."""
        with open(self._path(frame.segment, "log"), "rb") as f:
            f.seek(frame.offset)
            data = f.read(frame.length)
        found = decode(data, 0)
        if found is None:
            raise LogError(f"frame {frame.seq} in segment {frame.segment} fails its checksum")
        return found[3]

    def find(self, *, seq: int | None = None, ts: float | None = None) -> int:
        """Position in :attr:`frames` of the first frame with a sequence number >= ``seq``, or the
        first that may hold a tuple with timestamp >= ``ts`` (its ``max_ts`` >= ``ts``; frames
        are in timestamp order, so this is a binary search). ``len(frames)`` if none."""
        import bisect

        if seq is not None:
            return bisect.bisect_left(self.frames, seq, key=lambda f: f.seq)
        if ts is not None:
            return bisect.bisect_left(self.frames, ts, key=lambda f: f.max_ts)
        return 0

    def read_from(self, *, seq: int | None = None, ts: float | None = None) -> Iterator[tuple[Frame, bytes]]:
        """Frames and payloads from :meth:`find` on, oldest first (replay to a consumer)."""
        for frame in self.frames[self.find(seq=seq, ts=ts):]:
            yield frame, self.read(frame)

    def read_backwards(self) -> Iterator[tuple[Frame, bytes]]:
        """Frames and payloads newest first (rebuilding an eventual checkpoint)."""
        for frame in reversed(self.frames):
            yield frame, self.read(frame)

    # ------------------------------------------------------------------ trimming
    def trim(self, before_seq: int) -> int:
        """Delete every segment whose frames all have sequence numbers < ``before_seq`` (no
        consumer needs them any more), never the segment being written; returns how many."""
        segments = sorted({f.segment for f in self.frames})
        removed = 0
        for i, first in enumerate(segments):
            if i + 1 == len(segments) or first == self._segment:  # the newest one is written to
                break
            if max(f.seq for f in self.frames if f.segment == first) >= before_seq:
                break
            self._path(first, "log").unlink(missing_ok=True)
            self._path(first, "idx").unlink(missing_ok=True)
            removed += 1
        self.frames = [f for f in self.frames if f.segment >= (segments[removed] if removed else -1)]
        return removed


def _read_index(path: Path) -> list[tuple[int, float, float, int, int]]:
    if not path.exists():
        return []
    data = path.read_bytes()
    whole = len(data) - len(data) % _INDEX.size  # a torn last entry is ignored
    return [_INDEX.unpack_from(data, o) for o in range(0, whole, _INDEX.size)]


def _write_index(path: Path, frames: list[Frame]) -> None:
    tmp = path.with_suffix(".idx.tmp")
    with open(tmp, "wb") as f:
        for frame in frames:
            f.write(_INDEX.pack(frame.seq, frame.min_ts, frame.max_ts, frame.offset, frame.length))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
