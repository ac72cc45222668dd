"""Materialising captured state into checkpoint files, and reading it back on restore.

A subtask's keyed state of one operator becomes one file of per-key-group pickles, with the
offset, length and CRC of each group in the handle; a restore reads only the ranges of the
groups the new subtask owns, whatever the parallelism was. Operator state is one pickle per
subtask and operator, redistributed on restore (split or union).
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from epochal import serialization
from epochal.state.canonical import (
    ENCODING,
    KeyEncoder,
    Stored,
    check_encoding,
    check_layout,
    decoded_states,
    dump_stored,
    stored_states,
)
from epochal.state.incremental import IncrementalCapture, apply_delta
from epochal.state.operator_state import redistribute
from epochal.state.registry import FormatReader, format_reader
from epochal.state.storage import CheckpointError, CheckpointStorage, crc

Captured = dict[str, dict[str, Any]]  # uid -> {"keyed": {group: {name: {key: value}}}, "operator": {...}}

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
#: ``format`` of an incremental checkpoint's keyed-state handle: its chain of files
CHAIN = "chain"


def file_stem(uid: str) -> str:
    """A file name for ``uid`` that every filesystem accepts (uids may be any text, e.g. a
    ``<operation>:<name>`` uid derived from a user's name); a CRC keeps sanitised names apart."""
    safe = _UNSAFE.sub("_", uid)
    return safe if safe == uid else f"{safe}.{crc(uid.encode()):08x}"


def _group_blobs(keyed: dict[int, Any]) -> tuple[bytes, dict[str, list[int]]]:
    """One file of per-key-group pickles, and each group's ``[offset, length, crc]``."""
    return group_blobs(sorted(keyed.items()))


def group_blobs(keyed: Iterable[tuple[int, Any]],
                dump: Callable[[Any], bytes] = serialization.dumps) -> tuple[bytes, dict[str, list[int]]]:
    """:func:`_group_blobs` of ``(group, {state name: {key: value}})`` pairs in group order (a
    backend that reads its groups one at a time hands them over without a dict of all of them);
    ``dump``: how a group becomes bytes."""
    chunks, groups, offset = [], {}, 0
    for group, states in keyed:
        blob = dump(states)
        chunks.append(blob)
        groups[str(group)] = [offset, len(blob), crc(blob)]
        offset += len(blob)
    return b"".join(chunks), groups


def _write_groups(storage: CheckpointStorage, checkpoint_id: int, name: str, pairs: Iterable[tuple[int, Any]],
                  encoding: str | None) -> dict[str, Any]:
    data, groups = group_blobs(pairs, serialization.dumps if encoding is None else dump_stored)
    written = storage.write_file(checkpoint_id, name, data)
    handle = {"file": written["file"], "size": written["size"], "groups": groups}
    if encoding is not None:
        handle["encoding"] = encoding
    return handle


def write_key_groups(storage: CheckpointStorage, checkpoint_id: int, name: str,
                     keyed: Iterable[tuple[int, dict[str, dict[Any, Any]]]]) -> dict[str, Any]:
    """Write ``(group, {state name: {key: value}})`` pairs (in group order) as file ``name`` of
    checkpoint ``checkpoint_id`` in the canonical layout's object encoding (one pickle per group,
    :mod:`epochal.state.canonical`); returns its keyed-state handle (``file``, ``size``,
    ``groups``), which every backend restores."""
    return _write_groups(storage, checkpoint_id, name, keyed, None)


#: One group's place in a chunk of group blobs: (group, offset in the chunk, length, CRC-32)
Span = tuple[int, int, int, int]
#: Group blobs one after the other, and their spans
Chunk = tuple[bytes | memoryview, list[Span]]
#: What a writer of group blobs asks a reader for at a time
CHUNK_BYTES = 4 << 20


def write_stored_groups(storage: CheckpointStorage, checkpoint_id: int, name: str,
                        stored: Iterable[tuple[int, Stored]]) -> dict[str, Any]:
    """:func:`write_key_groups` of groups as a RocksDB database stores them (``(group, {name: (key
    bytes, value bytes)})``), in the canonical layout's stored-bytes encoding (the handle's
    ``encoding``); groups without entries are left out. Written as it is read
    (:func:`write_group_chunks`)."""
    return write_group_chunks(storage, checkpoint_id, name, stored_chunks(stored))


def stored_chunks(stored: Iterable[tuple[int, Stored]], min_bytes: int = CHUNK_BYTES) -> Iterator[Chunk]:
    """Groups as stored bytes, pickled (:func:`~epochal.state.canonical.dump_stored`) and joined
    into chunks of at least ``min_bytes`` (the last one may be smaller), each with its groups'
    spans; groups without entries are left out."""
    blobs: list[bytes] = []
    spans: list[Span] = []
    size = 0
    for group, states in stored:
        if not states:
            continue
        blob = dump_stored(states)
        spans.append((group, size, len(blob), crc(blob)))
        blobs.append(blob)
        size += len(blob)
        if size >= min_bytes:
            yield b"".join(blobs), spans
            blobs, spans, size = [], [], 0
    if blobs:
        yield b"".join(blobs), spans


def write_group_chunks(storage: CheckpointStorage, checkpoint_id: int, name: str,
                       chunks: Iterable[Chunk]) -> dict[str, Any]:
    """Write chunks of stored-bytes group blobs (:func:`stored_chunks`, or the native reader's
    :func:`epochal.state.rocksdb.native.read_chunks`), in group order, as file ``name`` of
    checkpoint ``checkpoint_id`` while they are produced (:meth:`CheckpointStorage.write_file_chunks`);
    returns its keyed-state handle, as :func:`write_stored_groups`'s."""
    groups: dict[str, list[int]] = {}
    offset = 0

    def data() -> Iterator[bytes | memoryview]:
        nonlocal offset
        for chunk, spans in chunks:
            for group, start, length, checksum in spans:
                groups[str(group)] = [offset + start, length, checksum]
            offset += len(chunk)
            yield chunk

    # every byte is in a group, each with its CRC: the file needs none of its own
    written = storage.write_file_chunks(checkpoint_id, name, data(), whole_crc=False)
    return {"file": written["file"], "size": written["size"], "groups": groups, "encoding": ENCODING}


def materialize(storage: CheckpointStorage, checkpoint_id: int, subtask: int, captured: Captured) -> dict[str, Any]:
    """Serialise and write one subtask's captured state; returns handles per operator uid. Keyed
    state of an incremental checkpoint goes to the job's ``shared/`` files, and its handle is the
    chain of files a restore reads (``{"format": "chain", "chain": [...]}``, oldest first)."""
    handles: dict[str, Any] = {}
    for uid, parts in captured.items():
        handle: dict[str, Any] = {}
        keyed = parts.get("keyed")
        upload = getattr(keyed, "upload", None)
        if upload is not None:  # a backend that writes its own files (RocksDB)
            handle["keyed"] = upload(storage, checkpoint_id, f"{file_stem(uid)}-{subtask}")
        elif isinstance(keyed, IncrementalCapture):
            plan = keyed.plan
            data, groups = _group_blobs(keyed.data)
            kind = "full" if plan.full else "delta"
            written = storage.write_shared(f"{file_stem(uid)}-{subtask}.c{checkpoint_id}.{kind}", data)
            link = {"file": written["file"], "size": written["size"], "groups": groups, "kind": kind}
            handle["keyed"] = {"format": CHAIN, "chain": [*plan.base, link]}
        elif keyed:
            handle["keyed"] = write_key_groups(storage, checkpoint_id, f"{file_stem(uid)}-{subtask}.keyed",
                                               sorted(keyed.items()))
        operator = parts.get("operator")
        if operator:
            handle["operator"] = storage.write_file(checkpoint_id, f"{file_stem(uid)}-{subtask}.operator",
                                                    serialization.dumps(operator))
        if handle and parts.get("states"):  # name -> state type of its keyed state (savepoint info)
            handle["states"] = dict(parts["states"])
        if handle and parts.get("entries"):  # name -> keys of the state (the metadata view's sizes)
            handle["entries"] = dict(parts["entries"])
        if handle:
            handles[uid] = handle
    return handles


def handle_bytes(handles: dict[str, Any]) -> int:
    """Bytes a subtask wrote for one checkpoint (of a chain, only its own newest file; of a
    backend's own format, what it says it wrote: :mod:`epochal.state.registry`)."""
    total = 0
    for handle in handles.values():
        for part in ("keyed", "operator"):
            if part in handle:
                keyed = handle[part]
                if "chain" in keyed:
                    total += keyed["chain"][-1]["size"]
                elif "written_bytes" in keyed:  # a backend's own format: what this checkpoint uploaded
                    total += keyed["written_bytes"]
                else:
                    total += keyed["size"]
    return total



class RestoreSource:
    """The state of one completed checkpoint, read lazily by the subtasks that restore from it."""

    def __init__(self, storage: CheckpointStorage, checkpoint_id: int, metadata: dict[str, Any]) -> None:
        check_layout(metadata, f"checkpoint {checkpoint_id}" if storage is None else storage.location(checkpoint_id))
        self.storage = storage
        self.checkpoint_id = checkpoint_id
        self.metadata = metadata
        self._encode_key = KeyEncoder()

    def _subtasks(self, uid: str) -> list[dict[str, Any]]:
        operator = self.metadata.get("operators", {}).get(uid)
        if operator is None:
            return []
        subtasks = operator["subtasks"]
        return [subtasks[key] for key in sorted(subtasks, key=int)]

    def keyed_handles(self, uid: str, key_groups: range) -> list[dict[str, Any]]:
        """The keyed-state handles of the old subtasks of ``uid`` that owned some of ``key_groups``
        (handles that name no key groups are all included)."""
        out = []
        for handle in self._subtasks(uid):
            keyed = handle.get("keyed")
            if not keyed:
                continue
            owned = keyed.get("key_groups")
            if owned is None or (owned[0] < key_groups.stop and key_groups.start < owned[1]):
                out.append(keyed)
        return out

    def keyed_groups(self, uid: str, key_groups: range, skip_rocksdb: bool = False,
                     names: frozenset[str] | None = None, stored: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(group, {state name: {key: value}})`` for every owned key group with state; of an
        incremental checkpoint, each old subtask's chain is read oldest first, only the ranges
        of the owned groups of each file. A handle in a backend's own format is read by the
        reader that backend registered (:mod:`epochal.state.registry`; one whose state is in a
        database refuses with a :class:`CheckpointError` that says what to do). ``skip_rocksdb``:
        leave out the handles whose files a backend restores as they are (what RocksDB subtasks
        wrote: a RocksDB backend ingests it, :meth:`rocksdb_checkpoints`). ``names``: only these
        states (RocksDB then scans only their column families; of the heap formats a group is
        read whole and the others dropped); groups without any of them are left out.
        ``stored``: each group as ``{state name: (key bytes, value bytes)}`` instead
        (:mod:`epochal.state.canonical`; a RocksDB canonical savepoint's groups as they are,
        nothing decoded; pickled dicts encoded), for a RocksDB backend's restore (``skip_rocksdb``
        too, and no ``names``)."""
        for handle in self._subtasks(uid):
            keyed = handle.get("keyed")
            if not keyed:
                continue
            reader = self._reader(keyed)
            if reader is not None:
                if not (skip_rocksdb and reader.fetches_files):
                    yield from reader.key_groups(self.storage, self.checkpoint_id, uid, keyed, key_groups, names)
                continue
            if "chain" not in keyed:
                groups = self._groups_of(keyed, key_groups, stored, names)
            else:
                groups = self._chain_groups(keyed["chain"], key_groups)
                if stored:
                    groups = ((g, stored_states(s, False, self._encode_key)) for g, s in groups)
            if names is None or stored:
                yield from groups
                continue
            for group, states in groups:
                kept = {name: entries for name, entries in states.items() if name in names}
                if kept:
                    yield group, kept

    def rocksdb_checkpoints(self, uid: str, key_groups: range) -> Iterator[tuple[str, range]]:
        """For each old subtask of ``uid`` owning some of ``key_groups`` whose files a backend
        restores as they are (a format whose reader
        :attr:`~epochal.state.registry.FormatReader.fetches_files`: RocksDB's): its files fetched
        into a local checkpoint directory and the groups of it wanted, ``(directory, groups)``;
        the directory is removed when the iteration moves on (or ends)."""
        for handle in self._subtasks(uid):
            keyed = handle.get("keyed")
            if not keyed:
                continue
            reader = self._reader(keyed)
            if reader is not None and reader.fetches_files:
                yield from reader.fetch(self.storage, self.checkpoint_id, keyed, key_groups)

    def _reader(self, keyed: dict[str, Any]) -> FormatReader | None:
        """The registered reader of ``keyed``'s format; None for the generic handles (a file of
        per-group blobs, an incremental chain)."""
        handle_format = keyed.get("format")
        if handle_format is None or handle_format == CHAIN:
            return None
        return format_reader(handle_format, "" if self.storage is None else self.storage.location(self.checkpoint_id))

    def _groups_of(self, keyed: dict[str, Any], key_groups: range, stored: bool = False,
                   names: frozenset[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """The owned groups of one file of per-group blobs (a heap checkpoint's, or a canonical savepoint's),
        decoded (only ``names``) or (``stored``) as stored bytes, whichever encoding it holds."""
        as_bytes = check_encoding(keyed, self._path(keyed))
        for group_text in keyed["groups"]:
            group = int(group_text)
            if group in key_groups:
                blob = self._group(keyed, group_text)
                yield group, stored_states(blob, as_bytes, self._encode_key) if stored \
                    else decoded_states(blob, as_bytes, names)

    def _chain_groups(self, chain: list[dict[str, Any]], key_groups: range) -> Iterator[tuple[int, dict[str, Any]]]:
        """An incremental chain's owned groups, each merged from its links oldest first and
        yielded before the next is read: a restore holds one group's merge beside what it loaded
        already, not a second copy of the whole state (at 15 M keys a subtask's restore peaked
        at twice its state when the chain was merged whole first)."""
        owned = sorted({int(g) for link in chain for g in link["groups"] if int(g) in key_groups})
        for group in owned:
            states: dict[str, Any] = {}
            for link in chain:
                if str(group) in link["groups"]:
                    apply_delta(states, self._group(link, str(group)))
            if states:
                yield group, states

    def _group(self, keyed: dict[str, Any], group_text: str) -> dict[str, Any]:
        offset, length, checksum = keyed["groups"][group_text]
        data = self.storage.read_file(self.checkpoint_id, keyed, offset, length, checksum)
        return _unpickle(data, self._path(keyed))

    def operator_lists(self, uid: str, index: int, parallelism: int) -> dict[str, list[Any]]:
        """Operator list state for new subtask ``index`` of ``parallelism``, redistributed."""
        old = []
        for handle in self._subtasks(uid):
            part = handle.get("operator")
            old.append(_unpickle(self.storage.read_file(self.checkpoint_id, part), self._path(part)) if part else {})
        return redistribute(old, index, parallelism)

    def _path(self, handle: dict[str, Any]) -> str:
        return self.storage.file_path(self.checkpoint_id, handle)


def _unpickle(data: bytes, path: str) -> Any:
    try:
        return pickle.loads(data)
    except Exception as error:
        raise CheckpointError(f"checkpoint state file {path} cannot be decoded: {error}", path=path) from error
