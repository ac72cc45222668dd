"""The commit protocol of the PostgreSQL keyed-state backend, as a pure state machine.

papers/001 §4.1 (1): "each snapshot is one distributed bulk 2-phase commit transaction: during a
checkpoint, changes are put into the transaction log (WAL) and pre-committed when
triggerSnapshot() is invoked. Once the global snapshot is complete, then pre-committed states are
fully-committed". For one keyed operator subtask that is:

- **Epochs.** Between two barriers the subtask's changes collect in its write-ahead log (in
  memory, past a budget spilled to local disk: :mod:`epochal.state.postgres.spill`; an epoch
  carries its spilled part, opaque here). At the barrier of checkpoint *n* the log is frozen as
  epoch *n* (:meth:`EpochLog.begin`) and a new one starts. An epoch stays readable (the
  subtask reads its own uncommitted changes first) until a completed checkpoint has committed it.
- **Upload.** The uploader thread writes every epoch not yet held by a prepared transaction, oldest
  first, and prepares them as one transaction ``PREPARE TRANSACTION '<gid of n>'``
  (:meth:`EpochLog.plan`, :meth:`EpochLog.prepared`). A prepared transaction keeps its row locks,
  so the next epoch's writes wait for it: an upload waits (:data:`WAIT`) until every earlier
  prepared transaction of the subtask was committed or rolled back, and a subtask never holds
  more than one. An upload that fails leaves its epochs unheld: the next upload writes them.
- **Completion** of checkpoint *n* (:meth:`EpochLog.completed`): every prepared transaction of a
  checkpoint up to *n* is committed (``COMMIT PREPARED``), oldest first, and the epochs they held
  leave the log (their values are now the database's: the read cache takes them).
- **Abort** of checkpoint *n* (:meth:`EpochLog.aborted`): the checkpoint will never complete, so
  its prepared transaction (if any) is rolled back and its epochs become unheld again: their
  changes are part of the next checkpoint's state, which writes them. An upload of an aborted
  checkpoint that has not run yet writes nothing (:data:`SKIP`); one that prepared while the abort
  arrived rolls its transaction back itself (:meth:`EpochLog.prepared` returns False).
- **Restore** from checkpoint *n* (:func:`resolve`): of the prepared transactions left in the
  database by earlier attempts, those of checkpoints up to *n* are committed (a completed
  checkpoint whose commit the failure interrupted) and the later ones rolled back (epochs that
  never completed). Nothing is loaded: the database holds checkpoint *n*'s state.

The MVCC variant (``sequential=False``) writes each epoch as rows versioned by the epoch and
commits them at once (no transaction stays open, so no upload waits); an abort rolls nothing
back: an aborted checkpoint's versions belong to the state of the next completed one.

No I/O, clock or threads here: :mod:`epochal.state.postgres.backend` runs the statements and holds the lock.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

#: (state id, key group) -> stored key -> stored value, or None for a removed key
Changes = dict[tuple[int, int], dict[bytes, Any]]
#: one change as an upload writes it: (key group, stored key, state id, stored value or None: removed)
Entry = tuple[int, bytes, int, "bytes | None"]


class _Signal:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: :meth:`EpochLog.plan`: an earlier checkpoint's transaction is still prepared; ask again when it resolves
WAIT: Any = _Signal("WAIT")
#: :meth:`EpochLog.plan`: the checkpoint was aborted before its upload ran; write nothing
SKIP: Any = _Signal("SKIP")


@dataclass(eq=False)
class Epoch:
    """The changes between two barriers, frozen at checkpoint ``checkpoint_id``'s barrier.

    ``holder``: the checkpoint whose transaction holds them (prepared, or in the MVCC variant
    written); None while no upload has written them. ``spill``: those of the changes that left
    memory (a :class:`~epochal.state.postgres.spill.SpilledChanges`, older than ``changes``; None
    if none did), and ``size`` the driver's estimate of the bytes ``changes`` holds in memory:
    both the driver's, never read here."""

    checkpoint_id: int
    changes: Changes
    holder: int | None = None
    spill: Any = None
    size: int = 0


