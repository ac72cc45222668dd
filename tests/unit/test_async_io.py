"""Async I/O (epochal.runtime.operators.async_io, epochal.api.async_io): output order, the capacity bound,
timeouts, retries, watermarks, and in-flight requests in checkpoints, on the operator harness
against fake services whose answers the tests release one by one."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import Counter, defaultdict

import pytest

import epochal
from epochal.api.async_io import async_flat_map, async_map
from epochal.errors import PlanError
from epochal.runtime.operators.async_io import IN_FLIGHT_STATE, AsyncTimeoutError, AsyncWaitOperator
from epochal.runtime.operators.inband import CheckpointBarrier, EndOfPartition, Watermark
from epochal.testing import OperatorHarness, run_locally

MODES = ["async", "thread"]


class Service:
    """A fake lookup service: record ``r`` answers ``r * 10`` once the test releases it (or
    after ``latency`` seconds); counts calls and the calls running at once."""

    def __init__(self, latency: float | None = None) -> None:
        self.latency = latency
        self.lock = threading.Lock()
        self.gates: dict[object, threading.Event] = defaultdict(threading.Event)
        self.all_open = False
        self.calls: Counter[object] = Counter()
        self.answered: list[object] = []
        self.running = 0
        self.max_running = 0

    def gate(self, record: object) -> threading.Event:
        with self.lock:
            gate = self.gates[record]
            if self.all_open:
                gate.set()
            return gate

    def release(self, *records: object) -> None:
        for record in records:
            self.gate(record).set()

    def open_all(self) -> None:
        with self.lock:
            self.all_open = True
            for gate in self.gates.values():
                gate.set()

    def _enter(self, record: object) -> None:
        with self.lock:
            self.calls[record] += 1
            self.running += 1
            self.max_running = max(self.max_running, self.running)

    def _leave(self, record: object) -> None:
        with self.lock:
            self.running -= 1
            self.answered.append(record)

    def fn(self, mode: str):
        """The lookup as an ``async def`` or a plain function (closures: shared by harness copies)."""
        if mode == "async":
            async def lookup(record):
                self._enter(record)
                try:
                    if self.latency is not None:
                        await asyncio.sleep(self.latency)
                    else:
                        gate = self.gate(record)
                        while not gate.is_set():
                            await asyncio.sleep(0.0005)
                finally:
                    self._leave(record)
                return record * 10
            return lookup

        def lookup_sync(record):
            self._enter(record)
            try:
                if self.latency is not None:
                    time.sleep(self.latency)
                else:
                    assert self.gate(record).wait(5.0), "the test never released this record"
            finally:
                self._leave(record)
            return record * 10
        return lookup_sync

    def wait_answered(self, *records: object) -> None:
        deadline = time.monotonic() + 5.0
        while not set(records) <= set(self.answered):
            assert time.monotonic() < deadline, f"the service never answered {records}"
            time.sleep(0.0005)


@pytest.fixture
def service():
    service = Service()
    yield service
    service.open_all()  # no thread of a test stays blocked


def harness_for(fn, name: str = "Enrich", **options) -> OperatorHarness:
    harness_options = {k: options.pop(k) for k in ("parallelism", "subtask_index") if k in options}
    return OperatorHarness(AsyncWaitOperator(fn, **options), name=name, **harness_options)


def poll_until(harness: OperatorHarness, count: int) -> list:
    """Let the worker's polling run until ``count`` records were emitted."""
    out: list = []
    deadline = time.monotonic() + 5.0
    while len(out) < count:
        assert time.monotonic() < deadline, f"only {out} emitted, expected {count} records"
        out += harness.set_processing_time(time.time())
        time.sleep(0.0005)
    assert len(out) == count, out
    return out


def records_of(events: list) -> list:
    """The records among emitted records and events."""
    return [e for e in events if not isinstance(e, (Watermark, CheckpointBarrier, EndOfPartition))]


def before_barrier(harness: OperatorHarness) -> list:
    """The records the harness emitted before its first checkpoint barrier."""
    events = harness.events
    end = next(i for i, e in enumerate(events) if isinstance(e, CheckpointBarrier))
    return records_of(events[:end])


