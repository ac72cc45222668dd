"""Batches sized by time as well as count (EngineConfig.batch_time): the sizing machine fed
measured times, the sizes a consumer announces with its credit, and a producer cutting its
batches to them. The slow-operator benchmark and tests/integration/test_first_hour.py measure
the effect on real Spark (checkpoint spacing, latency)."""

from __future__ import annotations

import pytest

from epochal.config import EngineConfig
from epochal.dataflow.dataplane.batch_sizing import GROWTH, INITIAL_SIZE, BatchSizer, output_capacity
from epochal.dataflow.dataplane.chains import ChainRunner, EdgeOutput
from epochal.dataflow.dataplane.channels import InputChannel, OutputChannel
from epochal.dataflow.dataplane.datapath import DataPath
from epochal.dataflow.dataplane.tasks import Subtask
from epochal.errors import PlanError
from epochal.plan.partitioners import BroadcastPartitioner, ForwardPartitioner, RebalancePartitioner
from epochal.runtime.operators.base import Operator


def feed(sizer: BatchSizer, cost: float, batches: int) -> list[int]:
    """Sizes after each of ``batches`` batches of the current size, each record costing ``cost`` s."""
    sizes = []
    for _ in range(batches):
        sizes.append(sizer.observe(sizer.size, sizer.size * cost))
    return sizes


def test_a_fast_operator_grows_to_the_count_limit_and_stays_there():
    sizer = BatchSizer(1024, 0.1)
    assert sizer.size == INITIAL_SIZE
    assert feed(sizer, 1e-6, 5) == [128, 512, 1024, 1024, 1024]  # at most x4 a batch


def test_a_slow_operator_gets_batches_of_about_the_target_time():
    source = BatchSizer(1024, 0.1)  # a source's read: 0.1 s of its chain's work
    assert feed(source, 0.002, 6)[-1] == 50
    channel = BatchSizer(1024, 0.1 / 8)  # a consumer with 8 credits: 0.1 s over its channel's batches
    assert feed(channel, 0.002, 6)[-1] == 6
    very_slow = BatchSizer(1024, 0.1)
    assert feed(very_slow, 1.0, 2) == [1, 1]  # never below one record


def test_a_slow_down_shrinks_at_once_and_a_single_hiccup_only_part_of_the_way():
    sizer = BatchSizer(1024, 0.1)
    feed(sizer, 1e-5, 6)
    assert sizer.size == 1024
    sizer.observe(1024, 1024 * 1e-3)  # one batch 100x slower (a fork, the machine paused)
    assert 300 < sizer.size < 1024  # moving average: not down to the 100 records that batch alone says
    assert feed(sizer, 1e-5, 8)[-1] == 1024  # back within a few batches
    feed(sizer, 2e-3, 12)
    assert sizer.size == 50  # a lasting slow-down: the target's worth
    assert sizer.observe(0, 5.0) == 50  # an empty read says nothing


def test_without_a_target_the_size_is_the_count_limit():
    sizer = BatchSizer(1024, None)
    assert sizer.size == 1024 and feed(sizer, 1.0, 3) == [1024] * 3
    assert EngineConfig(batch_time=None).batch_time is None
    with pytest.raises(PlanError, match="batch_time"):
        EngineConfig(batch_time=0)


class _Transport:
    def __init__(self):
        self.sent = []

    def send_batch(self, channel, batch):
        self.sent.append((channel, list(batch)))

    def send_event(self, channel, event):
        self.sent.append((channel, event))


def channels(count, credit=100, size=INITIAL_SIZE):
    transport = _Transport()
    return transport, [OutputChannel(i, credit, transport, batch_size=size) for i in range(count)]


