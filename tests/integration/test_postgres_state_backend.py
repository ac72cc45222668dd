"""The PostgreSQL keyed-state backend (epochal.state.postgres.backend) against a real PostgreSQL server,
without Spark: every state type, the two-phase commit of checkpoint epochs (prepared at the
barrier, committed by the completion, resolved by a restore: shown necessary), restores at other
parallelisms without loading, canonical savepoints to and from the heap backend, and the MVCC
variant (older checkpoints restorable, failed attempts' versions dropped, garbage collection)."""

from __future__ import annotations

import itertools
import os
import time

import pytest

from epochal.config import StateBackendConfig
from epochal.errors import StateBackendError
from epochal.plan.keygroups import key_group_of
from epochal.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.postgres.backend import PostgresKeyedStateBackend
from epochal.state.postgres.release import pending_entries
from epochal.state.postgres.schema import ensure_schema
from epochal.state.postgres.spill import DiskSpill, SpillDirectory, sorted_changes
from epochal.state.postgres.store import FencedUploadError
from epochal.state.snapshot import RestoreSource, materialize
from epochal.state.storage import CheckpointError, CheckpointStorage

pytestmark = pytest.mark.integration

_NAMESPACES = itertools.count()
MAXP = 128


class Sum:
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + value

    def get_result(self, accumulator):
        return accumulator

    def merge(self, a, b):
        return a + b


@pytest.fixture
def make_backend(postgres):
    """Makes opened backends of one namespace of the ``epochal_state`` tables; disposes of them
    at the end. Before and after, the prepared transactions a failed test left on those tables
    are rolled back: they would make the next ``ensure_schema`` wait for their locks."""
    postgres.roll_back_prepared("epochal_state")
    ensure_schema(postgres.dsn, "epochal_state", False)
    namespace = f"ns{next(_NAMESPACES)}"
    made = []

    def make(key_groups=range(MAXP), restore=None, *, mvcc=False, uid="op", retained=1, cache_entries=2_000_000,
             attempt=0, wal_memory_bytes=256 << 20, local_dir=None):
        config = StateBackendConfig(kind="postgres", dsn=postgres.dsn, namespace=namespace, mvcc=mvcc,
                                    retained=retained, cache_entries=cache_entries,
                                    wal_memory_bytes=wal_memory_bytes, local_dir=local_dir)
        backend = PostgresKeyedStateBackend(MAXP, key_groups, config, uid, namespace, attempt)
        backend.open_state(restore)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.dispose()
    postgres.roll_back_prepared("epochal_state")


def prepared(postgres, backend) -> list[str]:
    """The prepared transactions of ``backend``'s operator and namespace."""
    with postgres.connect() as conn:
        return [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, %s)",
                                           (backend.prefix + ":",))]


def checkpoint(backends, checkpoint_id):
    """The barrier and upload of ``checkpoint_id`` on every backend: the restore source a job
    would get from the checkpoint's metadata."""
    subtasks = {}
    for index, backend in enumerate(backends):
        subtasks[str(index)] = {"keyed": backend.begin_snapshot(checkpoint_id).upload(None, checkpoint_id, "x")}
    return RestoreSource(None, checkpoint_id, {"operators": {"op": {"subtasks": subtasks}}})


def counts(backend, keys):
    table = backend.owned_table("count")
    return {k: table[key_group_of(k, MAXP)].get(k) for k in keys}


def add(backend, keys, n=1):
    table = backend.owned_table("count")
    groups = [key_group_of(k, MAXP) for k in keys]
    backend.prefetch(keys, groups)
    for key, group in zip(keys, groups, strict=True):
        table[group][key] = table[group].get(key, 0) + n


KEYS = [f"k{i}" for i in range(200)]


