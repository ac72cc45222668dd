"""The commit protocol of the PostgreSQL state backend (epochal.state.postgres.epochs), without a
database: epochs, one prepared transaction at a time, completion, aborts, restore resolution."""

from __future__ import annotations

from epochal.state.postgres.epochs import (
    SKIP,
    WAIT,
    EpochLog,
    EpochTransactionId,
    Session,
    UploadPlan,
    gid_prefix,
    parse_epoch_transaction_id,
    parse_session,
    resolve,
)
from epochal.state.postgres.spill import merge


def changes(**values):
    return {(1, 0): {k.encode(): (v.encode() if v is not None else None) for k, v in values.items()}}


def test_an_epoch_is_prepared_then_committed_by_its_completion():
    log = EpochLog()
    log.begin(1, changes(a="1"))
    plan = log.plan(1)
    assert isinstance(plan, UploadPlan) and [e.checkpoint_id for e in plan.epochs] == [1]
    assert log.prepared(plan, "g1")
    assert log.open_gids == {1: "g1"}
    commit, done = log.completed(1)
    assert commit == ["g1"] and [e.checkpoint_id for e in done] == [1]
    assert log.epochs == [] and log.open_gids == {}


def test_the_next_upload_waits_for_the_previous_prepared_transaction():
    log = EpochLog()
    log.begin(1, changes(a="1"))
    assert log.prepared(log.plan(1), "g1")
    log.begin(2, changes(a="2"))
    assert log.plan(2) is WAIT  # g1 holds the row of a until it commits
    assert log.waiting_on(2) == [1]
    log.completed(1)
    plan = log.plan(2)
    assert [e.checkpoint_id for e in plan.epochs] == [2]


def test_an_aborted_prepared_epoch_is_rolled_back_and_goes_with_the_next_checkpoint():
    log = EpochLog()
    log.begin(1, changes(a="1", b="1"))
    assert log.prepared(log.plan(1), "g1")
    log.begin(2, changes(a="2"))
    assert log.aborted(1) == "g1"  # the caller rolls g1 back
    plan = log.plan(2)
    assert [e.checkpoint_id for e in plan.epochs] == [1, 2]
    assert list(merge(plan.layers())) == [(0, b"a", 1, b"2"), (0, b"b", 1, b"1")]  # the newer value wins
    assert log.prepared(plan, "g2")
    commit, done = log.completed(2)
    assert commit == ["g2"] and [e.checkpoint_id for e in done] == [1, 2]


def test_an_upload_of_an_aborted_checkpoint_writes_nothing_and_one_aborted_while_written_rolls_back():
    log = EpochLog()
    log.begin(1, changes(a="1"))
    log.aborted(1)
    assert log.plan(1) is SKIP
    log.begin(2, changes(a="2"))
    plan = log.plan(2)
    log.aborted(2)  # arrives while the upload writes
    assert not log.prepared(plan, "g2")  # the upload rolls g2 back itself
    log.rolled_back(plan)
    log.begin(3, changes())
    assert [e.checkpoint_id for e in log.plan(3).epochs] == [1, 2, 3]


def test_a_failed_upload_leaves_its_epochs_for_the_next_one():
    log = EpochLog()
    log.begin(1, changes(a="1"))
    log.plan(1)  # the write fails: prepared() is never called
    log.begin(2, changes(b="2"))
    assert [e.checkpoint_id for e in log.plan(2).epochs] == [1, 2]


def test_completion_commits_every_earlier_prepared_transaction_and_old_completions_change_nothing():
    log = EpochLog()
    log.begin(1, changes(a="1"))
    assert log.prepared(log.plan(1), "g1")
    assert log.completed(1)[0] == ["g1"]
    assert log.completed(1) == ([], [])
    assert log.plan(1) is SKIP  # already committed
    assert log.aborted(1) is None


def test_mvcc_epochs_never_wait_and_an_abort_keeps_the_versions_for_the_next_completion():
    log = EpochLog(sequential=False)
    log.begin(1, changes(a="1"))
    assert log.prepared(log.plan(1), "")
    log.begin(2, changes(a="2"))
    assert isinstance(log.plan(2), UploadPlan)  # no row locks: no wait
    assert log.aborted(1) is None  # versions of epoch 1 stay: checkpoint 2's state includes them
    assert log.prepared(log.plan(2), "")
    commit, done = log.completed(2)
    assert commit == [] and [e.checkpoint_id for e in done] == [1, 2]


def test_transaction_ids_round_trip_and_belong_to_one_operator():
    prefix = gid_prefix("epochal_state", "job", "count")
    gid = EpochTransactionId(prefix, 0, 64, 7, 2)
    assert parse_epoch_transaction_id(str(gid), prefix) == gid
    assert parse_epoch_transaction_id(str(gid), gid_prefix("epochal_state", "job", "other")) is None
    assert len(str(EpochTransactionId(gid_prefix("t" * 40, "n" * 500, "u" * 500), 32767, 32768, 10 ** 12, 99))) < 200


def test_a_restore_commits_up_to_the_restored_checkpoint_and_rolls_back_later_ones_it_overlaps():
    prefix, Tid = "p", EpochTransactionId
    old = [Tid(prefix, 0, 64, 5, 0), Tid(prefix, 64, 128, 5, 0), Tid(prefix, 0, 64, 6, 0), Tid(prefix, 64, 128, 6, 0)]
    commit, rollback = resolve(old, 5, range(0, 43))
    assert commit == [old[0]] and rollback == [old[2]]
    commit, rollback = resolve(old, 5, range(43, 86))  # overlaps both old subtasks
    assert commit == [old[0], old[1]] and rollback == [old[2], old[3]]
    assert resolve(old, None, range(0, 128)) == ([], old)  # a start without this backend's checkpoint


def test_a_session_name_fits_postgresql_and_names_the_earlier_starts_of_the_key_groups():
    prefix = gid_prefix("epochal_state", "job", "count")
    new = Session(prefix, 32768, 65536, (1 << 62) - 1)
    assert len(str(new)) <= 63 and parse_session(str(new), prefix) == new
    assert parse_session(str(new), gid_prefix("epochal_state", "job", "other")) is None
    assert parse_session("psql", prefix) is None
    old = Session(prefix, 0, 40000, 7)
    assert old.earlier_than(new) and not new.earlier_than(new)  # the start itself is not ended
    assert not Session(prefix, 0, 32768, 7).earlier_than(new)  # other key groups
    assert not Session(gid_prefix("epochal_state", "job", "other"), 0, 40000, 7).earlier_than(new)