@dataclass(frozen=True)
class UploadPlan:
    """What the upload of checkpoint ``checkpoint_id`` writes: ``epochs``' changes, oldest first."""

    checkpoint_id: int
    epochs: tuple[Epoch, ...]

    def layers(self) -> list[tuple[Changes, Any]]:
        """(changes in memory, spilled changes or None) of every epoch, newest first: what
        :func:`epochal.state.postgres.spill.merge` streams (taken under the backend's lock: a
        spill moves an epoch's changes from the first to the second)."""
        return [(epoch.changes, epoch.spill) for epoch in reversed(self.epochs)]


@dataclass
class EpochLog:
    """The epochs of one subtask and the transactions that hold them (see the module docstring).

    ``sequential``: the non-MVCC variant (prepared transactions hold row locks: one at a time)."""

    sequential: bool = True
    #: epochs no completed checkpoint has committed yet, oldest first
    epochs: list[Epoch] = field(default_factory=list)
    #: checkpoint -> global transaction id, of the transactions prepared and not yet resolved
    open_gids: dict[int, str] = field(default_factory=dict)
    #: checkpoints aborted whose upload may still come (it then writes nothing)
    aborted_ids: set[int] = field(default_factory=set)
    #: the newest checkpoint completed (0: none)
    committed: int = 0

    def begin(self, checkpoint_id: int, changes: Changes, spill: Any = None, size: int = 0) -> Epoch:
        """Checkpoint ``checkpoint_id``'s barrier: the write-ahead log so far (``changes`` in
        memory, ``spill`` on disk) becomes its epoch."""
        epoch = Epoch(checkpoint_id, changes, spill=spill, size=size)
        self.epochs.append(epoch)
        return epoch

    def plan(self, checkpoint_id: int) -> UploadPlan | Any:
        """What the upload of ``checkpoint_id`` writes: every unheld epoch up to it; or
        :data:`SKIP` (aborted, or already committed), or :data:`WAIT` (sequential only: an
        earlier transaction is still prepared)."""
        if checkpoint_id in self.aborted_ids or checkpoint_id <= self.committed:
            return SKIP
        if self.sequential and any(c < checkpoint_id for c in self.open_gids):
            return WAIT
        return UploadPlan(checkpoint_id, tuple(e for e in self.epochs
                                               if e.holder is None and e.checkpoint_id <= checkpoint_id))

    def prepared(self, plan: UploadPlan, gid: str) -> bool:
        """The upload of ``plan`` prepared transaction ``gid`` (MVCC: committed its versions).
        False when the checkpoint was aborted meanwhile: the caller rolls ``gid`` back and its
        epochs stay unheld (MVCC: the versions stay, held by the aborted checkpoint)."""
        checkpoint_id = plan.checkpoint_id
        if checkpoint_id in self.aborted_ids and self.sequential:
            return False
        for epoch in plan.epochs:
            epoch.holder = checkpoint_id
        if self.sequential:
            self.open_gids[checkpoint_id] = gid
        return True

    def completed(self, checkpoint_id: int) -> tuple[list[str], list[Epoch]]:
        """Checkpoint ``checkpoint_id`` completed: the transactions to commit (oldest first) and
        the epochs they commit (oldest first), which leave the log. A checkpoint not newer than
        the last completed one changes nothing."""
        if checkpoint_id <= self.committed:
            return [], []
        self.committed = checkpoint_id
        commit = [self.open_gids.pop(c) for c in sorted(c for c in self.open_gids if c <= checkpoint_id)]
        done = [e for e in self.epochs if e.holder is not None and e.holder <= checkpoint_id]
        if done:
            self.epochs = [e for e in self.epochs if e.holder is None or e.holder > checkpoint_id]
        self.aborted_ids = {c for c in self.aborted_ids if c > checkpoint_id}
        return commit, done

    def aborted(self, checkpoint_id: int) -> str | None:
        """Checkpoint ``checkpoint_id`` was aborted: the transaction to roll back, if one was
        prepared for it (its epochs are unheld again: the next upload writes them)."""
        if checkpoint_id <= self.committed:
            return None
        self.aborted_ids.add(checkpoint_id)
        if not self.sequential:
            return None
        gid = self.open_gids.pop(checkpoint_id, None)
        if gid is not None:
            for epoch in self.epochs:
                if epoch.holder == checkpoint_id:
                    epoch.holder = None
        return gid

    def rolled_back(self, plan: UploadPlan) -> None:
        """The upload of ``plan`` rolled its own transaction back (:meth:`prepared` said False)."""
        for epoch in plan.epochs:
            if epoch.holder == plan.checkpoint_id:
                epoch.holder = None

    def waiting_on(self, checkpoint_id: int) -> list[int]:
        """The earlier checkpoints whose prepared transactions an upload of ``checkpoint_id`` waits for."""
        return sorted(c for c in self.open_gids if c < checkpoint_id)