# ---------------------------------------------------------------------- order
@pytest.mark.parametrize("mode", MODES)
def test_ordered_results_leave_in_input_order(service, mode):
    with harness_for(service.fn(mode), capacity=10, ordered=True) as harness:
        assert harness.process(0, 1, 2, 3, 4) == []
        service.release(4, 3)
        service.wait_answered(4, 3)
        time.sleep(0.01)
        assert harness.set_processing_time(time.time()) == []  # 3 and 4 wait behind 0
        service.release(0)
        assert poll_until(harness, 1) == [0]
        service.release(2, 1)
        assert poll_until(harness, 4) == [10, 20, 30, 40]
        assert harness.end_input() == []


@pytest.mark.parametrize("mode", MODES)
def test_unordered_results_leave_as_they_complete(service, mode):
    with harness_for(service.fn(mode), capacity=10, ordered=False) as harness:
        assert harness.process(0, 1, 2, 3, 4) == []
        for record in (4, 3, 0, 2):
            service.release(record)
            assert poll_until(harness, 1) == [record * 10]
        service.release(1)
        assert harness.end_input() == [10]
        assert harness.output == [40, 30, 0, 20, 10]


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_no_result_crosses_a_watermark(service, mode, ordered):
    with harness_for(service.fn(mode), capacity=10, ordered=ordered) as harness:
        harness.process(0, 1, 2, 3)
        if not ordered:
            service.release(2)
            assert poll_until(harness, 1) == [20]
        releaser = threading.Timer(0.02, service.release, args=(3, 1, 0, 2))
        releaser.start()
        fired = harness.watermark(100)  # waits for every request before it
        releaser.join()
        assert sorted(fired) == ([0, 10, 20, 30] if ordered else [0, 10, 30])
        harness.process(4, 5)
        service.release(5, 4)
        harness.end_input()
        at = harness.events.index(Watermark(100))
        before, after = records_of(harness.events[:at]), records_of(harness.events[at + 1:])
        assert sorted(before) == [0, 10, 20, 30] and sorted(after) == [40, 50]
        if ordered:
            assert before + after == [0, 10, 20, 30, 40, 50]


# ---------------------------------------------------------------------- capacity, end of input
@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_capacity_bounds_the_requests_in_flight(mode, ordered):
    service = Service(latency=0.002)
    with harness_for(service.fn(mode), capacity=3, ordered=ordered) as harness:
        first = harness.process(*range(30))  # blocks while 3 are in flight, emitting what completes
        assert len(first) >= 27
        rest = harness.end_input()  # drains
        out = first + rest
        assert (out if ordered else sorted(out)) == [r * 10 for r in range(30)]
        assert service.max_running <= 3
        assert harness.counters() == {"async_requests": 30, "async_retries": 0, "async_timeouts": 0,
                                      "async_max_in_flight": 3}
        assert harness.operator.next_processing_time() is None  # nothing in flight: the worker may sleep


@pytest.mark.parametrize("mode", MODES)
def test_end_input_waits_for_every_request(service, mode):
    with harness_for(service.fn(mode), capacity=50, ordered=False) as harness:
        assert harness.process(*range(20)) == []
        assert harness.operator.next_processing_time() is not None  # polled while in flight
        threading.Timer(0.02, service.open_all).start()
        assert sorted(harness.end_input()) == [r * 10 for r in range(20)]


# ---------------------------------------------------------------------- timeouts, failures, retries
@pytest.mark.parametrize("mode", MODES)
def test_a_timeout_fails_naming_the_operator_and_the_record(service, mode):
    with harness_for(service.fn(mode), capacity=5, timeout=0.05) as harness:
        service.release(1)
        harness.process("slow", 1)
        started = time.monotonic()
        with pytest.raises(AsyncTimeoutError, match=r"operator 'Enrich'.*record 'slow'.*0\.05 s.*on_timeout"):
            harness.end_input()
        assert time.monotonic() - started < 2.0
        assert harness.counters()["async_timeouts"] == 1


@pytest.mark.parametrize("mode", MODES)
def test_on_timeout_gives_a_fallback_result_in_order(service, mode):
    with harness_for(service.fn(mode), capacity=5, timeout=0.05, on_timeout=lambda r: ("fallback", r)) as harness:
        service.release(1, 2)
        harness.process(1, "slow", 2)
        harness.end_input()
        assert harness.output == [10, ("fallback", "slow"), 20]
        assert harness.counters()["async_timeouts"] == 1