def test_every_state_type_reads_its_own_changes_and_survives_checkpoint_and_restore(make_backend):
    backend = make_backend()
    value = backend.get_state(ValueStateDescriptor("v", default=-1))
    items = backend.get_state(ListStateDescriptor("l"))
    reducing = backend.get_state(ReducingStateDescriptor("r", reduce_fn=max))
    aggregating = backend.get_state(AggregatingStateDescriptor("a", aggregate_function=Sum()))
    mapping = backend.get_state(MapStateDescriptor("m"))

    def write(key, n):
        backend.set_current_key(key)
        value.update(n)
        items.add(n)
        reducing.add(n)
        aggregating.add(n)
        mapping.put(n, str(n))

    def read(key):
        backend.set_current_key(key)
        return value.value(), items.get(), reducing.get(), aggregating.get(), dict(mapping.items())

    for n in range(3):
        for key in ("a", ("t", 1), 7):
            write(key, n)
    source = checkpoint([backend], 1)
    write("a", 9)  # epoch 2: pending while checkpoint 1's transaction is prepared
    assert read("a") == (9, [0, 1, 2, 9], 9, 12, {0: "0", 1: "1", 2: "2", 9: "9"})
    backend.checkpoint_completed(1)
    assert read(("t", 1)) == (2, [0, 1, 2], 2, 3, {0: "0", 1: "1", 2: "2"})
    backend.set_current_key(7)
    mapping.remove(1)
    value.clear()
    backend.dispose()
    backend = make_backend(restore=source)  # a restore of checkpoint 1: nothing loaded
    assert backend.started["mode"] == "restored" and backend._cached == 0
    value = backend.get_state(ValueStateDescriptor("v", default=-1))
    items = backend.get_state(ListStateDescriptor("l"))
    reducing = backend.get_state(ReducingStateDescriptor("r", reduce_fn=max))
    aggregating = backend.get_state(AggregatingStateDescriptor("a", aggregate_function=Sum()))
    mapping = backend.get_state(MapStateDescriptor("m"))
    assert read("a") == (2, [0, 1, 2], 2, 3, {0: "0", 1: "1", 2: "2"})  # epoch 2 never completed
    assert read(7) == (2, [0, 1, 2], 2, 3, {0: "0", 1: "1", 2: "2"})
    assert read("missing") == (-1, [], None, None, {})


def test_an_epoch_is_invisible_until_its_checkpoint_completes_and_nothing_stays_prepared(make_backend, postgres):
    backend = make_backend()
    add(backend, KEYS)
    checkpoint([backend], 1)
    assert len(prepared(postgres, backend)) == 1  # pre-committed: durable, not visible
    with postgres.connect() as conn:
        assert conn.execute("SELECT count(*) FROM epochal_state WHERE op = %s", (backend.store.op,)).fetchone()[0] == 0
    backend.checkpoint_completed(1)
    assert prepared(postgres, backend) == []
    with postgres.connect() as conn:
        assert conn.execute("SELECT count(*) FROM epochal_state WHERE op = %s",
                            (backend.store.op,)).fetchone()[0] == len(KEYS)


def test_a_restore_commits_a_completed_checkpoint_whose_commit_was_lost_and_rolls_back_later_epochs(
        make_backend, postgres):
    backend = make_backend()
    add(backend, KEYS)
    checkpoint([backend], 1)
    backend.checkpoint_completed(1)
    add(backend, KEYS)
    source2 = checkpoint([backend], 2)  # completes at the JobMaster; the worker dies before the commit
    backend.dispose()
    restored = make_backend(restore=source2)
    assert len(restored.started["committed"]) == 1 and prepared(postgres, restored) == []
    assert set(counts(restored, KEYS).values()) == {2}
    add(restored, KEYS)
    checkpoint([restored], 3)  # never completes
    restored.dispose()
    again = make_backend(restore=source2)
    assert len(again.started["rolled_back"]) == 1 and prepared(postgres, again) == []
    assert set(counts(again, KEYS).values()) == {2}


def test_a_job_submitted_while_an_epoch_is_left_prepared_neither_waits_nor_decides_it(make_backend, postgres):
    """A job cancelled (or its driver killed) between an epoch's pre-commit and its commit leaves
    that epoch prepared, holding row locks, for the next restore to commit or roll back: the next
    submission's ``ensure_schema`` comes first and must not wait for those locks (its ``ALTER
    TABLE`` did, for ever) nor end the transaction."""
    backend = make_backend()
    add(backend, KEYS[:5])
    checkpoint([backend], 1)  # pre-committed; its completion never came
    left = prepared(postgres, backend)
    assert len(left) == 1
    started = time.monotonic()
    ensure_schema(postgres.dsn, "epochal_state", False)
    assert time.monotonic() - started < 5
    assert prepared(postgres, backend) == left