def test_output_capacity_sums_a_shuffles_channels_and_takes_a_broadcasts_smallest():
    _, chans = channels(3)
    for channel, size in zip(chans, (10, 20, 30), strict=True):
        channel.add_credit(0, size)
    assert output_capacity([EdgeOutput(RebalancePartitioner(), chans, 1024)], 1024) == 60
    assert output_capacity([EdgeOutput(BroadcastPartitioner(), chans, 1024)], 1024) == 10
    assert output_capacity([EdgeOutput(ForwardPartitioner(), chans[2:], 1024),
                            EdgeOutput(RebalancePartitioner(), chans, 1024)], 1024) == 30
    assert output_capacity([], 1024) == 1024  # a sink


def test_a_producer_cuts_its_batches_to_what_the_consumer_announced():
    transport, [channel] = channels(1, size=4)
    output = EdgeOutput(ForwardPartitioner(), [channel], 1024)
    output.emit(list(range(10)))
    assert transport.sent == [(0, [0, 1, 2, 3]), (0, [4, 5, 6, 7])] and output.buffers == [[8, 9]]
    channel.add_credit(1, 3)  # the consumer wants 3 from now on
    output.emit([10])
    assert transport.sent[-1] == (0, [8, 9, 10]) and output.buffers == [[]]
    channel.add_credit(1, 0)  # a credit without a size keeps the size
    assert channel.batch_size == 3
    output.emit(list(range(3)))
    assert transport.sent[-1] == (0, [0, 1, 2])
    bounded = EdgeOutput(ForwardPartitioner(), [OutputChannel(1, 10, transport, batch_size=500)], 2)
    bounded.emit([1, 2, 3])  # and never more than batch_size
    assert transport.sent[-1] == (1, [1, 2]) and bounded.buffers == [[3]]


class _Sleepy(Operator):
    """Costs ``cost`` seconds per record (measured by the data path with its own clock)."""

    def __init__(self, clock, cost):
        self.clock, self.cost = clock, cost

    def process_batch(self, batch):
        self.clock.now += self.cost * len(batch)
        return batch


class _Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_a_consumer_announces_its_size_with_every_credit_capped_by_its_own_outputs(monkeypatch):
    from epochal.dataflow.dataplane import datapath

    clock = _Clock()
    monkeypatch.setattr(datapath, "perf_counter", clock)
    subtask = Subtask(1, 0, 1, "slow")
    subtask.head = ChainRunner("slow", "slow", _Sleepy(clock, 0.002))
    subtask.runners = [subtask.head]
    subtask.sizer = BatchSizer(1024, 0.1 / 8)
    returned = []
    channel = InputChannel(7, subtask, lambda credit, size: returned.append((credit, size)))
    subtask.inputs = [channel]
    path = DataPath(lambda event: None)
    path.in_channels = {7: channel}
    for _ in range(5):
        path.deliver_local(7, True, list(range(subtask.wanted_batch_size())))
        path.run_inputs(1)
    assert returned[-1] == (1, 6)  # 0.1 s over 8 credits at 2 ms a record
    path.subtasks = [subtask]
    assert path.counters()["batch_sizes"] == {"slow#0": 6}  # (in the worker's metrics)
    # its own consumer wants 2 per batch: it asks for no more than its output takes at once
    _, [out] = channels(1, size=2)
    subtask.outputs = [EdgeOutput(ForwardPartitioner(), [out], 1024)]
    path.deliver_local(7, True, [1])
    path.run_inputs(1)
    assert returned[-1] == (1, 2)
    subtask.sizer = None  # count only: no size goes back
    path.deliver_local(7, True, [1])
    path.run_inputs(1)
    assert returned[-1] == (1, 0) and GROWTH == 4


def test_a_source_reads_its_timed_size_but_no_more_than_its_outputs_take():
    source = Subtask(0, 0, 1, "source")
    assert source.read_size(1024) == 1024  # count only
    source.sizer = BatchSizer(1024, 0.1)
    feed(source.sizer, 0.002, 6)  # its chain costs 2 ms a record
    assert source.read_size(1024) == 50
    _, two = channels(2, size=10)  # a rebalance into two consumers that want 10 each
    source.outputs = [EdgeOutput(RebalancePartitioner(), two, 1024)]
    assert source.read_size(1024) == 20
    assert source.read_size(8) == 8  # and never more than the caller's limit