# ------------------------------------------------------------------------------ transaction ids


class EpochTransactionId(NamedTuple):
    """The global transaction id (PostgreSQL's ``gid`` of ``PREPARE TRANSACTION``) of one
    subtask's state epoch (a sink's is another: :class:`epochal.connectors.postgres.sql.SinkTransactionId`):
    ``<prefix>:<first key group>-<end key group>:c<checkpoint>:a<attempt>``; the prefix names the
    table, the namespace and the operator (:func:`gid_prefix`)."""

    prefix: str
    first: int
    end: int
    checkpoint: int
    attempt: int

    def __str__(self) -> str:
        return f"{self.prefix}:{self.first}-{self.end}:c{self.checkpoint}:a{self.attempt}"

    @property
    def key_groups(self) -> range:
        return range(self.first, self.end)


def gid_prefix(table: str, namespace: str, uid: str) -> str:
    """The prefix of every transaction id of operator ``uid`` in ``namespace`` of ``table``: a
    digest, so that any names fit PostgreSQL's 200 bytes and no quoting is needed."""
    digest = hashlib.sha1("\0".join((table, namespace, uid)).encode()).hexdigest()[:16]
    return f"epochal-state-{digest}"


_GID = re.compile(r"(\d+)-(\d+):c(\d+):a(\d+)")


def _after_prefix(name: str, prefix: str, pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """The groups of ``pattern`` matching what follows ``<prefix>:`` in ``name``, or None."""
    if not name.startswith(prefix + ":"):
        return None
    match = pattern.fullmatch(name[len(prefix) + 1:])
    return None if match is None else match.groups()


def parse_epoch_transaction_id(gid: str, prefix: str) -> EpochTransactionId | None:
    """``gid`` if it is one of ``prefix``'s, else None."""
    groups = _after_prefix(gid, prefix, _GID)
    if groups is None:
        return None
    first, end, checkpoint, attempt = map(int, groups)
    return EpochTransactionId(prefix, first, end, checkpoint, attempt)


class Session(NamedTuple):
    """The ``application_name`` of one subtask start's connections:
    ``<prefix>:<first key group>-<end key group>:f<fencing token, hex>``, so that a later start
    of the key groups can find the connections of an earlier one (a zombie's upload that holds
    their markers) in ``pg_stat_activity`` and end them. At most 63 bytes (PostgreSQL's limit)."""

    prefix: str
    first: int
    end: int
    fence: int

    def __str__(self) -> str:
        return f"{self.prefix}:{self.first}-{self.end}:f{self.fence:x}"

    def earlier_than(self, other: Session) -> bool:
        """Whether this is another start's session (another fence) of key groups ``other`` takes."""
        return (self.prefix == other.prefix and self.fence != other.fence
                and self.first < other.end and other.first < self.end)


_SESSION = re.compile(r"(\d+)-(\d+):f([0-9a-f]+)")


def parse_session(name: str, prefix: str) -> Session | None:
    """``name`` (an ``application_name``) if it is a session of ``prefix``'s, else None."""
    groups = _after_prefix(name, prefix, _SESSION)
    if groups is None:
        return None
    return Session(prefix, int(groups[0]), int(groups[1]), int(groups[2], 16))


def resolve(prepared: list[EpochTransactionId], restored: int | None,
            key_groups: range) -> tuple[list[EpochTransactionId], list[EpochTransactionId]]:
    """At a subtask's start, of the transactions earlier attempts left prepared: those whose key
    groups overlap ``key_groups`` to commit (checkpoints up to ``restored``, oldest first) and to
    roll back (later ones; all of them when the subtask starts without a checkpoint of this
    backend, ``restored`` None). A transaction that overlaps several new subtasks is resolved by
    whichever comes first; they all decide alike."""
    mine = [g for g in prepared if g.first < key_groups.stop and key_groups.start < g.end]
    if restored is None:
        return [], mine
    commit = sorted((g for g in mine if g.checkpoint <= restored), key=lambda g: (g.checkpoint, g.first))
    return commit, [g for g in mine if g.checkpoint > restored]