def test_the_fixture_rolls_back_what_a_failed_test_left_prepared_and_only_on_the_state_tables(
        make_backend, make_pg_table, postgres):
    """A failed test leaves its epoch prepared: its row locks stop a later ``ALTER TABLE`` of the
    state tables (``ensure_schema``'s waited 300 s before it ran only when its column was
    missing); :meth:`PostgresServer.roll_back_prepared`, which ``make_backend`` runs before and
    after each test, rolls back that transaction and no other."""
    backend = make_backend()
    add(backend, KEYS[:5])
    checkpoint([backend], 1)  # never completes: the test "failed" here
    other = make_pg_table("id int")
    with postgres.connect() as conn:
        conn.execute("BEGIN")
        conn.execute(f"INSERT INTO {other} VALUES (1)")
        conn.execute("PREPARE TRANSACTION 'not-epochal-state'")
    try:
        with postgres.connect() as conn:
            conn.execute("SET lock_timeout = '50ms'")
            with pytest.raises(Exception, match="lock timeout"):
                conn.execute("ALTER TABLE epochal_state_epochs ADD COLUMN IF NOT EXISTS fence bigint")
        left = prepared(postgres, backend)
        assert len(left) == 1
        assert postgres.roll_back_prepared("epochal_state") == left
        assert prepared(postgres, backend) == []
        ensure_schema(postgres.dsn, "epochal_state", False)  # does not wait
    finally:
        with postgres.connect() as conn:
            gids = [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts")]
            conn.execute("ROLLBACK PREPARED 'not-epochal-state'")
    assert "not-epochal-state" in gids


@pytest.mark.parametrize("mvcc", [False, True])
def test_the_log_spills_past_its_budget_and_reads_uploads_savepoints_and_restores_see_every_change(
        make_backend, tmp_path, mvcc):
    spills = tmp_path / "local" / SpillDirectory.BASE
    backend = make_backend(mvcc=mvcc, wal_memory_bytes=2_000, local_dir=str(tmp_path / "local"))
    add(backend, KEYS)  # 200 new keys of ~140 bytes each against 2,000: spills every ~14 keys
    assert backend.wal.spilled_entries >= 180 and backend.wal.bytes <= 2_000
    assert set(counts(backend, KEYS).values()) == {1}
    checkpoint([backend], 1)
    add(backend, KEYS[:100])  # epoch 2 spills too, and moves what epoch 1 kept in memory to disk
    table = backend.owned_table("count")
    for key in KEYS[:10]:
        del table[key_group_of(key, MAXP)][key]
    expected = {key: None if i < 10 else 2 if i < 100 else 1 for i, key in enumerate(KEYS)}
    assert counts(backend, KEYS) == expected  # memory, then this epoch's spill, then epoch 1's
    group = key_group_of(KEYS[50], MAXP)
    assert dict(table[group].items()) == {k: v for k, v in expected.items()
                                          if v is not None and key_group_of(k, MAXP) == group}
    captured = backend.capture()  # a savepoint's copy reads the spills back
    assert {k: v for g in captured.values() for k, v in g["count"].items()} == {
        k: v for k, v in expected.items() if v is not None}
    assert len(os.listdir(next(spills.iterdir()))) == 2  # one RocksDB directory per spilled epoch
    backend.checkpoint_completed(1)
    assert len(os.listdir(next(spills.iterdir()))) == 1  # epoch 1 is committed: its spill is gone
    assert counts(backend, KEYS) == expected
    source = checkpoint([backend], 2)
    assert source.metadata["operators"]["op"]["subtasks"]["0"]["keyed"]["spilled_epochs"] == 1
    backend.checkpoint_completed(2)
    assert os.listdir(next(spills.iterdir())) == []
    backend.dispose()
    assert list(spills.iterdir()) == []  # the backend's directory too
    restored = make_backend(restore=source, mvcc=mvcc)
    assert counts(restored, KEYS) == expected


def test_the_spilled_changes_are_necessary(make_backend, tmp_path, monkeypatch):
    """A spill that loses what it is given loses state: the restored counts are wrong."""
    monkeypatch.setattr(DiskSpill, "add", lambda self, changes: len(sorted_changes(changes)))  # writes nothing
    backend = make_backend(wal_memory_bytes=2_000, local_dir=str(tmp_path))
    add(backend, KEYS)
    source = checkpoint([backend], 1)
    backend.checkpoint_completed(1)
    backend.dispose()
    lost = [k for k, v in counts(make_backend(restore=source), KEYS).items() if v is None]
    assert len(lost) >= 180


def test_within_its_budget_the_log_stays_in_memory(make_backend, tmp_path):
    backend = make_backend(local_dir=str(tmp_path))
    add(backend, KEYS)
    checkpoint([backend], 1)
    add(backend, KEYS)
    backend.checkpoint_completed(1)  # no transaction left prepared: it would lock the table
    assert backend.wal.spilled_entries == 0 and not (tmp_path / SpillDirectory.BASE).exists()


def test_two_phase_commit_is_necessary(make_backend, monkeypatch):
    """Without resolving the prepared transactions at a restore, the completed checkpoint whose
    commit a failure interrupted keeps the key groups locked (the restore cannot take their
    fence) and is missing (the markers' check refuses), and without the check the job would run on
    an older state."""
    import epochal.state.postgres.restore as module  # where a restore resolves the prepared transactions

    backend = make_backend()
    add(backend, KEYS)
    checkpoint([backend], 1)
    backend.checkpoint_completed(1)
    add(backend, KEYS)
    source2 = checkpoint([backend], 2)
    backend.dispose()
    monkeypatch.setattr(module, "resolve", lambda prepared, restored, groups: ([], []))
    monkeypatch.setattr(module, "FENCE_WAIT_S", 0.5)
    with pytest.raises(StateBackendError, match="stayed locked"):
        make_backend(restore=source2)
    monkeypatch.setattr(module, "take_fence", lambda *args, **kwargs: [])
    with pytest.raises(CheckpointError, match="is not in"):
        make_backend(restore=source2)
    monkeypatch.setattr(module.Store, "markers", lambda self, groups: dict.fromkeys(groups, 2))
    wrong = make_backend(restore=source2)
    assert set(counts(wrong, KEYS).values()) == {1}  # checkpoint 2's counts are lost
    wrong.store.finish_prepared(wrong.store.prepared(wrong.prefix)[0].__str__(), commit=False)


def test_an_aborted_checkpoint_is_rolled_back_and_its_changes_go_with_the_next(make_backend, postgres):
    backend = make_backend()
    add(backend, KEYS)
    checkpoint([backend], 1)
    backend.checkpoint_aborted(1)
    assert prepared(postgres, backend) == []
    add(backend, KEYS)
    source = checkpoint([backend], 2)
    backend.checkpoint_completed(2)
    backend.dispose()
    assert set(counts(make_backend(restore=source), KEYS).values()) == {2}


def test_only_the_latest_checkpoint_can_be_restored_without_mvcc(make_backend):
    backend = make_backend()
    add(backend, KEYS)
    source1 = checkpoint([backend], 1)
    backend.checkpoint_completed(1)
    add(backend, KEYS)
    checkpoint([backend], 2)
    backend.checkpoint_completed(2)
    backend.dispose()
    with pytest.raises(CheckpointError, match="later checkpoint"):
        make_backend(restore=source1)


@pytest.mark.parametrize("mvcc", [False, True])
def test_rescaling_two_three_one_reads_other_key_group_ranges(make_backend, mvcc):
    old = [make_backend(range(0, 64), mvcc=mvcc), make_backend(range(64, 128), mvcc=mvcc)]
    for backend in old:
        add(backend, [k for k in KEYS if key_group_of(k, MAXP) in backend.key_groups], 5)
    source = checkpoint(old, 1)
    for backend in old:
        backend.checkpoint_completed(1)
        backend.dispose()
    three = [make_backend(r, restore=source, mvcc=mvcc) for r in (range(0, 43), range(43, 86), range(86, 128))]
    for backend in three:
        mine = [k for k in KEYS if key_group_of(k, MAXP) in backend.key_groups]
        assert set(counts(backend, mine).values()) == {5}
        add(backend, mine, 2)
    source = checkpoint(three, 2)
    for backend in three:
        backend.checkpoint_completed(2)
        backend.dispose()
    one = make_backend(restore=source, mvcc=mvcc)
    assert set(counts(one, KEYS).values()) == {7}


def test_a_savepoint_is_canonical_and_moves_to_the_heap_backend_and_back(make_backend, tmp_path):
    backend = make_backend()
    add(backend, KEYS)
    checkpoint([backend], 1)
    backend.checkpoint_completed(1)
    add(backend, KEYS[:50])
    checkpoint([backend], 2)  # prepared, not completed: in the savepoint through the overlay
    add(backend, KEYS[:10])  # this epoch's log: in the savepoint too
    storage = CheckpointStorage(str(tmp_path / "sp"))
    plan = backend.begin_savepoint(3, native=True)
    add(backend, KEYS)  # after the barrier: not in the savepoint
    handles = materialize(storage, 3, 0, {"op": {"keyed": plan, "states": {"count": "value"}}})
    assert "groups" in handles["op"]["keyed"]  # the heap layout
    source = RestoreSource(storage, 3, {"operators": {"op": {"subtasks": {"0": handles["op"]}}}})
    heap = HeapKeyedStateBackend(MAXP, range(MAXP))
    for group, states in source.keyed_groups("op", range(MAXP)):
        heap.restore_group(group, states)
    expected = {k: 1 + (k in KEYS[:50]) + (k in KEYS[:10]) for k in KEYS}
    assert {k: v for states in heap.capture().values() for k, v in states["count"].items()} == expected
    back = make_backend(restore=source)  # heap layout into PostgreSQL: written to the database
    assert back.started["mode"] == "loaded" and back.started["loaded"] == len(KEYS)
    assert counts(back, KEYS) == expected


def test_a_small_cache_reads_the_database_again(make_backend):
    backend = make_backend()
    add(backend, KEYS)
    source = checkpoint([backend], 1)
    backend.checkpoint_completed(1)
    backend.dispose()
    small = make_backend(restore=source, cache_entries=30)
    for _ in range(3):
        add(small, KEYS)
    assert small._cached <= 30 + len(KEYS) * 2
    assert set(counts(small, KEYS).values()) == {4}


def test_disposing_hands_the_read_cache_to_the_release_thread(make_backend):
    """The task ends (and a next one in the process starts) without freeing the cache itself."""
    backend = make_backend()
    add(backend, KEYS)
    checkpoint([backend], 1)
    backend.checkpoint_completed(1)  # the epoch's values go to the cache
    cached = [values for group in backend._groups.values() for values in group.values.values() if values]
    assert sum(map(len, cached)) == len(KEYS)
    backend.dispose()
    assert backend._groups == {}
    deadline = time.monotonic() + 10
    while pending_entries():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not any(cached)  # emptied in place by the release thread


def test_mvcc_restores_older_checkpoints_drops_failed_versions_and_collects_garbage(make_backend, postgres):
    backend = make_backend(mvcc=True, retained=2)
    sources = {}
    for checkpoint_id in (1, 2, 3, 4):
        add(backend, KEYS)
        sources[checkpoint_id] = checkpoint([backend], checkpoint_id)
        backend.checkpoint_completed(checkpoint_id)
    add(backend, KEYS)
    checkpoint([backend], 5)  # written, never completed
    op = backend.store.op
    with postgres.connect() as conn:
        versions = conn.execute("SELECT count(*) FROM epochal_state_versions WHERE op = %s", (op,)).fetchone()[0]
        horizon = conn.execute("SELECT horizon FROM epochal_state_operators WHERE op = %s", (op,)).fetchone()[0]
    assert horizon == 3 and versions < 5 * len(KEYS)  # versions of 1 and 2 that 3 and 4 do not read: gone
    assert prepared(postgres, backend) == []  # MVCC prepares nothing
    backend.dispose()
    restored = make_backend(restore=sources[3], mvcc=True)
    assert restored.started["dropped_versions"] == 2 * len(KEYS)  # epochs 4 and 5
    assert set(counts(restored, KEYS).values()) == {3}
    restored.dispose()
    with pytest.raises(CheckpointError, match="collected"):
        make_backend(restore=sources[1], mvcc=True)
    # a job started again without a checkpoint, in the same namespace, begins a new history
    fresh = make_backend(mvcc=True, retained=2)
    add(fresh, KEYS)
    source = checkpoint([fresh], 1)
    fresh.checkpoint_completed(1)
    fresh.dispose()
    assert set(counts(make_backend(restore=source, mvcc=True), KEYS).values()) == {1}


def test_the_backend_is_checked_when_chosen_and_when_the_job_is_submitted(postgres, tmp_path):
    import epochal
    from epochal.dataflow.job import _validate_state_backend
    from epochal.errors import PlanError
    from tests.postgres_server import PostgresServer

    with pytest.raises(PlanError, match="needs dsn="):
        StateBackendConfig(kind="postgres")
    with pytest.raises(PlanError, match="plain SQL name"):
        StateBackendConfig(kind="postgres", dsn=postgres.dsn, table="x; drop table y")
    env = epochal.Environment(2, master="local[2]")
    env.set_state_backend("postgres", dsn=postgres.dsn)
    env.enable_checkpointing(1.0, max_concurrent=2)
    with pytest.raises(PlanError, match="one at a time"):
        _validate_state_backend(env.job_spec(streams=False))
    env.set_state_backend("postgres", dsn=postgres.dsn, mvcc=True)
    _validate_state_backend(env.job_spec(streams=False))  # MVCC holds no locks across checkpoints
    server = PostgresServer(tmp_path / "pg0", max_prepared_transactions=0).start()
    try:
        env.set_state_backend("postgres", dsn=server.dsn)
        env.enable_checkpointing(1.0)
        with pytest.raises(PlanError, match="max_prepared_transactions = 0"):
            _validate_state_backend(env.job_spec(streams=False))
    finally:
        server.destroy()
    env.set_state_backend("postgres", dsn="host=127.0.0.1 port=1 dbname=nowhere connect_timeout=2")
    with pytest.raises(PlanError, match="cannot connect"):
        _validate_state_backend(env.job_spec(streams=False))


@pytest.mark.parametrize("mvcc", [False, True])
def test_a_worker_of_a_failed_attempt_that_still_runs_cannot_write_after_the_restore(make_backend, postgres, mvcc):
    """A zombie (a worker of the failed attempt still running: partitioned, or slow to stop)
    uploads its epoch after the new attempt restored: refused by the key groups' fence, so it
    neither leaves a prepared transaction (whose row locks would stall every later upload, and
    which a later restore would commit) nor versions the new attempt reads."""
    zombie = make_backend(mvcc=mvcc)
    add(zombie, KEYS)
    source1 = checkpoint([zombie], 1)
    zombie.checkpoint_completed(1)
    add(zombie, KEYS + ["zombie-only"], 10)
    late = zombie.begin_snapshot(2)  # the barrier; its upload has not run when the attempt fails
    restored = make_backend(restore=source1, mvcc=mvcc, attempt=1)
    with pytest.raises(FencedUploadError, match="restored by a later attempt"):
        late.upload(None, 2, "x")
    assert prepared(postgres, zombie) == []
    add(restored, KEYS, 2)
    source2 = checkpoint([restored], 2)  # the zombie's checkpoint id again (a restore_from goes on from 1)
    restored.checkpoint_completed(2)
    expected = {**dict.fromkeys(KEYS, 3), "zombie-only": None}
    assert counts(restored, KEYS + ["zombie-only"]) == expected
    restored.dispose()
    again = make_backend(restore=source2, mvcc=mvcc, attempt=2)
    assert counts(again, KEYS + ["zombie-only"]) == expected and prepared(postgres, again) == []


@pytest.mark.parametrize("ended", [True, False])
def test_a_restore_ends_an_upload_in_flight_of_a_failed_attempt_at_once(make_backend, postgres, monkeypatch, ended):
    """The zombie's upload began before the restore and stalls (it holds the key groups'
    markers): the restore terminates its connection (found by its application_name), which rolls
    its transaction back, and takes the fence at once; the zombie's upload fails and nothing of it
    stays. Where its connection cannot be ended (``ended`` False: as if the role may not signal
    it) the restore waits until the upload prepared, and rolls it back."""
    import threading
    import time

    from epochal.state.postgres.store import Store

    zombie = make_backend()
    add(zombie, KEYS)
    source1 = checkpoint([zombie], 1)
    zombie.checkpoint_completed(1)
    add(zombie, KEYS + ["zombie-only"], 10)
    late = zombie.begin_snapshot(2)
    reached, go = threading.Event(), threading.Event()
    run = zombie.store._run

    def gated(conn, statement, *args, **kwargs):
        if "PREPARE TRANSACTION" in repr(statement):
            reached.set()
            go.wait(30)
        return run(conn, statement, *args, **kwargs)

    zombie.store._run = gated
    uploaded = []

    def upload():
        try:
            uploaded.append(late.upload(None, 2, "x"))
        except StateBackendError as exc:
            uploaded.append(exc)

    uploading = threading.Thread(target=upload)
    uploading.start()
    assert reached.wait(30)  # written, about to prepare, the markers locked
    if not ended:
        monkeypatch.setattr(Store, "end_earlier_sessions", lambda self: [])
    started = []
    began = time.monotonic()
    restore = threading.Thread(target=lambda: started.append(make_backend(restore=source1, attempt=1)))
    restore.start()
    restore.join(5.0 if ended else 0.5)  # not ended: resolved_while_fencing below shows it waited
    if ended:
        took = time.monotonic() - began
        assert started, "the restore waited for the zombie's upload"
        assert took < 5.0
        go.set()
        uploading.join(30)
        assert isinstance(uploaded[0], StateBackendError)  # its connection was terminated
    else:
        assert restore.is_alive()  # waiting for the markers
        go.set()
        uploading.join(30)
        restore.join(30)
        assert uploaded and started, "the zombie's upload or the restore did not finish"
        assert started[0].started["resolved_while_fencing"] == [uploaded[0]["gid"]]
    restored = started[0]
    assert prepared(postgres, restored) == []
    assert counts(restored, KEYS + ["zombie-only"]) == {**dict.fromkeys(KEYS, 1), "zombie-only": None}


@pytest.mark.parametrize("mvcc", [False, True], ids=["wal", "mvcc"])
def test_read_committed_views_show_the_last_committed_checkpoint_without_copying_it(make_backend, mvcc):
    from epochal.dataflow.queries.shown import views_of
    from epochal.state.postgres.views import CommittedGroupView

    backend = make_backend(mvcc=mvcc)
    backend.get_state(ValueStateDescriptor("count", queryable="counts"))
    views = views_of(backend)
    assert all(type(view) is CommittedGroupView for view in views["counts"].values())

    def committed(keys):
        return {k: views["counts"][key_group_of(k, MAXP)].get(k) for k in keys}

    add(backend, KEYS)
    assert committed(KEYS[:3]) == dict.fromkeys(KEYS[:3])  # only in the log: not committed
    checkpoint([backend], 1)
    add(backend, KEYS[:50])  # epoch 2, pending
    assert committed(KEYS[:3]) == dict.fromkeys(KEYS[:3])  # prepared (or written, MVCC), not completed
    backend.checkpoint_completed(1)
    assert committed(KEYS) == dict.fromkeys(KEYS, 1) and counts(backend, KEYS[:1]) == {KEYS[0]: 2}
    source = checkpoint([backend], 2)
    backend.checkpoint_completed(2)
    add(backend, KEYS[:5])  # epoch 3, never completed
    assert committed(KEYS[:50]) == dict.fromkeys(KEYS[:50], 2)
    assert committed(KEYS[50:52]) == dict.fromkeys(KEYS[50:52], 1)
    scanned = sorted(item for view in views["counts"].values() for item in view.items())
    assert scanned == sorted({**dict.fromkeys(KEYS, 1), **dict.fromkeys(KEYS[:50], 2)}.items())
    assert sum(len(view) for view in views["counts"].values()) == len(KEYS)
    backend.dispose()
    restored = make_backend(restore=source, mvcc=mvcc)  # checkpoint 2 again: epoch 3 gone
    restored.get_state(ValueStateDescriptor("count", queryable="counts"))
    again = views_of(restored)["counts"]
    assert {k: again[key_group_of(k, MAXP)].get(k) for k in KEYS[:2] + KEYS[-2:]} == {
        **dict.fromkeys(KEYS[:2], 2), **dict.fromkeys(KEYS[-2:], 1)}
