"""Queryable state across real worker crashes (SIGKILL), on every state backend: a client polling
all keys at both isolation levels while workers are killed sees read_committed values that never
go back, each equal to its checkpoint's value; read_uncommitted values that keys really had; and
queries during and after the restarts routed to the right workers (an answer, or a retriable
StateUnavailableError while the job restarts). Without the committed views (read_committed served
from the live state), the values go back after a crash: the views are what prevents it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

import epochal
from epochal.control.restart import FixedDelayRestart
from epochal.errors import StateUnavailableError
from epochal.state.storage import CheckpointStorage
from epochal.testing import kill_worker
from tests.queryable_jobs import KEYS, STATE, checkpoint_values, is_real, keyed_job

pytestmark = [pytest.mark.chaos, pytest.mark.slow]
ALL_KEYS = [f"k{i}" for i in range(KEYS)]
KILLS = 2
#: Seconds between checkpoints, and how long after one completed a worker is killed: what the
#: crash loses (records processed since the checkpoint) takes longer to process again than the
#: restarted job takes to answer queries, so a read of the live state would be seen going back.
INTERVAL = 2.0
KILL_AFTER = 1.2


@dataclass
class Observed:
    """What the polling client saw, in order."""

    committed: list[tuple[int | None, dict]] = field(default_factory=list)
    uncommitted: list[dict] = field(default_factory=list)
    unavailable: int = 0
    errors: list[BaseException] = field(default_factory=list)


def poll(client: epochal.QueryableStateClient, stop: threading.Event, seen: Observed) -> None:
    while not stop.is_set():
        try:
            seen.committed.append((None, client.get_many(STATE, ALL_KEYS, level="read_committed")))
            seen.committed[-1] = (client.checkpoint_id, seen.committed[-1][1])
            seen.uncommitted.append(client.get_many(STATE, ALL_KEYS))
        except StateUnavailableError:
            seen.unavailable += 1
        except BaseException as error:  # noqa: BLE001 - reported by the test
            seen.errors.append(error)
            return


def run_with_kills(make_env, tmp_path, broken: bool = False) -> tuple[Observed, epochal.JobClient]:
    env = make_env(2)
    env.enable_checkpointing(INTERVAL, storage=str(tmp_path / "checkpoints"), retained=10_000)
    env.set_restart_strategy(FixedDelayRestart(attempts=KILLS + 1, delay=0.2))
    keyed_job(env, rate=2000, broken=broken)
    job = env.execute_async("queryable-chaos")
    job.wait_until_running()
    seen = Observed()
    stop = threading.Event()
    client = epochal.QueryableStateClient(job, timeout=3.0)
    poller = threading.Thread(target=poll, args=(client, stop, seen))
    poller.start()
    try:
        for kill in range(KILLS):
            job.wait_until_running(timeout=120)
            before = len(seen.committed)
            deadline = time.monotonic() + 30
            while len(seen.committed) < before + 5 and time.monotonic() < deadline:
                time.sleep(0.05)  # answers of this attempt before the kill
            storage = CheckpointStorage(job.checkpoint_path)
            latest = storage.latest()
            deadline = time.monotonic() + 30
            while storage.latest() == latest and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(KILL_AFTER)
            kill_worker(job, kill % 2)
            deadline = time.monotonic() + 60
            while len(job.restarts()) <= kill and time.monotonic() < deadline:
                time.sleep(0.05)
        job.wait_until_running(timeout=120)
        time.sleep(2.0)  # queries after the last restart
    finally:
        stop.set()
        poller.join(60)
        client.close()
        job.cancel()
    assert not seen.errors, seen.errors
    assert len(job.restarts()) == KILLS
    return seen, job


@pytest.mark.keyed_state_files  # compares answers with the values in the checkpoints' files
def test_read_committed_never_goes_back_across_worker_kills(make_env, tmp_path, state_backend):
    seen, job = run_with_kills(make_env, tmp_path)
    assert len(seen.committed) > 20 and len(seen.uncommitted) > 20
    highest: dict[str, int] = {}
    last_id = 0
    for checkpoint_id, values in seen.committed:
        assert checkpoint_id is None or checkpoint_id >= last_id, f"checkpoint {checkpoint_id} after {last_id}"
        last_id = checkpoint_id or last_id
        for key, value in values.items():
            assert is_real(key, value), f"{key}: {value}"
            assert value[1] >= highest.get(key, 0), f"{key} went back from {highest[key]} to {value[1]}"
            highest[key] = value[1]
    for values in seen.uncommitted:
        for key, value in values.items():
            assert is_real(key, value), f"{key}: {value}"
    # committed answers equal their checkpoint, before and after the restarts
    samples = [c for c in seen.committed if c[0] is not None]
    for checkpoint_id, values in samples[:: max(1, len(samples) // 10)] + samples[-1:]:
        assert values == checkpoint_values(job.checkpoint_path, checkpoint_id)
    # and answers came from the last attempt's workers: routing followed the restarts
    assert seen.committed[-1][0] is not None and highest and len(highest) == KEYS


@pytest.mark.backends("rocksdb")  # that the views are needed shows on one backend
def test_without_committed_views_read_committed_goes_back(make_env, tmp_path):
    seen, _ = run_with_kills(make_env, tmp_path, broken=True)
    highest: dict[str, int] = {}
    went_back = 0
    for _, values in seen.committed:
        for key, value in values.items():
            went_back += value[1] < highest.get(key, 0)
            highest[key] = max(value[1], highest.get(key, 0))
    assert went_back > 0, "read_committed never went back although it read the live state"
