"""Vertices' full state as columns, and a partition assembled from it (papers/003 §4.2, §5).

A :class:`VertexRecords` is a batch of vertices, sorted by id, with everything needed to make
them masters or replicas anywhere: the *dynamic* state (value, changed/active flag) and, for a
full-state record, the *static* state a mirror keeps (papers/003 §4.2): what the vertex reads
(with weights), its out-edges, degrees and properties, the workers holding its replicas
(``loc``), the workers of its mirrors by mirror id, whether it is selfish, and its adjacency
(for programs that read it). Replica-only records carry the dynamic state, the out-degree and
the adjacency. Lists are CSR (``*_ptr`` offsets, one row per vertex); the vertices in them are
*vertex indices* (positions in the routing table ``Partition.all_ids``, int32 while they fit),
half the bytes of ids and found without a hash lookup.

:func:`master_records` and :func:`replica_records` cut records out of a running partition;
:func:`assemble` turns masters' and replicas' records back into a
:class:`~epochal.graph.partition.Partition` with its table. Slots are canonical (masters in id
order, then replicas in id order), so a partition assembled from the records of the same
vertices is the one that was lost, every vertex at its old array position (papers/003 §5.1.2),
and the sync plan follows from ``loc`` (sender side) and the owner table (receiver side).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from epochal.graph.partition import Partition, csr_ptr, take_rows

_INT = np.int64


#: CSR groups of a record batch: pointer field -> its entry fields.
_CSR = {"nbr_ptr": ("nbr_index", "nbr_weight"), "out_ptr": ("out_index", "out_weight"),
        "loc_ptr": ("loc_workers",), "adj_ptr": ("adj_index",)}


@dataclass
class VertexRecords:
    """A batch of vertices' state (see the module docstring); every array has one row per vertex
    or, for CSR entry arrays, one entry per list element."""

    ids: np.ndarray
    values: np.ndarray | None = None
    changed: np.ndarray | None = None
    out_degree: np.ndarray | None = None
    adj_ptr: np.ndarray | None = None
    adj_index: np.ndarray | None = None
    # -- the static full state (None in replica-only records)
    nbr_ptr: np.ndarray | None = None
    nbr_index: np.ndarray | None = None
    nbr_weight: np.ndarray | None = None
    out_ptr: np.ndarray | None = None
    out_index: np.ndarray | None = None
    out_weight: np.ndarray | None = None
    in_degree: np.ndarray | None = None
    loc_ptr: np.ndarray | None = None
    loc_workers: np.ndarray | None = None
    #: ``mirrors[i, j]``: the worker of vertex i's mirror with id j (-1: none)
    mirrors: np.ndarray | None = None
    selfish: np.ndarray | None = None
    properties: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.ids.size)

    def take(self, rows: np.ndarray) -> VertexRecords:
        """The records of ``rows`` (positions, in the order given)."""
        rows = np.asarray(rows, dtype=_INT)
        out: dict[str, object] = {}
        entry_fields = {e for entries in _CSR.values() for e in entries}
        for f in fields(self):
            name, value = f.name, getattr(self, f.name)
            if name in entry_fields or value is None:
                continue
            if name in _CSR:
                ptr, entries = take_rows(value, rows)
                out[name] = ptr
                for e in _CSR[name]:
                    column = getattr(self, e)
                    out[e] = None if column is None else column[entries]
            elif name == "properties":
                out[name] = {k: v[rows] for k, v in value.items()}
            else:
                out[name] = value[rows]
        return VertexRecords(**out)  # type: ignore[arg-type]

    def with_locations(self, rows: np.ndarray, ptr: np.ndarray, workers: np.ndarray) -> VertexRecords:
        """These records with the replica locations of ``rows`` (distinct) replaced
        (``ptr``/``workers``: CSR over ``rows``, in their order); array work, no per-row loop."""
        assert self.loc_ptr is not None and self.loc_workers is not None
        rows = np.asarray(rows, dtype=_INT)
        counts = np.diff(self.loc_ptr)
        counts[rows] = np.diff(ptr)
        new_ptr = csr_ptr(counts)
        flat = np.empty(int(new_ptr[-1]), dtype=_INT)
        kept = np.ones(len(self), dtype=bool)
        kept[rows] = False
        kept_rows = np.flatnonzero(kept)
        flat[take_rows(new_ptr, kept_rows)[1]] = self.loc_workers[take_rows(self.loc_ptr, kept_rows)[1]]
        flat[take_rows(new_ptr, rows)[1]] = workers
        return replace(self, loc_ptr=new_ptr, loc_workers=flat)


def concat(batches: list[VertexRecords]) -> VertexRecords:
    """One batch of all of ``batches``' vertices, sorted by id (ids must be distinct). Batches
    must carry the same columns (empty batches are dropped)."""
    batches = [b for b in batches if len(b)]
    if not batches:
        return VertexRecords(np.zeros(0, dtype=_INT))
    if len(batches) == 1:
        merged = batches[0]
    else:
        out: dict[str, object] = {}
        entry_fields = {e for entries in _CSR.values() for e in entries}
        first = batches[0]
        for f in fields(first):
            name = f.name
            if name in entry_fields or getattr(first, name) is None:
                continue
            if name in _CSR:
                out[name] = csr_ptr(np.concatenate([np.diff(getattr(b, name)) for b in batches]))
                for e in _CSR[name]:
                    columns = [getattr(b, e) for b in batches]
                    out[e] = None if columns[0] is None else np.concatenate(columns)
            elif name == "properties":
                out[name] = {k: np.concatenate([b.properties[k] for b in batches]) for k in first.properties}
            else:
                out[name] = np.concatenate([getattr(b, name) for b in batches])
        merged = VertexRecords(**out)  # type: ignore[arg-type]
    order = np.argsort(merged.ids, kind="stable")
    return merged if np.all(order == np.arange(order.size)) else merged.take(order)


def locations(part: Partition) -> tuple[np.ndarray, np.ndarray]:
    """CSR over the masters: the workers holding a replica of each (from the sync plan)."""
    if not part.send_index:
        return np.zeros(part.num_masters + 1, dtype=_INT), np.zeros(0, dtype=_INT)
    slots = np.concatenate(list(part.send_index.values()))
    workers = np.concatenate([np.full(i.size, p, dtype=_INT) for p, i in part.send_index.items()])
    order = np.lexsort((workers, slots))
    return csr_ptr(np.bincount(slots, minlength=part.num_masters)), workers[order]


def vertex_index(part: Partition, ids: np.ndarray) -> np.ndarray:
    """The vertex index (position in ``part.all_ids``) of each of ``ids``, all vertices of the graph."""
    dtype = np.int32 if part.all_ids.size < 2**31 else _INT
    return slots_of(part.all_ids, ids).astype(dtype, copy=False)


def _adjacency(part: Partition, slots: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    if part.table_out_ptr is None or part.table_out_ids is None:
        return None, None
    ptr, entries = take_rows(part.table_out_ptr, slots)
    return ptr, vertex_index(part, part.table_out_ids[entries])


def replica_records(part: Partition, table: np.ndarray | None, changed: np.ndarray,
                    slots: np.ndarray) -> VertexRecords:
    """Replica-only records of table ``slots`` (masters or replicas) of ``part`` (no values
    before the first superstep committed)."""
    adj_ptr, adj_index = _adjacency(part, slots)
    return VertexRecords(part.table_ids[slots], None if table is None else table[slots].copy(), changed[slots].copy(),
                         part.table_out_degree[slots].copy(), adj_ptr, adj_index)


def master_records(part: Partition, table: np.ndarray | None, changed: np.ndarray | None,
                   slots: np.ndarray | None = None) -> VertexRecords:
    """Full-state records of master ``slots`` (all masters if None: the partition's own arrays,
    shared, not gathered) of ``part``; with ``table`` None, the static state only (what a mirror
    keeps)."""
    k = 0 if part.master_mirrors is None else part.master_mirrors.shape[1]
    loc_ptr_all, loc_all = locations(part)
    rows: np.ndarray | slice
    nbr: np.ndarray | slice
    out: np.ndarray | slice
    loc: np.ndarray | slice
    if slots is None:
        rows = nbr = out = loc = slice(None)
        count = part.num_masters
        nbr_ptr, out_ptr, loc_ptr = part.nbr_ptr, part.out_ptr, loc_ptr_all
        adj_ptr, adj_index = _adjacency(part, np.arange(count, dtype=_INT))
    else:
        rows = np.asarray(slots, dtype=_INT)
        count = rows.size
        nbr_ptr, nbr = take_rows(part.nbr_ptr, rows)
        out_ptr, out = take_rows(part.out_ptr, rows)
        loc_ptr, loc = take_rows(loc_ptr_all, rows)
        adj_ptr, adj_index = _adjacency(part, rows)
    return VertexRecords(
        part.ids[rows], None if table is None else table[:part.num_masters][rows].copy(),
        None if changed is None else changed[:part.num_masters][rows].copy(),
        part.table_out_degree[:part.num_masters][rows].copy(), adj_ptr, adj_index,
        nbr_ptr, part.table_index()[part.nbr_slot[nbr]], None if part.nbr_weight is None else part.nbr_weight[nbr],
        out_ptr, vertex_index(part, part.out_ids[out]) if part.out_index is None else part.out_index[out],
        None if part.out_weight is None else part.out_weight[out],
        part.in_degree[rows].copy(), loc_ptr, loc_all[loc],
        np.full((count, k), -1, dtype=_INT) if part.master_mirrors is None else part.master_mirrors[rows],
        np.zeros(count, dtype=bool) if part.selfish is None else part.selfish[rows],
        {name: column[rows] for name, column in part.properties.items()})


def assemble(worker: int, template: Partition, masters: VertexRecords, replicas: VertexRecords,
             mirror: VertexRecords | None) -> tuple[Partition, np.ndarray | None, np.ndarray]:
    """Worker ``worker``'s partition of ``masters`` (full-state records) and ``replicas``
    (replica-only records), with the routing table, directions and live workers of ``template``;
    returns it with its table and changed flags. Raises ValueError when a master reads a vertex
    that is neither a master nor a replica here (the records are inconsistent)."""
    ids, replica_ids = masters.ids, replicas.ids
    n = ids.size
    table_ids = np.concatenate([ids, replica_ids])
    all_ids = template.all_ids
    slot_of_vertex = np.full(all_ids.size, -1, dtype=_INT)  # vertex index -> table slot here
    slot_of_vertex[np.searchsorted(all_ids, table_ids)] = np.arange(table_ids.size, dtype=_INT)
    nbr_index = masters.nbr_index if masters.nbr_index is not None else np.zeros(0, dtype=_INT)
    nbr_slot = slot_of_vertex[nbr_index]
    if (nbr_slot < 0).any():
        missing = all_ids[nbr_index[nbr_slot < 0][:5]].tolist()
        raise ValueError(f"worker {worker}: masters read vertices that are neither masters nor replicas here: "
                         f"{missing}")
    part = Partition(worker, template.num_workers, ids, replica_ids,
                     masters.nbr_ptr if masters.nbr_ptr is not None else np.zeros(1, dtype=_INT), nbr_slot,
                     masters.nbr_weight,
                     masters.out_ptr if masters.out_ptr is not None else np.zeros(1, dtype=_INT),
                     all_ids[masters.out_index] if masters.out_index is not None else np.zeros(0, dtype=_INT),
                     masters.out_weight,
                     _column(masters.out_degree, n), _column(masters.in_degree, n),
                     table_out_degree=np.concatenate([_column(masters.out_degree, n),
                                                      _column(replicas.out_degree, replica_ids.size)]),
                     all_ids=template.all_ids, owner=template.owner, all_mirrors=template.all_mirrors,
                     directed=template.directed,
                     directions=template.directions, properties=dict(masters.properties),
                     master_mirrors=masters.mirrors, selfish=masters.selfish, mirror=mirror, gone=template.gone,
                     out_index=masters.out_index)
    if masters.adj_ptr is not None or replicas.adj_ptr is not None:
        adj_ptr, adj_index = concat_adjacency(masters, replicas)
        part.table_out_ptr, part.table_out_ids = adj_ptr, all_ids[adj_index]
    # the sync plan: my masters with a replica on p, in id order; my replicas owned by s, in id order
    if masters.loc_ptr is not None and masters.loc_workers is not None:
        rows = np.repeat(np.arange(n, dtype=_INT), np.diff(masters.loc_ptr))
        for p in np.unique(masters.loc_workers).tolist():
            if p != worker and p not in template.gone:
                part.send_index[int(p)] = rows[masters.loc_workers == p]
    if replica_ids.size:
        owners = part.owner_of(replica_ids)
        for s in np.unique(owners).tolist():
            part.receive_slots[int(s)] = n + np.flatnonzero(owners == s)
    columns = [c for c in (masters.values, replicas.values) if c is not None and c.shape[0]]
    values = None if not columns else columns[0] if len(columns) == 1 else \
        np.concatenate([columns[0], columns[1].astype(columns[0].dtype, copy=False)])
    changed = np.concatenate([_flags(masters.changed, n), _flags(replicas.changed, replica_ids.size)])
    return part, values, changed


def slots_of(table_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The position of each of ``ids`` in ``table_ids`` (distinct ids), -1 where absent; a hash
    lookup (pyarrow) for large inputs, a binary search for small ones."""
    if not ids.size or not table_ids.size:
        return np.full(ids.size, -1, dtype=_INT)
    if ids.size < 4096:
        order = np.argsort(table_ids, kind="stable")
        found = np.minimum(np.searchsorted(table_ids[order], ids), table_ids.size - 1)
        return np.where(table_ids[order][found] == ids, order[found], -1)
    found = pc.index_in(pa.array(ids, type=pa.int64()), value_set=pa.array(table_ids, type=pa.int64()))
    return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(_INT, copy=False)


def concat_adjacency(masters: VertexRecords, replicas: VertexRecords) -> tuple[np.ndarray, np.ndarray]:
    """The table's adjacency CSR: masters' rows, then replicas'."""
    parts = [(b.adj_ptr, b.adj_index) for b in (masters, replicas) if len(b)]
    counts, ids = [], []
    for ptr, entries in parts:
        if ptr is None or entries is None:
            return np.zeros(len(masters) + len(replicas) + 1, dtype=_INT), np.zeros(0, dtype=_INT)
        counts.append(np.diff(ptr))
        ids.append(entries)
    if not parts:
        return np.zeros(1, dtype=_INT), np.zeros(0, dtype=_INT)
    return csr_ptr(np.concatenate(counts)), np.concatenate(ids)


def _column(column: np.ndarray | None, n: int) -> np.ndarray:
    return np.zeros(n, dtype=_INT) if column is None else column


def _flags(column: np.ndarray | None, n: int) -> np.ndarray:
    return np.zeros(n, dtype=bool) if column is None else column.astype(bool, copy=False)
