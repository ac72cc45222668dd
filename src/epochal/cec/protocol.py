"""What CEC's workers tell each other and the JobMaster (typed, both sides).

Between workers, on the peer connections (channel :data:`DATA`): a producer sends each consumer
:class:`StreamEvent` s, the consumer's part of a durable frame of the producer's persisted
output queue; a consumer asks for a :class:`ReplayRequest` (everything after a sequence number,
when it or its producer was replaced) and tells its producers how far it no longer needs their
output (:class:`TrimRequest`) and how many stream events it processed (:class:`Credit`, the
producer's flow control); :class:`EndOfStream` says a producer's output is complete.

To the JobMaster, as :class:`~epochal.messages.KindReport` payloads: :class:`StageDone` (this
worker's output is complete and durable, and its sink committed everything) and
:class:`Rejoined` (a replacement rebuilt its state: how long each phase took) and
:class:`Resumed` (it processed its first input). From it, as a
:class:`~epochal.messages.KindCommand`: :class:`FinishJob` once every worker is done.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The peer-connection channel that carries CEC's stream events and requests.
DATA = 0


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One consumer's part of durable frame ``frame_seq`` of ``producer``'s output queue:
    ``blob`` pickles ``(indices, records)``; record ``k`` has sequence number
    ``item_seq(frame_seq, indices[k])`` in the channel."""

    producer: int
    frame_seq: int
    blob: bytes


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """From consumer ``consumer``: send me your output after sequence number ``after``, then
    go on live."""

    consumer: int
    after: int


@dataclass(frozen=True, slots=True)
class Credit:
    """From consumer ``consumer``: I processed ``frames`` more of your stream events."""

    consumer: int
    frames: int


@dataclass(frozen=True, slots=True)
class TrimRequest:
    """From consumer ``consumer``: I will never ask for output at or before ``through`` again."""

    consumer: int
    through: int


@dataclass(frozen=True, slots=True)
class EndOfStream:
    """Producer ``producer`` has sent everything (up to sequence number ``last``)."""

    producer: int
    last: int


@dataclass(frozen=True)
class StageDone:
    """Worker ``worker`` finished its input; its output is durable and its sink committed."""

    worker: int
    counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Rejoined:
    """A replacement of ``worker`` rebuilt its state and asked for its replay; ``phases``: seconds
    spent opening the log, rebuilding (EC or full checkpoint) and loading it, and the extent."""

    worker: int
    phases: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Resumed:
    """A replacement of ``worker`` processed its first input since it started."""

    worker: int


@dataclass(frozen=True)
class FinishJob:
    """Every worker is done: report Finished and stop."""
