"""Imitator's recovery of lost workers from replicas (papers/003 §5): Rebirth and Migration.

Pure functions of one worker's state (partition, table, changed flags) and the recovery's
facts (the lost workers, the vertices that move); the worker driver sends what they return and
installs what they assemble. Who recovers what needs no agreement (papers/003 §5.3.1): the master
of a vertex if it lives, else the surviving mirror with the lowest mirror id
(:func:`responsible_for`). Each live worker sends each other live worker exactly one
:class:`RecoveryBatch` per recovery (possibly empty), so a receiver knows when it has all.

- **Rebirth** (§5.1): a new worker takes a lost one's index. Survivors send it the masters it
  owned (full state, from mirrors), the replicas it held (from their masters, or the mirrors of
  lost masters), the mirrors it held (static state), and the routing table; it assembles the same
  partition (every vertex at its old position). Survivors change nothing.
- **Migration** (§5.2): no new worker. Each lost master moves to the worker of its responsible
  mirror (the JobMaster's coordinator says where, :class:`~epochal.graph.coordination.Recover`);
  mirrors are promoted, every master whose reader moved to a worker without a replica of it sends
  that worker a new replica, mirrors learn their masters' new replica locations, and every
  survivor assembles its new partition.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from epochal.graph.partition import Partition, take_rows
from epochal.graph.records import (
    VertexRecords,
    assemble,
    concat,
    master_records,
    replica_records,
)

_INT = np.int64
RECOVERY_MODES = ("rebirth", "migration")


@dataclass(frozen=True)
class ReplicationSettings:
    """``fault_tolerance="replication"``: ``k`` tolerated simultaneous failures, the recovery
    ``mode``, the selfish-vertex optimisation, and (only to prove them necessary) FT replicas."""

    k: int = 1
    mode: str = "rebirth"
    selfish: bool = True
    ft_replicas: bool = True


@dataclass
class RecoveryBatch:
    """What worker ``sender`` sends one peer in recovery ``epoch`` (papers/003 §5.1.1, §5.2.1)."""

    epoch: int
    sender: int
    masters: VertexRecords | None = None
    replicas: VertexRecords | None = None
    #: static full state of vertices the receiver mirrors
    mirrors: VertexRecords | None = None
    #: the routing table (every vertex id, its owner and, if the workers keep them, its mirror
    #: workers), from one survivor to a new worker
    routing: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None
    #: new replica locations of vertices the receiver mirrors: ids, CSR pointers, workers
    locations: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def responsible_for(owners: np.ndarray, mirrors: np.ndarray, lost: set[int]) -> np.ndarray:
    """For each vertex (its owner, its mirror workers by id): the worker that recovers it, the
    owner if alive, else the lost-free mirror with the lowest id (-1: none is left)."""
    out = owners.astype(_INT, copy=True)
    lost_array = np.array(sorted(lost), dtype=_INT)
    dead = np.isin(out, lost_array)
    if not dead.any():
        return out
    candidates = mirrors[dead]
    ok = (candidates >= 0) & ~np.isin(candidates, lost_array)
    first = np.where(ok.any(axis=1), candidates[np.arange(candidates.shape[0]), ok.argmax(axis=1)], -1)
    out[dead] = first
    return out


def _mirror_slots(part: Partition) -> np.ndarray:
    """Table slots of the replicas holding the mirrored vertices' values."""
    return part.num_masters + np.searchsorted(part.replica_ids, part.mirror.ids)


def _dynamic(records: VertexRecords, table: np.ndarray | None, changed: np.ndarray,
             slots: np.ndarray) -> VertexRecords:
    """``records`` with the values and changed flags of table ``slots`` (none before superstep 0
    committed: the job then starts over from the programs' initial values)."""
    return replace(records, values=None if table is None else table[slots].copy(), changed=changed[slots].copy())


def _replica_part(records: VertexRecords) -> VertexRecords:
    """Replica-only records of full-state ones (dynamic state, out-degree, adjacency)."""
    return VertexRecords(records.ids, records.values, records.changed, records.out_degree, records.adj_ptr,
                         records.adj_index)


def _recovered_mirrors(part: Partition, table: np.ndarray | None, changed: np.ndarray,
                       lost: set[int]) -> VertexRecords:
    """Full-state records of the lost masters this worker is responsible for (from its mirrors)."""
    mirror: VertexRecords | None = part.mirror
    if mirror is None or not len(mirror):
        return VertexRecords(np.zeros(0, dtype=_INT))
    assert mirror.mirrors is not None
    owners = part.owner_of(mirror.ids)
    rows = np.flatnonzero(np.isin(owners, list(lost)) & (responsible_for(owners, mirror.mirrors, lost) == part.worker))
    return _dynamic(mirror.take(rows), table, changed, _mirror_slots(part)[rows])


