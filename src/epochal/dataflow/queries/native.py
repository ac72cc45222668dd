"""The native answer path: the common query answered without running Python bytecode (issue 37;
docs/queryable_state.md, "The native answer path").

A worker answers queries on its processing thread, between batches (:mod:`.server`). In the
Python path a lone ``read_uncommitted`` lookup passes through some twenty functions (the frame,
the token, the machine's checks, the key group, the lookup, the pickles, the send), and between
two lookups a millisecond apart a busy worker's work evicts their code and objects from the
caches: each such lookup cost the job 60-100 µs of its core, where the sockets alone cost 30-40 µs
(``benchmarks/queryable_state_cpu.py``). The extension ``epochal.dataflow.queries._answer`` (C,
built by ``pip install`` where a C compiler is; optional) does the whole of that lookup in one
call: read, token, unpickle, key groups, dict lookups, pickle, one ``sendmsg``.

It answers exactly what the machine (:class:`~.machine.QueryMachine`) would answer, and only
where that is plain: one whole request frame with the right token, a ``Lookup`` at
``read_uncommitted`` of a state of :func:`answerable` (served, the worker serving, a heap table
of dicts, no TTL), every key a str, bytes or int of a key group the state's subtask owns. Anything
else (a partial or pipelined frame, a refusal, an error, another backend, a value pickle cannot
write) it leaves, with the bytes it read, to the Python path, which answers it from the same
bytes. It only reads the state, under the interpreter lock, at the same safe points.

``EPOCHAL_NATIVE_QUERIES=0`` turns it off (the tests run both paths; benchmarks compare them).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Mapping
from typing import Any

from epochal.dataflow.queries.machine import Served
from epochal.runtime.queries.wire import KINDS, Lookup, Values
from epochal.serialization import PICKLE_PROTOCOL

_answer: Any
try:
    from epochal.dataflow.queries import _answer  # type: ignore[attr-defined,no-redef]
except ImportError:  # built without a C compiler
    _answer = None

__all__ = ["SWITCH_ENV", "Answerable", "answerable", "answerer", "unavailable_reason"]

SWITCH_ENV = "EPOCHAL_NATIVE_QUERIES"
#: query name -> (the state's table {key group: {key: value}}, its first key group, the group
#: after its last, the job's max parallelism): what the native path may answer
Answerable = dict[str, tuple[dict[int, Any], int, int, int]]


def unavailable_reason() -> str | None:
    """Why the native answer path is not in use (None: it is)."""
    if _answer is None:
        return "the extension epochal.dataflow.queries._answer was not built (no C compiler at install)"
    if os.environ.get(SWITCH_ENV, "1") == "0":
        return f"{SWITCH_ENV}=0"
    return None


def answerer(scratch: memoryview, token: bytes, states: Answerable) -> Any | None:
    """A native answerer reading into ``scratch``, for requests carrying ``token``, answering the
    states of ``states`` (a dict the caller keeps current in place: :func:`answerable`); None where
    the native path is not in use (:func:`unavailable_reason`)."""
    if unavailable_reason() is not None:
        return None
    return _answer.Answerer(scratch, token, states, KINDS.index(Lookup), KINDS.index(Values),
                            pickle.loads, pickle.dumps, PICKLE_PROTOCOL)


def answerable(states: Mapping[str, Served], serving: bool, backend_of: Callable[[Served], Any]) -> Answerable:
    """The states of ``states`` (the machine's, by query name) the native path may answer while the
    worker is ``serving``: those whose backend's table is a plain dict of key groups (the heap's)
    and that have no TTL (their values are stored with timestamps, which a query does not show)."""
    if not serving:
        return {}
    plain: Answerable = {}
    for query_name, served in states.items():
        backend = backend_of(served)
        if backend.ttl_configs.get(served.state_name) is not None:
            continue
        table = backend.owned_table(served.state_name)
        if type(table) is dict and all(isinstance(entries, dict) for entries in table.values()):
            plain[query_name] = (table, served.key_groups.start, served.key_groups.stop, served.max_parallelism)
    return plain