def flaky(failures: int, mode: str):
    """A lookup that raises on the first ``failures`` attempts of every record."""
    attempts: Counter[int] = Counter()
    lock = threading.Lock()

    def attempt(record):
        with lock:
            attempts[record] += 1
            if attempts[record] <= failures:
                raise ConnectionError(f"service unavailable ({record})")
        return record * 10

    if mode == "async":
        async def lookup(record):
            await asyncio.sleep(0)
            return attempt(record)
        return lookup, attempts
    return attempt, attempts


@pytest.mark.parametrize("mode", MODES)
def test_retries_with_backoff_hide_transient_failures(mode):
    fn, attempts = flaky(2, mode)
    with harness_for(fn, capacity=4, retries=2, retry_backoff=0.001) as harness:
        harness.process(*range(6))
        harness.end_input()
        assert harness.output == [r * 10 for r in range(6)]
        assert attempts == Counter({r: 3 for r in range(6)})
        assert harness.counters()["async_retries"] == 12


@pytest.mark.parametrize("mode", MODES)
def test_a_failing_call_fails_with_the_users_exception(mode):
    fn, attempts = flaky(2, mode)
    with harness_for(fn, capacity=4, retries=1, retry_backoff=0.001) as harness:
        harness.process(7)
        with pytest.raises(ConnectionError, match=r"service unavailable \(7\)") as raised:
            harness.end_input()
        assert any("operator 'Enrich'" in note and "record 7" in note and "attempt 2 of 2" in note
                   for note in raised.value.__notes__)
        assert attempts[7] == 2


def test_a_plain_function_returning_a_coroutine_is_refused_clearly():
    async def lookup(record):
        return record

    with harness_for(lambda record: lookup(record)) as harness:
        harness.process(1)
        with pytest.raises(TypeError, match="must be declared 'async def'"):
            harness.end_input()


