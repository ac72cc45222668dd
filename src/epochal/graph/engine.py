"""The superstep engine of one partition: pure computation, no sockets, threads or clocks.

A superstep on one worker is: ``step(ctx)`` computes (vector programs: new master values from
the table; vertex programs: ``compute`` of every active vertex) and returns what goes to each
peer as one :class:`Exchange` (changed master values for the peer's replicas, and messages);
``receive`` takes each peer's exchange for the same superstep; ``commit`` makes the superstep's
results current once the global barrier says every worker finished it. Until ``commit`` the
table the superstep read is untouched, so a fast peer's exchange may arrive before this worker
has computed, and a superstep can be rolled back (``rollback``).

For checkpoints (the Imitator-CKPT baseline, papers/003 §2.2-2.3) the engine tracks which
masters changed since the last one: :meth:`delta` returns only those (plus, for vertex programs,
the halted flags and the messages waiting for the next superstep), :meth:`restore` reinstates a
saved state, after which :meth:`resync` sends every master's value to its replicas again.
The same engine runs in the Spark worker (:mod:`epochal.graph.worker`) and in the local runner
(:mod:`epochal.graph.local`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from epochal.graph.partition import Partition
from epochal.graph.program import SuperstepContext, VectorProgram, Vertex, VertexProgram

_COMBINERS: dict[str, Callable[[Any, Any], Any]] = {"sum": lambda a, b: a + b, "min": min, "max": max}


@dataclass
class Exchange:
    """What one worker sends one peer in one superstep (exactly one per pair and superstep)."""

    superstep: int
    sender: int
    #: indices into the receiver's ``receive_slots[sender]`` and their new values
    positions: np.ndarray | None = None
    values: np.ndarray | None = None
    #: with a resync: which of those values changed in the superstep before (else all did)
    changed: np.ndarray | None = None
    #: vertex programs: destination vertex ids and the (combined) messages for them
    message_ids: list[int] = field(default_factory=list)
    messages: list[Any] = field(default_factory=list)
    #: the sender's recovery epoch (replication): an exchange from before a recovery is stale
    epoch: int = 0


@dataclass
class StepReport:
    """One worker's account of a superstep, for the global barrier."""

    superstep: int
    active: int
    sent: int
    aggregates: dict[str, Any] = field(default_factory=dict)
    #: seconds this worker spent, filled in by the worker driver: "compute" (the program),
    #: "send" (serialising and sending the exchanges), "commit" (committing the superstep before)
    phases: dict[str, float] = field(default_factory=dict)


