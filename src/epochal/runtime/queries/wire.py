"""The queryable-state protocol between a client and a worker: its messages and wire format.

Messages are frozen dataclasses without slots. A client keeps one TCP connection to each worker it
asks (the address comes from the JobMaster, through the driver's REST API). Each request is one
plain frame (:mod:`epochal.runtime.host.frames`, which cuts both sides' reads into frames)::

    length:u32 | token:32 bytes | payload

and each answer one plain frame ``length:u32 | payload``. A payload (:func:`encode`, :func:`decode`) is
the pickle-5 of a plain tuple: the message's kind (its index in :data:`KINDS`), then its fields in
order. Pickling the dataclass itself cost 4-5 µs a message more on each side (pickle names and
looks up its class). The token is the job's query token (:func:`query_token`, derived from the
job's own token, so that it grants queries and nothing else); the worker compares it
(:func:`hmac.compare_digest`) before it unpickles anything of the request. Requests may be
pipelined: answers carry the request's id.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import operator
import pickle
from dataclasses import dataclass
from typing import Any, Literal

from epochal.runtime.host.frames import LENGTH, TOKEN_BYTES
from epochal.serialization import dumps

#: The isolation levels (docs/queryable_state.md).
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)
Level = Literal["read_uncommitted", "read_committed"]

#: The most bytes one read of a query connection takes, on either side, into one buffer that
#: every read of the connection reuses (``recv_into``). A ``recv`` into a fresh 1 MiB ``bytes``
#: cost about 20 µs of CPU a call on each side (glibc maps and unmaps a block that large; in a
#: worker's process, of many threads, an unmap also interrupts the cores its other threads ran
#: on): a third of what a blocking lookup cost the client.
RECV_BYTES = 1 << 16

#: The error codes of :class:`QueryFailed`.
UNAUTHORIZED = "unauthorized"
UNKNOWN_STATE = "unknown_state"
BAD_KEY = "bad_key"
BAD_REQUEST = "bad_request"
NOT_OWNER = "not_owner"  # retriable: the client's routing is stale (a restart or rescale moved the key)
NOT_READY = "not_ready"  # retriable: the worker is not serving yet
RETRIABLE = frozenset({NOT_OWNER, NOT_READY})


def query_token(job_token: bytes) -> bytes:
    """The token queries of a job carry: derived from the job's token (which also admits workers
    to the job's control and data connections), so that handing it to query clients hands out
    nothing else."""
    return hmac.new(job_token, b"epochal queryable state", hashlib.sha256).digest()


@dataclass(frozen=True)
class Lookup:
    """The values of ``keys`` (one or many) of queryable state ``state`` at isolation ``level``."""

    request_id: int
    state: str
    keys: tuple[Any, ...]
    level: str = READ_UNCOMMITTED


@dataclass(frozen=True)
class Scan:
    """A page of at most ``limit`` (key, value) pairs of ``state`` held by this worker, from
    ``cursor`` (``(key group, entries of it to skip)``; None: the first of its groups)."""

    request_id: int
    state: str
    level: str = READ_UNCOMMITTED
    cursor: tuple[int, int] | None = None
    limit: int = 1000


Request = Lookup | Scan


@dataclass(frozen=True)
class Values:
    """The answer to a :class:`Lookup`: ``found[i]`` says whether ``keys[i]`` has a value, then
    ``values[i]`` is it (None otherwise). ``checkpoint_id``: for read_committed, the completed
    checkpoint the values are of (None: none completed yet, so no key has a committed value)."""

    request_id: int
    found: tuple[bool, ...]
    values: tuple[Any, ...]
    checkpoint_id: int | None = None


@dataclass(frozen=True)
class Page:
    """The answer to a :class:`Scan`: ``items`` and where the next page starts (None: this
    worker has no more)."""

    request_id: int
    items: list[tuple[Any, Any]]
    cursor: tuple[int, int] | None
    checkpoint_id: int | None = None


@dataclass(frozen=True)
class QueryFailed:
    """A request was refused: ``code`` (one of the codes above) and a sentence for people."""

    request_id: int
    code: str
    detail: str

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE


Answer = Values | Page | QueryFailed
#: The messages, by the kind a payload names them with.
KINDS: tuple[type, ...] = (Lookup, Scan, Values, Page, QueryFailed)
_KIND = {cls: kind for kind, cls in enumerate(KINDS)}
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in KINDS}
_VALUES = {cls: operator.attrgetter(*names) for cls, names in _FIELDS.items()}


def encode(message: Request | Answer) -> bytes:
    """``message``'s payload: the pickle of ``(kind, *fields)``; values a plain pickle cannot
    write go by value (:func:`epochal.serialization.dumps`). Raises what pickling raises."""
    cls = type(message)
    return dumps((_KIND[cls], *_VALUES[cls](message)))


def decode(payload: bytes | memoryview) -> Request | Answer:
    """The message of ``payload`` (:func:`encode`). Raises ValueError for a payload that is no
    message, and what unpickling raises (a key of a class this process cannot import)."""
    message = pickle.loads(payload)
    if type(message) is not tuple or not message or type(message[0]) is not int or not 0 <= message[0] < len(KINDS):
        raise ValueError("not a queryable-state message")
    cls = KINDS[message[0]]
    names = _FIELDS[cls]
    if len(message) != len(names) + 1:
        raise ValueError(f"a {cls.__name__} of {len(message) - 1} fields, not {len(names)}")
    decoded: Request | Answer = object.__new__(cls)
    decoded.__dict__.update(zip(names, message[1:], strict=True))  # as pickle restores a dataclass
    return decoded


def request_frame(token: bytes, payload: bytes) -> bytes:
    """A request frame: ``payload`` (a :data:`Request` as :func:`encode` writes it) behind ``token``."""
    return LENGTH.pack(TOKEN_BYTES + len(payload)) + token + payload
