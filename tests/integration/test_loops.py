"""Loops (iterate/close_with) on the real runtime: results, termination, several loops, keyed
state and shuffles inside loop bodies, snapshots holding exactly the in-transit loop records,
and a restore of a loop's log with another parallelism."""

from __future__ import annotations

import collections
import time

import pytest

import epochal
from epochal.connectors.files import ExactlyOnceFileSink, read_committed_lines
from epochal.runtime.operators.iteration import LOG_STATE
from epochal.state.descriptors import ValueStateDescriptor
from epochal.state.snapshot import RestoreSource
from epochal.state.storage import CheckpointStorage
from tests.collatz import collatz_step, collatz_steps


class CollatzStep(epochal.ProcessFunction):
    """One Collatz step per trip around the loop, with the progress of each origin in keyed
    state: what lets a test compare a snapshot's state with its back-edge log."""

    def open(self, context):
        self.steps = ValueStateDescriptor("steps", default=0)
        self.done = ValueStateDescriptor("done", default=False)

    def process_element(self, value, ctx):
        steps = ctx.get_state(self.steps)
        if steps.value() != value[2]:
            raise AssertionError(f"origin {value[0]}: state says {steps.value()} steps, record {value[2]}")
        origin, n, count = collatz_step(value)
        steps.update(count)
        if n == 1:
            ctx.get_state(self.done).update(True)
        yield origin, n, count


def collatz_loop(source, body=None, keyed=True):
    loop = source.map(lambda n: (n, n, 0)).iterate()
    keyed_input = loop.key_by(lambda s: s[0])
    stepped = keyed_input.process(body).uid("collatz-body") if body else keyed_input.map(collatz_step)
    loop.close_with(stepped.filter(lambda s: s[1] != 1), key_by=(lambda s: s[0]) if keyed else None)
    return stepped.filter(lambda s: s[1] == 1).map(lambda s: (s[0], s[2]))


@pytest.mark.parametrize("parallelism,checkpoints", [(1, False), (2, False), (3, True), (4, True), (2, True)])
def test_a_bounded_loop_ends_by_itself_with_the_right_answer(make_env, tmp_path, parallelism, checkpoints):
    env = make_env(parallelism)
    if checkpoints:
        env.enable_checkpointing(0.1, storage=str(tmp_path))
    out = collatz_loop(env.from_collection(list(range(2, 5000)))).collect()
    env.execute(f"collatz-p{parallelism}", timeout=120)
    assert sorted(out.get()) == [(n, collatz_steps(n)) for n in range(2, 5000)]


