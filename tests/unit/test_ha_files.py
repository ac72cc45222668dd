"""The file-based HA services (epochal.control.ha.files): compare-and-set by link(2), fencing."""

from __future__ import annotations

import os
import threading

import pytest

from epochal.control.ha.files import KEEP, FileHaServices
from epochal.control.ha.records import CheckpointPointer, DriverInfo, JobRecord, JobResultRecord
from epochal.control.ha.services import Fenced
from epochal.control.ha.stores import open_services
from epochal.errors import HighAvailabilityError

A = DriverInfo("a", "h", 1, 1.0)
B = DriverInfo("b", "h", 2, 2.0)


def test_a_new_job_has_no_leader_epoch_zero_and_counter_one(tmp_path):
    ha = open_services(str(tmp_path), "job1")
    seen = ha.observe()
    assert (seen.epoch, seen.leader, seen.finished) == (0, None, False)
    assert ha.checkpoint_counter() == 1 and ha.latest_checkpoints() is None and ha.result() is None


def test_claims_are_a_compare_and_set_one_of_many_wins(tmp_path):
    services = [FileHaServices(f"file://{tmp_path}", "job") for _ in range(8)]
    seen = services[0].observe()
    won: list[int | None] = [None] * 8
    barrier = threading.Barrier(8)

    def claim(i: int) -> None:
        barrier.wait()
        won[i] = services[i].claim(seen, DriverInfo(str(i), "h", i, 0.0))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(w for w in won if w is not None) == [1]
    assert services[0].observe().leader.driver_id == str(won.index(1))


def test_a_new_leader_fences_every_write_of_the_old_one(tmp_path):
    ha = FileHaServices(str(tmp_path), "job")
    epoch_a = ha.claim(ha.observe(), A)
    assert epoch_a == 1
    ha.publish_checkpoint(epoch_a, CheckpointPointer("file:///c", (1, 2)))
    ha.reserve_ids(epoch_a, 100)
    assert ha.renew(epoch_a)
    # B takes over (as after A's lease expired)
    epoch_b = ha.claim(ha.observe(), B)
    assert epoch_b == 2
    with pytest.raises(Fenced):
        ha.publish_checkpoint(epoch_a, CheckpointPointer("file:///c", (3,)))
    with pytest.raises(Fenced):
        ha.reserve_ids(epoch_a, 500)
    with pytest.raises(Fenced):
        ha.check(epoch_a)
    with pytest.raises(Fenced):
        ha.put_result(epoch_a, JobResultRecord("FINISHED", 0.0, "a"))
    assert not ha.renew(epoch_a)
    assert ha.latest_checkpoints() == CheckpointPointer("file:///c", (1, 2))
    assert ha.checkpoint_counter() == 100
    ha.check(epoch_b)
    ha.reserve_ids(epoch_b, 50)  # never lowers the counter
    assert ha.checkpoint_counter() == 100


def test_a_claim_on_a_stale_observation_loses(tmp_path):
    ha = FileHaServices(str(tmp_path), "job")
    seen = ha.observe()
    epoch = ha.claim(seen, A)
    ha.renew(epoch)
    assert ha.claim(seen, B) is None


def test_release_lets_a_standby_claim_and_a_result_ends_the_job(tmp_path):
    ha = FileHaServices(str(tmp_path), "job")
    epoch = ha.claim(ha.observe(), A)
    ha.release(epoch)
    assert ha.observe().leader is None
    epoch = ha.claim(ha.observe(), B)
    ha.put_result(epoch, JobResultRecord("FINISHED", 5.0, "b"))
    seen = ha.observe()
    assert seen.finished and seen.leader is None
    assert ha.claim(seen, A) is None
    assert ha.result().status == "FINISHED"


def test_old_versions_are_deleted(tmp_path):
    ha = FileHaServices(str(tmp_path), "job")
    epoch = ha.claim(ha.observe(), A)
    for _ in range(3 * KEEP):
        assert ha.renew(epoch)
    assert len(os.listdir(ha.register)) <= KEEP + 1
    assert ha.observe().version == 3 * KEEP + 1


def test_the_first_plan_wins_the_job_store(tmp_path):
    ha = FileHaServices(str(tmp_path), "job")
    first = ha.put_job(JobRecord("job", "n", "f1", 1.0, "a"), b"pickled-1")
    second = ha.put_job(JobRecord("job", "n", "f2", 2.0, "b"), b"pickled-2")
    assert first == second == ha.job() and second.fingerprint == "f1"
    assert (ha.directory / first.job_file).read_bytes() == b"pickled-1"


def test_contenders_are_listed_until_they_leave(tmp_path):
    ha = FileHaServices(str(tmp_path), "job")
    ha.join(A)
    ha.join(B)
    assert [c.driver_id for c in ha.contenders()] == ["a", "b"]
    ha.leave(A)
    assert [c.driver_id for c in ha.contenders()] == ["b"]


def test_unwritable_storage_and_object_stores_are_refused_plainly(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root writes anyway: an existing file in the way instead
            (tmp_path / "file").write_text("x")
            target = str(tmp_path / "file")
        else:
            target = str(locked)
        with pytest.raises(HighAvailabilityError, match="not writable"):
            FileHaServices(target, "job")
    finally:
        locked.chmod(0o700)
    with pytest.raises(HighAvailabilityError, match="object stores"):
        open_services("s3://bucket/ha", "job")