def _holding(records: VertexRecords, worker: int) -> np.ndarray:
    """Rows of ``records`` with a replica on ``worker``."""
    assert records.loc_ptr is not None and records.loc_workers is not None
    rows = np.repeat(np.arange(len(records), dtype=_INT), np.diff(records.loc_ptr))
    return np.unique(rows[records.loc_workers == worker])


def _mirrored_on(records: VertexRecords, worker: int) -> np.ndarray:
    assert records.mirrors is not None
    return np.flatnonzero((records.mirrors == worker).any(axis=1))


def _static(records: VertexRecords) -> VertexRecords:
    return replace(records, values=None, changed=None)


# ---------------------------------------------------------------------- Rebirth
def rebirth_batches(part: Partition, table: np.ndarray | None, changed: np.ndarray, lost: set[int], epoch: int,
                    routing_from: int) -> dict[int, RecoveryBatch]:
    """What this survivor sends each new worker replacing one of ``lost`` (papers/003 §5.1.1)."""
    recovered = _recovered_mirrors(part, table, changed, lost)
    out: dict[int, RecoveryBatch] = {}
    for dead in sorted(lost):
        masters = recovered.take(np.flatnonzero(part.owner_of(recovered.ids) == dead))
        # only what the lost worker held: its replicas of my masters (the sync plan says which)
        # and the static state of my masters it mirrored; never every master's full state
        holding = part.send_index.get(dead, np.zeros(0, dtype=_INT))
        mirrored = np.zeros(0, dtype=_INT) if part.master_mirrors is None else \
            np.flatnonzero((part.master_mirrors == dead).any(axis=1))
        replicas = concat([replica_records(part, table, changed, holding),
                           _replica_part(recovered.take(_holding(recovered, dead)))])
        mirrors = concat([_static(master_records(part, None, None, mirrored)),
                          _static(recovered.take(_mirrored_on(recovered, dead)))])
        routing = (part.all_ids, part.owner, part.all_mirrors) if part.worker == routing_from else None
        out[dead] = RecoveryBatch(epoch, part.worker, masters, replicas, mirrors, routing)
    return out


def rebirth_assemble(worker: int, shell: Partition, batches: list[RecoveryBatch]
                     ) -> tuple[Partition, np.ndarray | None, np.ndarray]:
    """The new worker's partition from every survivor's batch (papers/003 §5.1.2); ``shell`` gives
    the job's shape (workers, directions), the batches everything else."""
    routing = next(b.routing for b in batches if b.routing is not None)
    template = replace(shell, all_ids=routing[0], owner=routing[1], all_mirrors=routing[2])
    masters = concat([b.masters for b in batches if b.masters is not None])
    replicas = concat([b.replicas for b in batches if b.replicas is not None])
    mirror = concat([b.mirrors for b in batches if b.mirrors is not None])
    return assemble(worker, template, masters, replicas, mirror)


# ---------------------------------------------------------------------- Migration
@dataclass
class Migration:
    """A survivor's migration in progress: its new masters (with their final replica locations)
    and the batches it sends; :func:`migration_assemble` finishes it with the peers' batches."""

    masters: VertexRecords
    replicas: VertexRecords
    mirror: VertexRecords
    template: Partition
    batches: dict[int, RecoveryBatch]