def test_several_loops_with_fan_out_and_keyed_state_in_the_body(make_env):
    """Two loops in a row: the first splits every n into two halves until they are 1 (so a
    record becomes many), the second counts down each leaf count with a running sum in keyed state."""
    env = make_env(2)
    numbers = env.from_collection(list(range(1, 400)))
    split = numbers.map(lambda n: (n, n)).iterate()
    halves = split.flat_map(lambda s: [(s[0], s[1] // 2), (s[0], s[1] - s[1] // 2)] if s[1] > 1 else [s])
    split.close_with(halves.filter(lambda s: s[1] > 1))
    leaves = halves.filter(lambda s: s[1] == 1).key_by(lambda s: s[0]).count()  # rolling leaves per n
    finals = leaves.filter(lambda kv: kv[1] == kv[0])  # all n leaves of n arrived
    countdown = finals.map(lambda kv: (kv[0], kv[1])).iterate()
    step = countdown.key_by(lambda kv: kv[0] % 7).map(lambda kv: (kv[0], kv[1] - 1))
    countdown.close_with(step.filter(lambda kv: kv[1] > 0), key_by=lambda kv: kv[0])
    trips = step.key_by(lambda kv: kv[0]).count()
    out = step.filter(lambda kv: kv[1] == 0).map(lambda kv: kv[0]).collect()
    trip_counts = trips.collect()
    env.execute("two-loops", timeout=120)
    assert sorted(out.get()) == list(range(1, 400))
    last = dict(trip_counts.get() and sorted(trip_counts.get(), key=lambda kv: kv[1]))
    assert last == {n: n for n in range(1, 400)}


def test_loops_in_parallel_branches_and_a_two_input_head(make_env, tmp_path):
    env = make_env(2)
    env.enable_checkpointing(0.1, storage=str(tmp_path))
    a = collatz_loop(env.from_collection(list(range(2, 1500))))
    b = collatz_loop(env.from_collection(list(range(1500, 3000))), keyed=False)
    out = a.union(b).collect()
    env.execute("parallel-loops", timeout=120)
    assert sorted(out.get()) == [(n, collatz_steps(n)) for n in range(2, 3000)]


def test_snapshots_hold_exactly_the_records_in_transit_inside_the_loop(make_env, tmp_path):
    """At every completed checkpoint, each origin the loop body has seen is either finished or has
    exactly one record in the back-edge log, and that record's step count equals the body's state."""
    env = make_env(2)
    env.enable_checkpointing(0.1, storage=str(tmp_path), retained=1000)
    origins = env.from_generator(lambda i: i + 2, count=20_000, rate=10_000)
    loop = origins.map(lambda n: (n, n, 0)).iterate().uid("collatz-head")
    stepped = loop.key_by(lambda s: s[0]).process(CollatzStep()).uid("collatz-body")
    loop.close_with(stepped.filter(lambda s: s[1] != 1), key_by=lambda s: s[0])
    stepped.filter(lambda s: s[1] == 1).discard()
    result = env.execute("collatz-snapshots", timeout=120)
    storage = CheckpointStorage(result.checkpoint_path)
    checked = with_log = 0
    for stats in result.checkpoints:
        if stats["status"] != "completed":
            continue
        checkpoint = stats["checkpoint_id"]
        restore = RestoreSource(storage, checkpoint, storage.read_metadata(checkpoint))
        everything = range(env.max_parallelism)
        steps, done = {}, set()
        for _, states in restore.keyed_groups("collatz-body", everything):
            steps.update(states.get("steps", {}))
            done.update(k for k, v in states.get("done", {}).items() if v)
        logged = [record for _, states in restore.keyed_groups("collatz-head", everything)
                  for record in states.get(LOG_STATE, {}).get(0, [])]
        assert len(logged) == stats["loop_log_records"]
        in_transit = collections.Counter(record[0] for record in logged)
        assert all(count == 1 for count in in_transit.values()), "an origin is twice in the log"
        assert set(in_transit) == set(steps) - done, f"checkpoint {checkpoint}: log and state disagree"
        assert all(steps[origin] == count for origin, _, count in logged)
        checked += 1
        with_log += bool(logged)
    assert checked >= 5 and with_log >= 3


def test_a_loop_log_restores_with_another_parallelism(make_env, tmp_path):
    """Stop a loop while records circulate, then restore its checkpoint (log per key group) with
    parallelism 3 instead of 2: the committed output is still exactly the oracle."""
    out = tmp_path / "out"
    storage = str(tmp_path / "checkpoints")

    def build(parallelism):
        env = make_env(parallelism)
        env.enable_checkpointing(0.1, storage=storage)
        origins = env.from_generator(lambda i: i + 2, count=30_000, rate=6_000).uid("origins")
        steps = collatz_loop(origins)
        steps.sink_to(ExactlyOnceFileSink(str(out), format=lambda s: f"{s[0]} {s[1]}"), name="sink")
        return env

    client = build(2).execute_async("collatz-rescale")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        logged = [c for c in client.checkpoint_stats()
                  if c["status"] == "completed" and c.get("loop_log_records", 0) > 0]
        if len(logged) >= 2:
            break
        time.sleep(0.05)
    client.cancel(timeout=60)
    assert logged, "no checkpoint with in-transit loop records was taken"
    result = build(3).execute("collatz-rescale", restore_from=client.checkpoint_path, timeout=120)
    assert result.completed_checkpoints >= 1
    committed = collections.Counter(read_committed_lines(str(out)))
    assert committed == collections.Counter(f"{n} {collatz_steps(n)}" for n in range(2, 30_002))
