"""What CEC's workers tell each other and the JobMaster, and the worker machine's events and instructions.

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

The worker machine (:mod:`epochal.cec.worker_machine`) takes the :data:`Event` s (anything else
raises :class:`~epochal.machines.UnknownEvent`): what every worker shares, the JobMaster's
messages, and what its driver (:mod:`epochal.cec.worker`) reports: :class:`SetUp`,
:class:`FirstInput`, :class:`InputDone`; it returns the :data:`Instruction` s
(:class:`SetUpWorker`, :class:`BeginProcessing`, :class:`ReportFinished` and the shared ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epochal.messages import Deploy, KindCommand, Start
from epochal.runtime.host.events import Send, StopWorker
from epochal.runtime.host.lifecycle import LifecycleEvent

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


#: The payloads of the ``KindCommand`` s a CEC worker takes.
CecCommand = FinishJob


# ---------------------------------------------------------------- the worker machine's events
@dataclass(frozen=True)
class SetUp:
    """The driver is set up (``phases``: a replacement's recovery timings, else empty); ``Start``
    must come within ``timeout``."""

    now: float
    timeout: float
    phases: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class FirstInput:
    """The driver processed input records for the first time (a replacement reports it: the end of
    its recovery, :class:`Resumed`)."""


@dataclass(frozen=True)
class InputDone:
    """Input ended; output durable and sent; the sink committed. ``counters`` go to the JobMaster."""

    counters: dict[str, int] = field(default_factory=dict)


#: Everything the CEC worker machine takes: the start-up and stops every worker shares, the
#: JobMaster's messages (a ``KindCommand`` carries a :data:`CecCommand`), and what its driver reports.
Event = LifecycleEvent | Deploy | Start | KindCommand | SetUp | FirstInput | InputDone


# ---------------------------------------------------------------- the worker machine's instructions
@dataclass(frozen=True)
class SetUpWorker:
    """Connect to the peers, open the output queue, rebuild state when ``deploy.joining``; then
    feed :class:`SetUp`."""

    deploy: Deploy


@dataclass(frozen=True)
class BeginProcessing:
    """Start reading sources and inputs."""


@dataclass(frozen=True)
class ReportFinished:
    """Send ``Finished`` with the worker's metrics."""


#: Everything the CEC worker machine returns.
Instruction = SetUpWorker | BeginProcessing | ReportFinished | Send | StopWorker