class Client:
    """A function object with async open/close hooks, as an HTTP client would have."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.loop: asyncio.AbstractEventLoop | None = None

    async def open(self, context):
        self.loop = asyncio.get_running_loop()
        self.events.append(f"open {context.operator_name}")

    async def __call__(self, record):
        assert asyncio.get_running_loop() is self.loop  # requests run on the loop open ran on
        return {"id": record, "name": f"user-{record}"}

    async def close(self):
        self.events.append("close")


def test_open_and_close_hooks_run_on_the_event_loop():
    client = Client()
    harness = harness_for(client, capacity=2)
    harness.process(1, 2, 3)
    harness.end_input()
    assert harness.output == [{"id": r, "name": f"user-{r}"} for r in (1, 2, 3)]
    harness.close()
    assert client.events == ["open Enrich", "close"]


# ---------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize(("mode", "ordered"), [("async", True), ("thread", False), ("thread", True)])
def test_a_snapshot_keeps_unemitted_records_and_a_restore_reissues_them_exactly_once(service, mode, ordered):
    harness = harness_for(service.fn(mode), capacity=8, ordered=ordered)
    harness.process(*range(8))
    service.release(0, 1, 5)
    emitted = poll_until(harness, 2 if ordered else 3)
    if ordered:
        assert emitted == [0, 10]
    else:
        assert sorted(emitted) == [0, 10, 50]
    if ordered:
        service.wait_answered(5)  # complete, but behind 2: not emitted, so in the snapshot
    snapshot = harness.snapshot(1)
    expected_state = [2, 3, 4, 5, 6, 7] if ordered else [2, 3, 4, 6, 7]
    assert harness.operator_state(IN_FLIGHT_STATE) == expected_state
    service.open_all()  # the old run goes on after the barrier, then "fails": its later output is lost
    harness.end_input()
    harness.close()

    restored = harness.restored_from(snapshot)
    assert restored.operator_state(IN_FLIGHT_STATE) == []  # re-issued in open
    restored.process(8, 9)  # what upstream replays after the barrier
    restored.end_input()
    union = before_barrier(harness) + restored.output
    oracle = [r * 10 for r in range(10)]
    assert (union if ordered else sorted(union)) == oracle
    assert restored.counters()["async_requests"] == len(expected_state) + 2
    assert all(service.calls[r] == 2 for r in expected_state)  # calls are at-least-once, results exactly once
    restored.close()


@pytest.mark.parametrize(("new_parallelism", "capacity"), [(3, 10), (1, 4)])
@pytest.mark.parametrize("ordered", [True, False])
def test_in_flight_records_are_redistributed_on_a_rescaled_restore(service, ordered, new_parallelism, capacity):
    old = [harness_for(service.fn("async"), capacity=10, ordered=ordered, parallelism=2, subtask_index=i)
           for i in range(2)]
    old[0].process(*range(10))
    old[1].process(*range(10, 20))
    service.release(0, 1, 2, 7, 10, 11, 15)
    emitted = poll_until(old[0], 3 if ordered else 4) + poll_until(old[1], 2 if ordered else 3)
    service.wait_answered(7, 15)
    snapshots = [h.snapshot(1) for h in old]
    in_flight = [h.operator_state(IN_FLIGHT_STATE) for h in old]
    assert sorted(in_flight[0] + in_flight[1] + [e // 10 for e in emitted]) == list(range(20))
    service.open_all()
    for h in old:
        h.end_input()
        h.close()

    restored_outputs = []
    for index in range(new_parallelism):
        operator = AsyncWaitOperator(service.fn("thread"), capacity=capacity, ordered=ordered)
        harness = old[0].restored_from(*snapshots, parallelism=new_parallelism, subtask_index=index,
                                       operator=operator)
        harness.process(20 + index)  # new input after the restore comes after the restored records
        harness.end_input()
        output = harness.output
        if ordered:  # each restored part keeps the old input order
            assert output == sorted(output) and output[-1] == (20 + index) * 10
        if new_parallelism == 1:  # more restored than capacity: the rest is issued as slots free
            assert harness.counters()["async_max_in_flight"] == capacity
            restored_records = [r // 10 for r in output]
            everything = in_flight[0] + in_flight[1] + [20]
            if ordered:
                assert restored_records == everything
            else:
                assert sorted(restored_records) == sorted(everything)
        restored_outputs += output
        harness.close()
    union = before_barrier(old[0]) + before_barrier(old[1]) + restored_outputs
    assert Counter(union) == Counter(r * 10 for r in [*range(20), *range(20, 20 + new_parallelism)])


# ---------------------------------------------------------------------- API
async def enrich(record):
    await asyncio.sleep(0.001 * (record % 3))
    return (record, record * record)


async def explode(record):
    return [record] * (record % 3)


def test_async_map_adds_one_node_and_runs_locally():
    env = epochal.Environment(2)
    stream = async_map(env.from_collection(list(range(40))), enrich, capacity=5, timeout=2.0, ordered=False)
    node = stream.node
    assert (node.operation, node.name, node.functions) == ("async_map", "AsyncMap", [enrich, None])
    operator = node.operator
    assert isinstance(operator, AsyncWaitOperator)
    assert (operator.capacity, operator.timeout, operator.ordered, operator.flat) == (5, 2.0, False, False)
    out = stream.collect()
    run_locally(env, "async enrichment")
    assert sorted(out.get()) == [(r, r * r) for r in range(40)]


def test_async_flat_map_keeps_order_on_one_subtask():
    env = epochal.Environment(1)
    stream = async_flat_map(env.from_collection(list(range(12))), explode, capacity=3)
    assert (stream.node.operation, stream.node.name) == ("async_flat_map", "AsyncFlatMap")
    out = stream.collect()
    run_locally(env)
    assert out.get() == [r for r in range(12) for _ in range(r % 3)]


@pytest.mark.parametrize(("options", "message"), [
    ({"fn": 3}, "async_map\\(\\) takes a function"),
    ({"capacity": 0}, "async_map capacity must be a whole number > 0, got 0"),
    ({"capacity": 2.5}, "async_map capacity must be a whole number"),
    ({"capacity": True}, "async_map capacity must be a whole number"),
    ({"timeout": 0}, "async_map timeout \\(seconds\\) must be a number > 0"),
    ({"timeout": math.nan}, "NaN"),
    ({"timeout": "10"}, "must be a number"),
    ({"ordered": "yes"}, "ordered must be True or False"),
    ({"on_timeout": "fallback"}, "on_timeout=...\\) takes a function"),
    ({"retries": -1}, "retries must be a whole number >= 0"),
    ({"retry_backoff": -0.5}, "retry_backoff \\(seconds\\) must be a number >= 0"),
])
def test_async_map_refuses_bad_arguments_at_the_call(options, message):
    env = epochal.Environment(1)
    arguments = {"fn": enrich, **options}
    with pytest.raises(PlanError, match=message):
        async_map(env.from_collection([1]), **arguments)


def test_async_map_needs_a_stream():
    with pytest.raises(PlanError, match="takes a DataStream first"):
        async_map([1, 2], enrich)  # type: ignore[arg-type]
