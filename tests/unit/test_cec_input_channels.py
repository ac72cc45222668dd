"""A CEC consumer's input channels as a pure machine, fed event sequences and compared with exact
instruction lists: credit for every stream event, dedup by frame and by item sequence number,
replay requests of a replacement and to a replaced producer, the end of the input, and trims sent
only once the output that makes them safe is durable."""

from __future__ import annotations

from epochal.cec.input_channels import Deliver, InputChannels, ToProducer
from epochal.cec.protocol import Credit, ReplayRequest, TrimRequest
from epochal.cec.tuples import ITEM_LAST, item_seq

ME, P0, P1 = 5, 1, 2


def test_each_frame_is_credited_delivered_once_and_moves_the_channel_to_its_end():
    inputs = InputChannels(ME, [P0, P1])
    credit, deliver = inputs.stream_event(P1, 3, [0, 2])
    assert credit == [ToProducer(P1, Credit(ME, 1))]
    assert deliver == Deliver(1, (0, 1), (item_seq(3, 0), item_seq(3, 2)), item_seq(3, ITEM_LAST))
    assert inputs.positions == (-1, item_seq(3, ITEM_LAST))
    # the same frame again (sent twice after a replay): credited, not delivered
    assert inputs.stream_event(P1, 3, [0, 2]) == ([ToProducer(P1, Credit(ME, 1))], None)
    # a frame with no items for this consumer still moves the channel past it
    assert inputs.stream_event(P0, 7, [])[1] == Deliver(0, (), (), item_seq(7, ITEM_LAST))


def test_a_replacement_asks_every_producer_to_replay_after_its_rebuilt_position_and_drops_what_it_had():
    rebuilt = [item_seq(4, 1), item_seq(2, ITEM_LAST)]
    inputs = InputChannels(ME, [P0, P1], after=rebuilt)
    assert inputs.replay_all() == [ToProducer(P0, ReplayRequest(ME, rebuilt[0])),
                                   ToProducer(P1, ReplayRequest(ME, rebuilt[1]))]
    # frame 4 is replayed whole: items 0 and 1 were in the rebuilt state, item 2 is new
    _, deliver = inputs.stream_event(P0, 4, [0, 1, 2])
    assert deliver == Deliver(0, (2,), (item_seq(4, 2),), item_seq(4, ITEM_LAST))


def test_a_replaced_producer_is_told_where_the_consumer_stands():
    inputs = InputChannels(ME, [P0, P1])
    inputs.stream_event(P0, 2, [0])
    assert inputs.producer_replaced(P0) == [ToProducer(P0, ReplayRequest(ME, item_seq(2, ITEM_LAST)))]
    assert inputs.producer_replaced(9) == []  # a consumer of this instance, not a producer


def test_the_input_ends_once_every_producer_ended_and_its_last_frame_was_seen():
    inputs = InputChannels(ME, [P0, P1])
    inputs.end_of_stream(P0, 3)
    inputs.stream_event(P0, 3, [])
    assert not inputs.ended  # P1 has not ended
    inputs.end_of_stream(P1, 4)
    assert not inputs.ended  # its frame 4 has not arrived
    inputs.stream_event(P1, 4, [1])
    assert inputs.ended
    assert not InputChannels(ME, []).ended  # a source stage never ends by its channels


def test_a_stateless_stage_trims_its_input_only_once_its_output_frame_is_durable():
    inputs = InputChannels(ME, [P0, P1])
    inputs.stream_event(P0, 1, [0])
    inputs.emitted(10)  # own frame 10 covers the input up to here
    inputs.stream_event(P1, 6, [0])
    inputs.emitted(11)
    assert inputs.durable(9) == []
    assert inputs.durable(10) == [ToProducer(P0, TrimRequest(ME, item_seq(1, ITEM_LAST))),
                                  ToProducer(P1, TrimRequest(ME, -1))]
    assert inputs.durable(11) == [ToProducer(P0, TrimRequest(ME, item_seq(1, ITEM_LAST))),
                                  ToProducer(P1, TrimRequest(ME, item_seq(6, ITEM_LAST)))]
    assert inputs.durable(12) == []  # nothing waits


def test_a_window_stage_trims_to_its_footprints_when_the_frame_holding_them_is_durable():
    inputs = InputChannels(ME, [P0])
    inputs.trim_when_durable(20, [item_seq(3, 4)])
    assert inputs.durable(19) == []
    assert inputs.durable(21) == [ToProducer(P0, TrimRequest(ME, item_seq(3, 4)))]
    assert inputs.durable(22) == []
    assert inputs.trim_now([7]) == [ToProducer(P0, TrimRequest(ME, 7))]  # a sink's commit needs no wait
