"""A CEC worker's protocol with the JobMaster as a pure state machine: events in, instructions out.

Phases: REGISTERING (until ``Deploy``) -> SETTING_UP (the driver opens its queue and, when it
replaces a lost worker, rebuilds its state; it answers :class:`SetUp`) -> READY (``Ready``
sent, until ``Start``) -> RUNNING (the driver processes; when its input ended and everything it
produced is durable and committed it answers :class:`InputDone`) -> DONE (``StageDone``
reported, until the JobMaster's ``FinishJob``) -> FINISHED (``Finished`` sent; a ``Shutdown``
stops it). A replacement reports :class:`~epochal.cec.protocol.Rejoined` with its recovery
phases when set up. Everything about records is the driver's (:mod:`epochal.cec.worker`); the
shared start-up waits and stops are :class:`~epochal.runtime.host.lifecycle.WorkerLifecycle`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from epochal.cec.protocol import FinishJob, Rejoined, StageDone
from epochal.messages import Deploy, Dispatch, KindCommand, KindReport, Processing, Ready, Start
from epochal.runtime.host.events import Send
from epochal.runtime.host.lifecycle import WorkerLifecycle, register_lifecycle


class CecPhase(enum.Enum):
    REGISTERING = "registering"
    SETTING_UP = "setting up"
    READY = "ready"
    RUNNING = "running"
    DONE = "done"
    FINISHED = "finished"
    STOPPED = "stopped"


# ---------------------------------------------------------------- events from the driver
@dataclass(frozen=True)
class SetUp:
    """The driver is set up (``phases``: a replacement's recovery timings, else empty)."""

    now: float
    timeout: float
    phases: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class InputDone:
    """Input ended; output durable and sent; the sink committed. ``counters`` go to the JobMaster."""

    counters: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------- instructions to the driver
@dataclass(frozen=True)
class SetUpWorker:
    """Connect to the peers, open the output queue, rebuild state when ``deploy.joining``."""

    deploy: Deploy


@dataclass(frozen=True)
class BeginProcessing:
    """Start reading sources and inputs."""


@dataclass(frozen=True)
class ReportFinished:
    """Send ``Finished`` with the worker's metrics."""


_HANDLERS = Dispatch("cec worker machine")
_WAITING_FOR = {CecPhase.REGISTERING: "Deploy", CecPhase.READY: "Start"}


class CecWorkerMachine(WorkerLifecycle):
    """The protocol state of CEC worker ``worker``; unexpected events are ignored."""

    STOPPED = CecPhase.STOPPED
    WAITING_FOR = _WAITING_FOR

    def __init__(self, worker: int) -> None:
        super().__init__(worker, CecPhase.REGISTERING)
        self.joining = False

    def handle(self, event: Any) -> list[Any]:
        return self.dispatch(_HANDLERS, event)

    @property
    def running(self) -> bool:
        return self.phase in (CecPhase.RUNNING, CecPhase.DONE, CecPhase.FINISHED)

    @_HANDLERS.on(Deploy)
    def _deploy(self, message: Deploy) -> list[Any]:
        if self.phase is not CecPhase.REGISTERING:
            return []
        self.phase, self.deadline, self.joining = CecPhase.SETTING_UP, None, message.joining
        return [SetUpWorker(message)]

    @_HANDLERS.on(SetUp)
    def _set_up(self, event: SetUp) -> list[Any]:
        if self.phase is not CecPhase.SETTING_UP:
            return []
        self._wait(CecPhase.READY, event.now, event.timeout)
        out: list[Any] = [Send(Ready(self.worker))]
        if self.joining:
            out.append(Send(KindReport(self.worker, Rejoined(self.worker, dict(event.phases)))))
        return out

    @_HANDLERS.on(Start)
    def _start(self, message: Start) -> list[Any]:
        if self.phase is not CecPhase.READY:
            return []
        self.phase, self.deadline = CecPhase.RUNNING, None
        return [BeginProcessing(), Send(Processing(self.worker))]

    @_HANDLERS.on(InputDone)
    def _input_done(self, event: InputDone) -> list[Any]:
        if self.phase is not CecPhase.RUNNING:
            return []
        self.phase = CecPhase.DONE
        return [Send(KindReport(self.worker, StageDone(self.worker, dict(event.counters))))]

    @_HANDLERS.on(KindCommand)
    def _command(self, message: KindCommand) -> list[Any]:
        if isinstance(message.payload, FinishJob) and self.phase is CecPhase.DONE:
            self.phase = CecPhase.FINISHED
            return [ReportFinished()]
        return []


register_lifecycle(_HANDLERS)