def member(sorted_values: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Which of ``values`` occur in ``sorted_values`` (ascending): a binary search, no sort of both."""
    if not sorted_values.size:
        return np.zeros(values.size, dtype=bool)
    position = np.minimum(np.searchsorted(sorted_values, values), sorted_values.size - 1)
    return sorted_values[position] == values


def _moved_readers(records: VertexRecords, directions: str, is_moved: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(row, reader's vertex index)`` for every reader of a vertex of ``records`` that moved
    (its out-neighbours, or every neighbour when vertices read both ways): one pass over the
    lists, rows found only for the hits."""
    ptr, index = (records.out_ptr, records.out_index) if directions == "in" else (records.nbr_ptr, records.nbr_index)
    assert ptr is not None and index is not None
    hit = np.flatnonzero(is_moved[index])
    return np.searchsorted(ptr, hit, side="right") - 1, index[hit]


def _distinct(keys: np.ndarray, bound: int) -> np.ndarray:
    """``np.unique`` of non-negative ``keys`` below ``bound`` by a mask (no sort, no hash)."""
    seen = np.zeros(bound, dtype=bool)
    seen[keys] = True
    return np.flatnonzero(seen)


def moves_of(part: Partition, lost: set[int], gone: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``(moved_ids, moved_to)`` of a Migration, found by a worker from its routing table with the
    mirror workers of every vertex (``part.all_mirrors``): every vertex a lost worker owns goes to
    its responsible mirror, as the JobMaster's :class:`~epochal.graph.replica_recovery.ReplicaRecovery`
    decides (the same function of the same owners and mirrors)."""
    assert part.all_mirrors is not None, "the JobMaster names the moves of partitions without all_mirrors"
    dense = np.flatnonzero(np.isin(part.owner, list(lost)))
    return part.all_ids[dense], responsible_for(part.owner[dense], part.all_mirrors[dense], lost | set(gone))


def migration_start(part: Partition, table: np.ndarray | None, changed: np.ndarray, lost: set[int],
                    gone: tuple[int, ...],
                    moved_ids: np.ndarray, moved_to: np.ndarray, epoch: int) -> Migration:
    """Promote this worker's mirrors of moved masters, find the replicas its masters must create
    on other workers, and prepare one batch per live peer (papers/003 §5.2.1)."""
    worker = part.worker
    owner = part.owner.copy()
    moved_dense = np.searchsorted(part.all_ids, moved_ids)
    owner[moved_dense] = moved_to
    is_moved = np.zeros(part.all_ids.size, dtype=bool)
    is_moved[moved_dense] = True
    template = replace(part, owner=owner, gone=tuple(sorted(set(gone) | lost)))
    mirror: VertexRecords = part.mirror if part.mirror is not None else VertexRecords(np.zeros(0, dtype=_INT))
    mirror_slots = _mirror_slots(part) if len(mirror) else np.zeros(0, dtype=_INT)
    promote = member(np.sort(moved_ids[moved_to == worker]), mirror.ids)
    promoted = _dynamic(mirror.take(np.flatnonzero(promote)), table, changed, mirror_slots[promote])
    masters = concat([master_records(part, table, changed), promoted])
    # replicas this worker must create elsewhere: a reader moved to a worker without a copy
    rows, reader = _moved_readers(masters, part.directions, is_moved & (owner != worker))
    assert masters.loc_ptr is not None and masters.loc_workers is not None
    loc_rows = np.repeat(np.arange(len(masters), dtype=_INT), np.diff(masters.loc_ptr))
    num = part.num_workers
    bound = len(masters) * num
    have = loc_rows * num + masters.loc_workers
    want = _distinct(rows * num + owner[reader], bound)
    want = want[(want % num != worker) & ~member(have, want)]  # (have is sorted: rows, then workers)
    # final locations: old ones without lost workers and this one, plus the new ones
    keys = np.concatenate([have, want])
    keys = _distinct(keys[~np.isin(keys % num, [*template.gone, worker])], bound)
    loc_ptr = np.zeros(len(masters) + 1, dtype=_INT)
    np.cumsum(np.bincount(keys // num, minlength=len(masters)), out=loc_ptr[1:])
    changed_loc = _distinct(np.concatenate([want // num, np.flatnonzero(member(promoted.ids, masters.ids))]),
                            len(masters))
    loc_workers = keys % num
    masters = replace(masters, loc_ptr=loc_ptr, loc_workers=loc_workers)
    batches: dict[int, RecoveryBatch] = {}
    for peer in template.peers:
        new = np.unique(want[want % num == peer] // num)
        assert masters.mirrors is not None
        mirrored = changed_loc[(masters.mirrors[changed_loc] == peer).any(axis=1)]
        ptr, entries = take_rows(loc_ptr, mirrored)
        batches[peer] = RecoveryBatch(epoch, worker, replicas=_replica_part(masters.take(new)),
                                      locations=(masters.ids[mirrored], ptr, loc_workers[entries]))
    keep = ~member(promoted.ids, part.replica_ids)
    replicas = replica_records(part, table, changed, part.num_masters + np.flatnonzero(keep))
    return Migration(masters, replicas, mirror.take(np.flatnonzero(~promote)), template, batches)


def migration_assemble(migration: Migration, batches: list[RecoveryBatch]
                       ) -> tuple[Partition, np.ndarray | None, np.ndarray]:
    """This survivor's new partition: its masters, old and new replicas, and its mirrors with the
    locations their masters sent (papers/003 §5.2.2)."""
    worker = migration.template.worker
    replicas = concat([migration.replicas, *[b.replicas for b in batches if b.replicas is not None]])
    mirror = migration.mirror
    for batch in batches:
        if batch.locations is None or not batch.locations[0].size or not len(mirror):
            continue
        ids, ptr, workers = batch.locations
        rows = np.searchsorted(mirror.ids, ids)
        known = (rows < len(mirror)) & (mirror.ids[np.minimum(rows, len(mirror) - 1)] == ids)
        if not known.all():
            picked = np.flatnonzero(known)
            ptr, entries = take_rows(ptr, picked)
            rows, workers = rows[picked], workers[entries]
        mirror = mirror.with_locations(rows, ptr, workers)
    return assemble(worker, migration.template, migration.masters, replicas, mirror)