def _changed(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Which rows differ (NaN equals NaN; 2-D values: any column)."""
    same = (new == old) | ((new != new) & (old != old))
    return ~same if same.ndim == 1 else ~same.all(axis=tuple(range(1, same.ndim)))


class VectorEngine:
    """Runs a :class:`VectorProgram` on one partition."""

    def __init__(self, part: Partition, program: VectorProgram, num_vertices: int) -> None:
        self.part = part
        self.program = program
        self.num_vertices = num_vertices
        self.table: np.ndarray | None = None
        #: which table slots changed in the last committed superstep
        self.changed_table = np.zeros(part.table_size, dtype=bool)
        #: masters changed since the last checkpoint
        self.dirty = np.zeros(part.num_masters, dtype=bool)
        self._pending: np.ndarray | None = None
        self._pending_changed: np.ndarray | None = None
        self._pending_superstep: int | None = None
        #: what peers sent, by superstep (a fast peer's next superstep may come before this commit)
        self._incoming: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]] = {}
        #: replication: what the last commit overwrote (table empty before it?, (slots, old values)
        #: in order, the changed flags before it), and its superstep
        self._undo: tuple[bool, list[tuple[np.ndarray, np.ndarray]], np.ndarray] | None = None
        self._undo_superstep: int | None = None

    @property
    def values(self) -> np.ndarray | None:
        """The masters' committed values."""
        return None if self.table is None else self.table[:self.part.num_masters]

    def step(self, ctx: SuperstepContext) -> tuple[dict[int, Exchange], StepReport]:
        part = self.part
        if ctx.superstep == 0 or self.table is None:
            result = self.program.init(part, ctx)
            changed = np.ones(part.num_masters, dtype=bool)
        else:
            ctx.changed = self.changed_table
            result = self.program.compute(part, self.table, ctx)
            changed = _changed(result.values, self.table[:part.num_masters])
        values = np.asarray(result.values)
        if values.shape[0] != part.num_masters:
            raise ValueError(f"{type(self.program).__name__} returned {values.shape[0]} values for "
                             f"{part.num_masters} vertices")
        self._pending, self._pending_changed, self._pending_superstep = values, changed, ctx.superstep
        out: dict[int, Exchange] = {}
        sent = 0
        selfish = part.selfish if part.selfish is not None and part.selfish.any() else None
        for peer, index in part.send_index.items():
            if peer in part.gone:
                continue
            send = changed[index]
            if selfish is not None:  # selfish vertices' FT replicas: only in the last superstep, all of them
                lazy = selfish[index]
                send = (send & ~lazy) | lazy if ctx.final else send & ~lazy
            positions = np.flatnonzero(send)
            out[peer] = Exchange(ctx.superstep, part.worker, positions, values[index[positions]])
            sent += int(positions.size)
        for peer in part.peers:  # one exchange per peer and superstep, even if empty
            if peer not in out:
                out[peer] = Exchange(ctx.superstep, part.worker)
        active = int(changed.sum()) if result.active is None else int(result.active)
        return out, StepReport(ctx.superstep, active, sent, dict(result.aggregates))

    def receive(self, exchange: Exchange) -> None:
        if exchange.positions is not None and exchange.positions.size:
            slots = self.part.receive_slots[exchange.sender][exchange.positions]
            self._incoming.setdefault(exchange.superstep, []).append(
                (slots, np.asarray(exchange.values), exchange.changed))

    def commit(self, superstep: int | None = None, undo: bool = False) -> None:
        """Superstep ``superstep`` is complete here: its values, and what peers sent for it,
        become the table (None: the one computed last, or, with none, whatever peers sent).
        With ``undo`` what the commit overwrites is kept, so that :meth:`rewind` can take it back
        until the global barrier of ``superstep`` passed (replication: committing before the
        barrier keeps the commit off the barrier's critical path; the price is a copy of what
        it overwrites, or of the whole table when that is most of it)."""
        part = self.part
        superstep = self._pending_superstep if superstep is None else superstep
        log: list[tuple[np.ndarray, np.ndarray]] = []
        log_writes = undo  # keep each overwritten entry (few), or one copy of the table (many)
        if undo:
            self._undo = (self.table is None, log, self.changed_table if self._pending is not None
                          else self.changed_table.copy())
            if self.table is not None and self._writes(superstep) * 8 > self.table.shape[0]:
                log.append((np.arange(self.table.shape[0]), self.table.copy()))
                log_writes = False
        self._undo_superstep = superstep if undo else None
        if self._pending is not None and self._pending_superstep == superstep:
            values = self._pending
            if self.table is None:
                self.table = np.zeros((part.table_size, *values.shape[1:]), dtype=values.dtype)
            changed = np.zeros(part.table_size, dtype=bool)
            if log_writes:
                moved = np.flatnonzero(self._pending_changed)  # type: ignore[arg-type]
                log.append((moved, self.table[moved].copy()))
                self.table[moved] = values[moved]  # the others are unchanged by definition
            else:
                self.table[:part.num_masters] = values
            changed[:part.num_masters] = self._pending_changed
            self.dirty |= self._pending_changed
            self.changed_table = changed
            self._pending = self._pending_changed = self._pending_superstep = None
        for step in [superstep] if superstep is not None else sorted(self._incoming):
            for slots, values_in, flags in self._incoming.pop(step, []):
                if log_writes:
                    log.append((slots, self.table[slots].copy()))  # type: ignore[index]
                self.table[slots] = values_in  # type: ignore[index]
                self.changed_table[slots] = True if flags is None else flags

    def _writes(self, superstep: int | None) -> int:
        """Table entries committing ``superstep`` overwrites (at most)."""
        masters = int(self._pending_changed.sum()) if self._pending_changed is not None else 0
        return masters + sum(int(slots.size) for slots, _, _ in self._incoming.get(superstep, [])) \
            if superstep is not None else masters

    def rollback(self) -> None:
        """Forget the superstep in progress (its computed values and what peers sent)."""
        self._pending = self._pending_changed = self._pending_superstep = None
        self._incoming = {}

    def rewind(self, resume_at: int) -> None:
        """Make the state the one at the start of superstep ``resume_at`` (papers/003 Algorithm 1,
        rollback): commit a superstep before it that is still pending (its barrier passed), and
        forget ``resume_at`` and later (what this worker computed and what peers sent)."""
        undone = self._undo_superstep
        if undone is not None and undone >= resume_at and self._undo is not None:
            was_empty, log, changed = self._undo  # committed before a barrier that never passed
            if was_empty:  # (superstep 0: nothing was committed before it)
                self.table = None
            else:
                for slots, old in reversed(log):
                    self.table[slots] = old  # type: ignore[index]
            self.changed_table = changed
            self._undo, self._undo_superstep = None, None
        pending = self._pending_superstep
        if pending is not None and pending < resume_at:
            self.commit(pending)
        self._pending = self._pending_changed = self._pending_superstep = None
        self._incoming = {s: v for s, v in self._incoming.items() if s < resume_at}

    def install(self, part: Partition, table: np.ndarray | None, changed: np.ndarray) -> None:
        """Run on ``part`` from now on, with ``table`` and ``changed`` (after a recovery)."""
        self.part, self.table, self.changed_table = part, table, changed
        self.dirty = np.zeros(part.num_masters, dtype=bool)
        self._undo, self._undo_superstep = None, None
        self.rollback()

    # ------------------------------------------------------------------ checkpoints
    def delta(self, full: bool = False) -> dict[str, Any]:
        """Masters changed since the last delta (all with ``full``), with last superstep's changed flags."""
        assert self.table is not None
        slots = np.arange(self.part.num_masters) if full else np.flatnonzero(self.dirty)
        self.dirty[:] = False
        return {"slots": slots, "values": self.table[slots].copy(),
                "changed": self.changed_table[:self.part.num_masters].copy()}

    def restore(self, values: np.ndarray, changed: np.ndarray) -> None:
        """Reinstate the masters' values and last changed flags (replicas follow with ``resync``)."""
        self.table = np.zeros((self.part.table_size, *values.shape[1:]), dtype=values.dtype)
        self.table[:self.part.num_masters] = values
        self.changed_table = np.zeros(self.part.table_size, dtype=bool)
        self.changed_table[:self.part.num_masters] = changed
        self.dirty[:] = False

    def commit_resync(self) -> None:
        """Every peer's resync arrived: the replicas hold the restored values."""
        self.commit()

    def resync(self, superstep: int) -> dict[int, Exchange]:
        """Every master's value (and changed flag) for the peers' replicas, after a restore."""
        assert self.table is not None
        out: dict[int, Exchange] = {}
        for peer in self.part.peers:
            index = self.part.send_index.get(peer)
            if index is None:
                out[peer] = Exchange(superstep, self.part.worker)
            else:
                out[peer] = Exchange(superstep, self.part.worker, np.arange(index.size), self.table[index].copy(),
                                     self.changed_table[index].copy())
        return out

    def output(self) -> np.ndarray:
        assert self.table is not None
        return self.program.result(self.part, self.table[:self.part.num_masters])


class VertexEngine:
    """Runs a :class:`VertexProgram` (Pregel form) on one partition."""

    def __init__(self, part: Partition, program: VertexProgram, num_vertices: int) -> None:
        self.part = part
        self.program = program
        self.num_vertices = num_vertices
        combiner = program.combiner
        self.combine = cast(Callable[[Any, Any], Any] | None,
                            _COMBINERS[combiner] if isinstance(combiner, str) else combiner)
        self.values: list[Any] = []
        self.halted = np.zeros(part.num_masters, dtype=bool)
        self.dirty = np.zeros(part.num_masters, dtype=bool)
        #: messages for the superstep about to run (slot -> list, or combined value)
        self.inbox: dict[int, Any] = {}
        self._next: dict[int, Any] = {}
        self._outbox: dict[int, dict[int, Any] | list[tuple[int, Any]]] = {}
        self._aggregates: dict[str, Any] = {}
        self._sent = 0
        self._targets: list[int] = []
        self._messages: list[Any] = []
        self.ctx = SuperstepContext(0, num_vertices, part.worker, part.num_workers)
        self._vertex = Vertex(self)

    # -- called by Vertex
    def out_edges(self, slot: int) -> list[tuple[int, float | None]]:
        part = self.part
        lo, hi = int(part.out_ptr[slot]), int(part.out_ptr[slot + 1])
        ids = part.out_ids[lo:hi].tolist()
        weights = [None] * len(ids) if part.out_weight is None else part.out_weight[lo:hi].tolist()
        return list(zip(ids, weights, strict=True))

    def send(self, target: int, message: Any) -> None:
        """Queue a message; :meth:`_route` sends the superstep's messages together."""
        self._targets.append(target)
        self._messages.append(message)

    def _route(self) -> None:
        """Deliver or address the superstep's messages: one vectorised owner lookup for all,
        then local ones into the next inbox and remote ones per peer (combined per target)."""
        if not self._targets:
            return
        part, combine = self.part, self.combine
        targets = np.asarray(self._targets, dtype=np.int64)
        owners = part.owner_of(targets).tolist()
        mine = part.worker
        local = [i for i, w in enumerate(owners) if w == mine]
        if local:
            slots = part.slot_of(targets[local]).tolist()
            for slot, i in zip(slots, local, strict=True):
                self._deliver(self._next, slot, self._messages[i])
        for i, (owner, message) in enumerate(zip(owners, self._messages, strict=True)):
            if owner == mine:
                continue
            target = self._targets[i]
            box = self._outbox.setdefault(owner, {} if combine is not None else [])
            if isinstance(box, dict):
                box[target] = message if target not in box or combine is None else combine(box[target], message)
            else:
                box.append((target, message))
        self._sent = len(self._targets)
        self._targets, self._messages = [], []

    def aggregate(self, name: str, value: Any) -> None:
        kind = self.program.aggregators.get(name, "sum")
        self._aggregates[name] = value if name not in self._aggregates else \
            _COMBINERS[kind](self._aggregates[name], value)

    def _deliver(self, box: dict[int, Any], slot: int, message: Any) -> None:
        if self.combine is None:
            box.setdefault(slot, []).append(message)
        else:
            box[slot] = message if slot not in box else self.combine(box[slot], message)

    # -- the superstep
    def step(self, ctx: SuperstepContext) -> tuple[dict[int, Exchange], StepReport]:
        part, program, vertex = self.part, self.program, self._vertex
        self.ctx = ctx
        if ctx.superstep == 0 or not self.values:
            props = part.properties
            self.values = [program.initial_value(int(v), {k: a[i] for k, a in props.items()})
                           for i, v in enumerate(part.ids.tolist())]
            self.halted[:] = False
        self._outbox, self._aggregates, self._sent, self._targets, self._messages = {}, {}, 0, [], []
        inbox, ids = self.inbox, part.ids
        vertex.superstep = ctx.superstep
        for slot in range(part.num_masters):
            messages = inbox.get(slot)
            if self.halted[slot] and messages is None:
                continue
            vertex._slot, vertex.id, vertex.value, vertex.halted = slot, int(ids[slot]), self.values[slot], False
            batch = [] if messages is None else (messages if self.combine is None else [messages])
            program.compute(vertex, batch)
            self.values[slot] = vertex.value
            self.halted[slot] = vertex.halted
            self.dirty[slot] = True
        self._route()
        out: dict[int, Exchange] = {}
        for peer in range(part.num_workers):
            if peer == part.worker:
                continue
            box = self._outbox.get(peer)
            if isinstance(box, dict):
                out[peer] = Exchange(ctx.superstep, part.worker, message_ids=list(box), messages=list(box.values()))
            elif box:
                out[peer] = Exchange(ctx.superstep, part.worker, message_ids=[t for t, _ in box],
                                     messages=[m for _, m in box])
            else:
                out[peer] = Exchange(ctx.superstep, part.worker)
        active = int(part.num_masters - self.halted.sum())
        return out, StepReport(ctx.superstep, active, self._sent, self._aggregates)

    def receive(self, exchange: Exchange) -> None:
        if exchange.message_ids:
            slots = self.part.slot_of(np.asarray(exchange.message_ids, dtype=np.int64)).tolist()
            for slot, message in zip(slots, exchange.messages, strict=True):
                self._deliver(self._next, slot, message)

    def commit(self, superstep: int | None = None, undo: bool = False) -> None:
        self.inbox, self._next = self._next, {}

    def rollback(self) -> None:
        self._next = {}

    def delta(self, full: bool = False) -> dict[str, Any]:
        slots = np.arange(self.part.num_masters) if full else np.flatnonzero(self.dirty)
        self.dirty[:] = False
        return {"slots": slots, "values": [self.values[i] for i in slots.tolist()], "halted": self.halted.copy(),
                "inbox": dict(self.inbox)}

    def restore(self, values: list[Any], halted: np.ndarray, inbox: dict[int, Any]) -> None:
        self.values, self.halted, self.inbox = list(values), halted.copy(), dict(inbox)
        self.dirty[:] = False

    def commit_resync(self) -> None:
        """Nothing to do: vertex programs keep no replicas (the restored messages stay)."""

    def resync(self, superstep: int) -> dict[int, Exchange]:
        """Vertex programs keep no replicas: nothing to send but the (empty) exchanges."""
        return {p: Exchange(superstep, self.part.worker) for p in range(self.part.num_workers) if p != self.part.worker}

    def output(self) -> list[Any]:
        return [self.program.result(int(v), value) for v, value in zip(self.part.ids.tolist(), self.values,
                                                                       strict=True)]


Engine = VectorEngine | VertexEngine


def make_engine(part: Partition, program: VectorProgram | VertexProgram, num_vertices: int) -> Engine:
    if isinstance(program, VectorProgram):
        return VectorEngine(part, program, num_vertices)
    if isinstance(program, VertexProgram):
        return VertexEngine(part, program, num_vertices)
    raise TypeError(f"a graph program is a VectorProgram or a VertexProgram, not {type(program).__name__}")
