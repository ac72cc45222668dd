"""Queryable state of a job running on Spark, against an oracle of its state (tests/queryable_jobs.py):
read_uncommitted answers are values the keys really had and never go back while the job runs;
read_committed answers equal the values in the checkpoint they name; batch lookups, scans, the
command line; a restore at another parallelism is routed right; bad input gets one clear error."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

import epochal
from epochal.control.job_registry import HOME_ENV, Registry
from epochal.errors import QueryKeyTypeError, QueryUnauthorizedError, UnknownQueryableStateError
from epochal.runtime.host.frames import split_frames
from epochal.runtime.queries.local import connect, host_identity
from epochal.runtime.queries.wire import UNAUTHORIZED, Lookup, decode, encode, request_frame
from epochal.state.checkpoint_dirs import latest_checkpoint
from tests.queryable_jobs import (
    IN_PLACE,
    KEYS,
    STATE,
    UID,
    TwoSteps,
    checkpoint_values,
    in_place_job,
    is_real,
    keyed_job,
    record,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ALL_KEYS = [f"k{i}" for i in range(KEYS)]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    return tmp_path / "home"


def start(make_env, tmp_path, name: str, parallelism: int = 2, restore_from: str | None = None,
          keyed_parallelism: int | None = None, **job) -> epochal.JobClient:
    env = make_env(parallelism)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"), retained=10_000)
    keyed_job(env, parallelism=keyed_parallelism, **job)
    client = env.execute_async(name, restore_from=restore_from)
    client.wait_until_running()
    return client


def test_answers_are_real_values_and_committed_ones_equal_their_checkpoint(make_env, spark, tmp_path, home):
    job = start(make_env, tmp_path, "queryable")
    try:
        with epochal.QueryableStateClient(job, timeout=30) as client:
            last: dict[str, int] = {}
            committed: list[tuple[int | None, dict]] = []
            deadline = time.monotonic() + 6
            rounds = 0
            while time.monotonic() < deadline:
                values = client.get_many(STATE, ALL_KEYS)
                for key, value in values.items():
                    assert is_real(key, value), f"{key}: {value} is not a value {key} had"
                    assert value[1] >= last.get(key, 0), f"{key} went back from {last[key]} to {value[1]}"
                    last[key] = value[1]
                one = client.get(STATE, "k7")
                assert one is None or is_real("k7", one)
                values = client.get_many(STATE, ALL_KEYS, level="read_committed")
                committed.append((client.checkpoint_id, values))
                rounds += 1
            assert rounds > 20 and len(last) == KEYS
            scanned = dict(client.scan(STATE, page_size=3))
            assert sorted(scanned) == sorted(ALL_KEYS) and all(is_real(k, v) for k, v in scanned.items())
            # every committed answer is exactly what its checkpoint holds, and none goes back
            ids = [c for c, _ in committed if c is not None]
            assert ids == sorted(ids) and len(set(ids)) >= 3, ids
            for checkpoint_id, values in committed[::5]:
                if checkpoint_id is not None:
                    assert values == checkpoint_values(job.checkpoint_path, checkpoint_id)
            # ... and what the DataFrame reader reads of that checkpoint (values as pickles: exact types)
            newest_id, newest = next((c, v) for c, v in reversed(committed) if c is not None)
            frame = epochal.read_state(spark, f"{job.checkpoint_path}/chk-{newest_id}", UID, "aggregate",
                                       value_format="pickle")
            assert {row.key: epochal.decode_state_value(row.value) for row in frame.collect()} == newest
            assert client.get(STATE, "absent", default="x") == "x"
            with pytest.raises(UnknownQueryableStateError, match="its queryable states: chain"):
                client.get("nope", "k1")
            with pytest.raises(QueryKeyTypeError, match="unhashable"):
                client.get(STATE, ["k1"])
            with pytest.raises(ValueError, match="isolation level"):
                client.get(STATE, "k1", level="serializable")
        entry = next(e for e in Registry().entries() if e.job_id == job.job_id)
        with pytest.raises(QueryUnauthorizedError):
            epochal.QueryableStateClient(job.job_id, address=entry.address, token="wrong").get(STATE, "k1")
        # the worker itself refuses a request without the job's query token, and unpickles nothing
        remote = epochal.QueryableStateClient(job.job_id, address=entry.address, token=entry.token)
        assert is_real("k1", remote.get(STATE, "k1"))
        # a client of the workers' host talks over their local sockets; transport="tcp" over TCP
        local = host_identity() is not None
        assert {c.transport for c in remote._connections.values()} == {"unix" if local else "tcp"}
        over_tcp = epochal.QueryableStateClient(job.job_id, address=entry.address, token=entry.token, transport="tcp")
        assert is_real("k1", over_tcp.get(STATE, "k1"))
        assert {c.transport for c in over_tcp._connections.values()} == {"tcp"}
        over_tcp.close()
        host, port = remote.routes.states[STATE].workers[0]
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(request_frame(b"\0" * 32, encode(Lookup(1, STATE, ("k1",)))))
            answer = decode(split_frames(bytearray(sock.recv(65536)))[0])
            assert answer.code == UNAUTHORIZED
        if local:  # the local socket asks for the token alike
            (_, name), *_ = remote.routes.local_sockets.values()
            with connect(name, 10) as sock:
                sock.sendall(request_frame(b"\0" * 32, encode(Lookup(1, STATE, ("k1",)))))
                answer = decode(split_frames(bytearray(sock.recv(65536)))[0])
                assert answer.code == UNAUTHORIZED
        remote.close()
        # the command line
        cli = [sys.executable, "-m", "epochal", "query"]
        environment = {**os.environ, HOME_ENV: str(home)}
        out = subprocess.run([*cli, "queryable", STATE, "k1", "k2", "nokey", "--json", "--committed"],
                             capture_output=True, text=True, env=environment, timeout=60)
        assert out.returncode == 0, out.stderr
        document = json.loads(out.stdout)
        assert document["level"] == "read_committed" and document["checkpoint_id"] >= 1
        entries = {e["key"]: e for e in document["entries"]}
        assert entries["k1"]["found"] and entries["k1"]["value"][0] == "k1" and not entries["nokey"]["found"]
        out = subprocess.run([*cli, "queryable", STATE, "['k1']"], capture_output=True, text=True,
                             env=environment, timeout=60)
        assert out.returncode == 2 and "unhashable" in out.stderr
        out = subprocess.run([*cli, "queryable", "nope", "k1"], capture_output=True, text=True,
                             env=environment, timeout=60)
        assert out.returncode == 3 and "no queryable state 'nope'" in out.stderr
        out = subprocess.run([*cli, "queryable", STATE, "--scan", "--limit", "7"], capture_output=True, text=True,
                             env=environment, timeout=60)
        assert out.returncode == 0 and len(out.stdout.splitlines()) == KEYS
    finally:
        job.cancel()


@pytest.mark.parametrize("snapshot", ["fork", "thread"])
def test_committed_values_that_user_code_changes_in_place_are_those_of_their_checkpoint(make_env, tmp_path, home,
                                                                                       snapshot):
    """A value state whose list the job changes in place for every record: the committed view
    taken at a barrier (a copy of the key groups' dicts, or the thread snapshot's own copy) shares
    the lists with the live state, and without copy-on-write (state/copy_on_write.py) answered
    with counts of records after its checkpoint."""
    env = make_env(2)
    env.set_state_backend(snapshot=snapshot)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"), retained=10_000)
    in_place_job(env)
    job = env.execute_async("in-place")
    job.wait_until_running()
    try:
        with epochal.QueryableStateClient(job, timeout=30) as client:
            committed: list[tuple[int | None, dict]] = []
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                values = client.get_many(IN_PLACE, ALL_KEYS, level="read_committed")
                committed.append((client.checkpoint_id, values))
                time.sleep(0.02)
        checked = {c for c, values in committed if c is not None and values}
        assert len(checked) >= 3, committed
        for checkpoint_id, values in committed:
            if checkpoint_id is not None and values:
                assert values == checkpoint_values(job.checkpoint_path, checkpoint_id, uid=IN_PLACE,
                                                   state=IN_PLACE), f"checkpoint {checkpoint_id}"
    finally:
        job.cancel()


def test_queries_are_routed_right_after_a_restore_at_another_parallelism(make_env, tmp_path, home):
    first = start(make_env, tmp_path, "rescaled")
    with epochal.QueryableStateClient(first, timeout=30) as client:
        client.get_many(STATE, ALL_KEYS)
        time.sleep(1.5)
    first.cancel()
    checkpoint = latest_checkpoint(str(tmp_path / "checkpoints"), "rescaled")
    restored_id = int(checkpoint.rstrip("/").rsplit("-", 1)[1])
    restored = checkpoint_values(os.path.dirname(checkpoint), restored_id)
    second = start(make_env, tmp_path, "rescaled", parallelism=3, restore_from=checkpoint)
    try:
        with epochal.QueryableStateClient(second, timeout=30) as client:
            committed = client.get_many(STATE, ALL_KEYS, level="read_committed")  # waits until it serves
            routes = client.routes
            assert routes.states[STATE].parallelism == 3 and len(set(routes.states[STATE].workers.values())) == 3
            assert client.checkpoint_id is not None and client.checkpoint_id >= restored_id
            if client.checkpoint_id == restored_id:  # the restored state, before a new checkpoint completes
                assert committed == restored
            for key, value in client.get_many(STATE, ALL_KEYS).items():
                assert is_real(key, value) and value[1] >= restored[key][1]
    finally:
        second.cancel()


class Totals(epochal.KeyedProcessFunction):
    """A total and the last three values per key, queryable by the names of their descriptors."""

    def open(self, context):
        self.total = context.get_state(epochal.ValueStateDescriptor("total", default=0, queryable="totals"))
        self.recent = context.get_state(epochal.ListStateDescriptor("recent", queryable="recent"))

    def process_element(self, value, ctx):
        self.total.update(self.total.value() + value[1])
        recent = self.recent.get()[-2:] + [value[2]]
        self.recent.update(recent)
        yield value


def test_states_declared_queryable_by_their_descriptors(make_env, tmp_path, home):
    env = make_env(2)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
    env.from_generator(record, count=None, rate=1000).key_by(lambda r: r[0]).process(Totals()).uid("totals").discard()
    job = env.execute_async("descriptors")
    try:
        job.wait_until_running()
        with epochal.QueryableStateClient(job, timeout=30) as client:
            deadline = time.monotonic() + 30
            while client.get("totals", "k3", level="read_committed") is None:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            total = client.get("totals", "k3")
            recent = client.get("recent", "k3")
            assert total >= 1 and 1 <= len(recent) <= 3 and all(i % KEYS == 3 for i in recent)
            assert recent == sorted(recent) and recent[-1] < (total + 1) * KEYS
            assert client.get("totals", "k3", level="read_committed") <= client.get("totals", "k3")
    finally:
        job.cancel()


def test_a_worker_without_keyed_state_does_not_hold_the_routes_up(make_env, tmp_path, home):
    job = start(make_env, tmp_path, "narrow", parallelism=2, rate=1000, keyed_parallelism=1)
    try:
        with epochal.QueryableStateClient(job, timeout=30) as client:
            values = client.get_many(STATE, ALL_KEYS)
            assert values and all(is_real(k, v) for k, v in values.items())
            assert client.routes.states[STATE].parallelism == 1
    finally:
        job.cancel()


def five_keys(i: int) -> str:
    return f"k{i % 5}"


@pytest.mark.parametrize("safe_points", [True, False], ids=["safe-points", "without-safe-points"])
def test_read_uncommitted_is_never_torn_and_safe_points_are_why(make_env, tmp_path, home, safe_points):
    """A process function writes each update in two steps; answered between batches, no query
    ever sees the half-done value; answered on another thread at once, queries do."""
    env = make_env(2)
    env.from_generator(five_keys, count=None, rate=500).key_by(lambda k: k).process(
        TwoSteps(unsafe=not safe_points)).uid("pairs").discard()
    job = env.execute_async("torn")
    reads = torn = 0
    try:
        job.wait_until_running()
        with epochal.QueryableStateClient(job, timeout=30) as client:
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:
                for value in client.get_many("pair", [f"k{i}" for i in range(5)]).values():
                    reads += 1
                    torn += value[0] != value[1]
    finally:
        job.cancel()
    print(f"safe points {safe_points}: {torn} torn of {reads} reads")
    assert reads > 200
    if safe_points:
        assert torn == 0, f"{torn} of {reads} reads saw a value in the middle of its update"
    else:
        assert torn > 0, f"none of {reads} reads on another thread saw a half-done update"


def test_single_key_lookups_asked_without_waiting_are_pipelined_and_answered_each(make_env, tmp_path, home):
    """get_async from several threads at once: every future gets a real value of its own key (or
    the default of an absent one); lookups asked together go in shared requests, and the
    client's blocking calls still work beside them; close() fails what is not answered."""
    import concurrent.futures
    import threading

    job = start(make_env, tmp_path, "pipelined")
    try:
        client = epochal.QueryableStateClient(job, timeout=30)
        assert is_real("k1", client.get(STATE, "k1"))  # the job serves
        answers: list[tuple[str, object]] = []
        lock = threading.Lock()

        def ask(thread: int) -> None:
            futures = [(key, client.get_async(STATE, key, default="none"))
                       for key in [f"k{(thread * 7 + i) % KEYS}" for i in range(500)] + ["absent"]]
            done = [(key, future.result(timeout=30)) for key, future in futures]
            with lock:
                answers.extend(done)

        threads = [threading.Thread(target=ask, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        blocking = [client.get(STATE, f"k{i % KEYS}") for i in range(50)]  # the client's own thread
        for thread in threads:
            thread.join(60)
        assert len(answers) == 4 * 501 and all(is_real(f"k{i % KEYS}", v) for i, v in enumerate(blocking))
        assert all(value == "none" if key == "absent" else is_real(key, value) for key, value in answers)
        requests = next(client._pipeline.client._ids) - 1  # one id per request to one worker
        assert requests < len(answers) / 2, f"{requests} requests for {len(answers)} lookups: not pipelined"
        with pytest.raises(QueryKeyTypeError, match="unhashable"):
            client.get_async(STATE, ["k1"])
        failing = client.get_async("nope", "k1")
        with pytest.raises(UnknownQueryableStateError):
            failing.result(timeout=30)
        client.close()
        after = client.get_async(STATE, "k1")  # a new pipeline after close: still usable
        assert is_real("k1", after.result(timeout=30))
        pending = [client.get_async(STATE, f"k{i % KEYS}") for i in range(2000)]
        client.close()  # answered or failed, none left waiting
        concurrent.futures.wait(pending, timeout=30)
        assert all(f.done() for f in pending)
        assert all(isinstance(f.exception(), epochal.QueryableStateError) for f in pending if f.exception())
    finally:
        job.cancel()
