"""Credit-based flow control and partitioners, on their own (no sockets, no Spark)."""

from __future__ import annotations

import socket
import threading

import pytest

from epochal.dataflow.dataplane.channels import OutputChannel
from epochal.plan.keygroups import key_group_of, subtask_for_key_group
from epochal.plan.partitioners import BroadcastPartitioner, CustomPartitioner, KeyGroupPartitioner, RebalancePartitioner
from epochal.runtime.host import frames as protocol


class RecordingTransport:
    """Collects what an output channel hands to its transport, in order."""

    def __init__(self):
        self.sent = []

    def send_batch(self, channel, batch):
        self.sent.append(("batch", batch))

    def send_event(self, channel, event):
        self.sent.append(("event", event))


def test_no_credit_means_batches_wait_and_events_keep_their_place():
    transport = RecordingTransport()
    channel = OutputChannel(0, credit=2, transport=transport)
    for i in range(4):
        channel.send_batch([i])
    channel.send_event("end")
    assert transport.sent == [("batch", [0]), ("batch", [1])]
    assert channel.backlogged
    channel.add_credit(1)
    assert transport.sent[-1] == ("batch", [2])
    channel.add_credit(5)
    assert transport.sent[-2:] == [("batch", [3]), ("event", "end")]
    assert not channel.backlogged
    assert channel.credit == 4


def test_event_without_backlog_goes_out_at_once():
    transport = RecordingTransport()
    channel = OutputChannel(0, credit=0, transport=transport)
    channel.send_event("end")
    assert transport.sent == [("event", "end")]


def test_rebalance_is_round_robin_across_batches():
    partitioner = RebalancePartitioner()
    first = partitioner.split(list(range(5)), 3)
    second = partitioner.split(list(range(5, 9)), 3)
    assert first == [[0, 3], [1, 4], [2]]
    assert second == [[6], [7], [5, 8]]  # continues at target 2


def test_broadcast_and_custom():
    assert BroadcastPartitioner().split([1, 2], 3) == [[1, 2]] * 3
    custom = CustomPartitioner(lambda key, n: key % n, lambda r: r)
    assert custom.split([0, 1, 2, 3], 2) == [[0, 2], [1, 3]]
    bad = CustomPartitioner(lambda key, n: 7, lambda r: r)
    with pytest.raises(ValueError, match="custom partitioner returned 7"):
        bad.split([1], 2)


def test_key_group_partitioner_sends_each_key_to_its_owner():
    partitioner = KeyGroupPartitioner(lambda r: r[0], 128)
    records = [(f"k{i}", i) for i in range(200)]
    parts = partitioner.split(records, 3)
    for index, part in enumerate(parts):
        for key, _ in part:
            assert subtask_for_key_group(key_group_of(key, 128), 3, 128) == index
    assert sorted(sum(parts, [])) == sorted(records)


def test_frames_round_trip_and_hello_checks_the_token():
    left, right = socket.socketpair()
    token = b"t" * protocol.TOKEN_BYTES
    protocol.send_frame(left, protocol.HELLO, 0, protocol.hello_payload(token, 3))
    big = protocol.dumps(list(range(100_000)))
    sender = threading.Thread(target=protocol.send_frame, args=(left, protocol.DATA, 9, big))
    sender.start()  # larger than the socket buffer: the reader must drain it concurrently
    stream = right.makefile("rb")
    assert protocol.check_hello(protocol.read_frame(stream), token) == 3
    assert protocol.read_frame(stream) == (protocol.DATA, 9, big)
    sender.join()
    protocol.send_frame(left, protocol.HELLO, 0, protocol.hello_payload(b"x" * protocol.TOKEN_BYTES, 1))
    with pytest.raises(protocol.ProtocolError, match="wrong job token"):
        protocol.check_hello(protocol.read_frame(stream), token)
    left.close()
    assert protocol.read_frame(stream) is None
