"""A keyed job with an oracle of its state, for the queryable-state tests.

One source subtask emits record ``i`` = ``(key i % KEYS, 1, i)``; a rolling ``reduce`` keeps, per
key, ``(key, n, h)``: how many records of the key it has seen and a hash chain of their indices.
With one source subtask a key's records reach its reduce in order, so after ``n`` records a key's
value is exactly :func:`expected` ``(key, n)``: a value that is not is torn, invented or mixed up
with another key's. Values only grow with ``n``, so a value going back is a rollback.
"""

from __future__ import annotations

import time
from typing import Any

from epochal.runtime.operators.functions import ProcessFunction
from epochal.state.snapshot import RestoreSource
from epochal.state.storage import CheckpointStorage

KEYS = 20
MODULUS = (1 << 61) - 1
STATE = "chain"
UID = "chain"


def record(i: int) -> tuple[str, int, int]:
    return (f"k{i % KEYS}", 1, i)


def chain(accumulated: tuple[str, int, int], new: tuple[str, int, int]) -> tuple[str, int, int]:
    return (accumulated[0], accumulated[1] + 1, (accumulated[2] * 31 + new[2]) % MODULUS)


_CHAINS: dict[int, list[int]] = {}


def _chain_of(key_index: int, n: int) -> int:
    """The hash chain of the key's first ``n`` record indices (``key_index + m * KEYS``)."""
    chain = _CHAINS.setdefault(key_index, [key_index])
    while len(chain) < n:
        chain.append((chain[-1] * 31 + key_index + len(chain) * KEYS) % MODULUS)
    return chain[n - 1]


def expected(key: str, n: int) -> tuple[str, int, int]:
    """The value key ``key`` holds after its first ``n`` records."""
    return (key, n, _chain_of(int(key[1:]), n))


def is_real(key: str, value: Any) -> bool:
    """Whether ``value`` is one the key had (after some number of its records)."""
    return isinstance(value, tuple) and len(value) == 3 and value[0] == key and value[1] >= 1 \
        and value == expected(key, value[1])


def break_committed_views(value: Any) -> Any:
    """A map in the job that switches the workers' committed views off (read_committed then reads
    the live state): the test showing they are needed."""
    from epochal.dataflow.queries import machine

    machine.COMMITTED_VIEWS = False
    return value


def keyed_job(env: Any, rate: float = 2000, broken: bool = False, parallelism: int | None = None) -> None:
    stream = env.from_generator(record, count=None, rate=rate).set_parallelism(1).uid("source")
    result = stream.key_by(lambda r: r[0]).as_queryable_state(STATE).reduce(chain).uid(UID)
    if parallelism is not None:
        result.set_parallelism(parallelism)
    if broken:
        result = result.map(break_committed_views).uid("break")
        if parallelism is not None:
            result.set_parallelism(parallelism)
    result.discard()


def checkpoint_values(checkpoint_root: str, checkpoint_id: int, max_parallelism: int = 128, uid: str = UID,
                      state: str = "aggregate") -> dict[str, Any]:
    """Every key's value of the reduce (or of operator ``uid``'s ``state``) in checkpoint
    ``checkpoint_id`` (under the job's root)."""
    storage = CheckpointStorage(checkpoint_root)
    source = RestoreSource(storage, checkpoint_id, storage.read_metadata(checkpoint_id))
    values: dict[str, Any] = {}
    for _, states in source.keyed_groups(uid, range(max_parallelism)):
        values.update(states.get(state, {}))
    return values


def values_at_position(checkpoint_root: str, checkpoint_id: int) -> dict[str, Any]:
    """Every key's value of the reduce in checkpoint ``checkpoint_id``, from the one source
    subtask's position in it (the records before it reached the reduce, in order): the oracle where
    keyed state is in no checkpoint file (the PostgreSQL backend)."""
    from epochal.connectors.source_reader import SourceReader

    storage = CheckpointStorage(checkpoint_root)
    source = RestoreSource(storage, checkpoint_id, storage.read_metadata(checkpoint_id))
    [(_, position)] = source.operator_lists("source", 0, 1)[SourceReader.POSITIONS]
    counts = {index: position // KEYS + (index < position % KEYS) for index in range(KEYS)}
    return {f"k{index}": expected(f"k{index}", n) for index, n in counts.items() if n}


class TwoSteps(ProcessFunction):
    """A keyed process function whose update of a key takes two writes with work between them:
    ``(n + 1, n)``, then, 1 ms later, ``(n + 1, n + 1)``. Between two records every value is ``(n, n)``; a read
    in the middle of a record sees ``(n + 1, n)``: a torn value. ``unsafe`` switches the workers'
    safe points off (queries answered on another thread at once)."""

    def __init__(self, unsafe: bool = False) -> None:
        self.unsafe = unsafe

    def open(self, context: Any) -> None:
        from epochal.state.descriptors import ValueStateDescriptor

        self.pair = context.get_state(ValueStateDescriptor("pair", default=(0, 0), queryable="pair"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        if self.unsafe:
            from epochal.dataflow.queries import server

            server.SAFE_POINTS = False
        n = self.pair.value()[1]
        self.pair.update((n + 1, n))
        # The work between the two writes. It sleeps, so it lets go of the interpreter lock as work
        # that waits on I/O does: a query thread answering at once runs right here (a busy loop
        # would hold the lock for its switch interval, 5 ms, and hide the torn value by chance).
        time.sleep(0.001)
        self.pair.update((n + 1, n + 1))
        return [value]


IN_PLACE = "in-place"


class InPlaceChain(ProcessFunction):
    """Keeps per key a list ``[n, h]`` (how many records of the key, a hash chain of their
    indices) in a queryable value state, and changes that list in place for every record before
    writing it back: a common Python idiom, and what a ``read_committed`` view must not show
    (its checkpoint's list was shared with the live state until the state objects copied it)."""

    def open(self, context: Any) -> None:
        from epochal.state.descriptors import ValueStateDescriptor

        self.chain = context.get_state(ValueStateDescriptor(IN_PLACE, queryable=IN_PLACE))

    def process_element(self, value: Any, ctx: Any) -> Any:
        current = self.chain.value()
        if current is None:
            current = [0, 0]
        current[0] += 1
        current[1] = (current[1] * 31 + value[2]) % MODULUS
        self.chain.update(current)
        return ()


def in_place_job(env: Any, rate: float = 2000) -> None:
    stream = env.from_generator(record, count=None, rate=rate).set_parallelism(1).uid("source")
    stream.key_by(lambda r: r[0]).process(InPlaceChain()).uid(IN_PLACE).discard()
