"""read_committed views of a RocksDB backend (state/rocksdb/views.py) without Spark: views of a local
checkpoint taken at the barrier instead of a copy of the state, opened on the first read, showing
the state of their moment whatever the live database does afterwards, answering the query
machine's lookups and pages, and deleted with the last view of them; states with TTL still copied."""

from __future__ import annotations

import gc
import os

import pytest

from epochal.config import ROCKSDB, StateBackendConfig
from epochal.dataflow.checkpointing.messages import CheckpointComplete
from epochal.dataflow.queries.machine import (
    FrameArrived,
    QueryMachine,
    Reply,
    Served,
    Serving,
    SnapshotTaken,
    StatesDeclared,
    page,
)
from epochal.dataflow.queries.shown import views_of
from epochal.plan.keygroups import key_group_of, key_group_range
from epochal.runtime.queries.wire import READ_COMMITTED, Lookup, Values, encode, query_token
from epochal.state.backends import create_backend
from epochal.state.descriptors import MapStateDescriptor, ValueStateDescriptor
from epochal.state.rocksdb.views import CommittedGroup
from epochal.state.ttl import StateTtlConfig

MAXP = 128
GROUPS = key_group_range(0, 2, MAXP)  # subtask 0 of 2
TOKEN = query_token(b"j" * 32)


def mine(count: int) -> list[str]:
    keys, i = [], 0
    while len(keys) < count:
        if key_group_of(f"k{i}", MAXP) in GROUPS:
            keys.append(f"k{i}")
        i += 1
    return keys


@pytest.fixture
def backend(tmp_path):
    backend = create_backend(StateBackendConfig(ROCKSDB, local_dir=str(tmp_path / "local")), MAXP, GROUPS, "op")
    yield backend
    backend.dispose()


def fill(backend, keys):
    counts = backend.get_state(ValueStateDescriptor("counts", queryable="counts"))
    fields = backend.get_state(MapStateDescriptor("fields", queryable="fields"))
    for i, key in enumerate(keys):
        backend.set_current_key(key)
        counts.update(i)
        fields.put("n", i)
    return counts, fields


def query_dirs(backend) -> list[str]:
    parent, name = os.path.split(backend.directory)
    return [entry for entry in os.listdir(parent) if entry.startswith(f"{name}.query-")]


def test_views_show_the_state_of_their_moment_whatever_the_live_database_does_later(backend):
    keys = mine(200)
    counts, fields = fill(backend, keys)
    views = views_of(backend)
    assert set(views) == {"counts", "fields"} and set(views["counts"]) == set(GROUPS)
    assert all(type(view) is CommittedGroup for view in views["counts"].values())
    for key in keys[:100]:  # changed, deleted and added after the barrier
        backend.set_current_key(key)
        counts.update(-1)
        fields.put("n", -1)
    for key in keys[100:150]:
        backend.set_current_key(key)
        counts.clear()
    backend.set_current_key("new")
    counts.update(7)
    for i, key in enumerate(keys):
        group = key_group_of(key, MAXP)
        view = views["counts"][group]
        assert view.get(key) == i and view[key] == i and key in view
        assert views["fields"][group].get(key) == {"n": i}
    new_group = key_group_of("new", MAXP)
    if new_group in GROUPS:
        assert views["counts"][new_group].get("new", "absent") == "absent"
    assert sum(len(group) for group in views["counts"].values()) == len(keys)
    assert sorted(v for view in views["counts"].values() for _, v in view.items()) == list(range(len(keys)))


def test_the_checkpoint_is_opened_on_the_first_read_and_deleted_with_the_last_view(backend):
    fill(backend, mine(20))
    views = views_of(backend)
    [directory] = query_dirs(backend)
    checkpoint = next(iter(views["counts"].values()))._checkpoint
    assert checkpoint._opened == {}  # the barrier made a local checkpoint and read nothing
    key = mine(1)[0]
    assert views["counts"][key_group_of(key, MAXP)].get(key) == 0
    assert "db" in checkpoint._opened
    backend.close()  # the views have an instance of their own
    assert views["counts"][key_group_of(key, MAXP)].get(key) == 0
    del views, checkpoint
    gc.collect()
    assert query_dirs(backend) == [], f"{directory} is left"


def test_the_query_machine_answers_read_committed_lookups_and_pages_from_them(backend):
    keys = mine(30)
    counts, _ = fill(backend, keys)
    machine = QueryMachine(TOKEN, 0)
    machine.handle(StatesDeclared({"counts": Served("op", "counts", 0, 2, GROUPS, MAXP)}))
    machine.handle(Serving())
    machine.handle(SnapshotTaken(3, views_of(backend)))
    machine.handle(CheckpointComplete(3, False))
    backend.set_current_key(keys[0])
    counts.update(1000)  # after the checkpoint: not committed
    [reply] = machine.handle(FrameArrived(5, TOKEN + encode(Lookup(1, "counts", (keys[0], keys[1], "k-none"),
                                                                    READ_COMMITTED))))
    assert isinstance(reply, Reply) and reply.answer == Values(1, (True, True, False), (0, 1, None), 3)
    items, cursor, seen = [], None, []
    while True:
        items, cursor = page(machine.committed.groups("counts"), GROUPS, cursor, 7)
        seen.extend(items)
        if cursor is None:
            break
    assert sorted(seen) == sorted((key, i) for i, key in enumerate(keys))


def test_states_with_ttl_are_still_copied_without_their_timestamps(backend):
    ttl = backend.get_state(ValueStateDescriptor("recent", queryable="recent", ttl=StateTtlConfig(ttl=3600)))
    key = mine(1)[0]
    backend.set_current_key(key)
    ttl.update("v")
    views = views_of(backend)
    assert views == {"recent": {key_group_of(key, MAXP): {key: "v"}}}
    assert query_dirs(backend) == []  # no checkpoint for copied states


def test_a_query_server_restored_on_rocksdb_answers_from_a_checkpoint_and_closing_it_deletes_them(backend):
    from epochal.dataflow.queries.server import KeyedSource, QueryServer
    from epochal.runtime.host.mailbox import Mailbox

    keys = mine(10)
    counts, _ = fill(backend, keys)
    server = QueryServer(b"j" * 32, 0, "127.0.0.1", MAXP, Mailbox())
    try:
        server.attach([KeyedSource("op", 0, 2, backend)], restored=4)  # the restored state: checkpoint 4's view
        server.serving()
        assert len(query_dirs(backend)) == 1
        server.snapshot_taken(5, [(backend, "op")], {})
        server.checkpoint_completed(5, savepoint=False)
        assert len(query_dirs(backend)) == 1  # checkpoint 4's view dropped once 5's was committed
        backend.set_current_key(keys[0])
        counts.update(99)
        groups = server.machine.committed.groups("counts")
        assert groups[key_group_of(keys[0], MAXP)].get(keys[0]) == 0
        assert server.machine.committed.checkpoint_id == 5
        del groups
    finally:
        server.close()
    gc.collect()
    assert query_dirs(backend) == []
