"""A CEC worker's protocol with the JobMaster as a pure state machine: events in, instructions out.

Phases: REGISTERING (until ``Deploy``) -> SETTING_UP (the driver opens its queue and, when it
replaces a lost worker, rebuilds its state; it answers :class:`~epochal.cec.protocol.SetUp`) ->
READY (``Ready`` sent, until ``Start``) -> RUNNING (the driver processes; when its input ended
and everything it produced is durable and committed it answers
:class:`~epochal.cec.protocol.InputDone`) -> DONE (``StageDone`` reported, until the JobMaster's
``FinishJob``) -> FINISHED (``Finished`` sent; a ``Shutdown`` stops it). A replacement reports
:class:`~epochal.cec.protocol.Rejoined` with its recovery phases when set up, and
:class:`~epochal.cec.protocol.Resumed` when its driver first processed input
(:class:`~epochal.cec.protocol.FirstInput`). Everything about records is the driver's
(:mod:`epochal.cec.worker`); the shared start-up waits and stops are
:class:`~epochal.runtime.host.lifecycle.WorkerLifecycle`. The events are
:data:`~epochal.cec.protocol.Event`; anything else raises :class:`~epochal.machines.UnknownEvent`
(a ``KindCommand`` too, whose payload is not ``FinishJob``).

Events out of phase. The JobMaster's messages may come late or again (the control connection
delivers what was sent before the worker moved on, and ``FinishJob`` is sent again to every
worker when a replacement finishes after the others): one its phase does not expect is ignored.

==================  ======================================================================
event               outside the phase that expects it
==================  ======================================================================
``Deploy``          ignored (only REGISTERING sets up)
``Start``           ignored (only READY starts; before it, or twice)
``FinishJob``       ignored before DONE (nothing to finish) and once FINISHED (again)
``Reject``          stops the worker until it runs; ignored from RUNNING on (a stale one)
``Cancel``,         stop the worker in any phase
``Shutdown``,
``JobMasterLost``
``SetUp``           :class:`~epochal.machines.OutOfPhase`: the driver sets up once, in
                    SETTING_UP, in answer to ``SetUpWorker``
``InputDone``       :class:`~epochal.machines.OutOfPhase` outside RUNNING (before the start,
                    or a second time): the driver reports it once, while processing
``FirstInput``      reported (``Resumed``) by a replacement the first time, in any phase (a
                    producer's replay may reach it before its ``Start``); ignored after that,
                    and always by a worker that replaces none
==================  ======================================================================

A STOPPED machine ignores every event of a type it takes (its driver is stopping), a
``KindCommand`` whatever its payload.
"""

from __future__ import annotations

import enum

from epochal.cec.protocol import (
    BeginProcessing,
    Event,
    FinishJob,
    FirstInput,
    InputDone,
    Instruction,
    Rejoined,
    ReportFinished,
    Resumed,
    SetUp,
    SetUpWorker,
    StageDone,
)
from epochal.machines import OutOfPhase, UnknownEvent
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


_HANDLERS = Dispatch("cec worker machine")
_COMMANDS = Dispatch("cec worker commands")
_WAITING_FOR = {CecPhase.REGISTERING: "Deploy", CecPhase.READY: "Start"}


class CecWorkerMachine(WorkerLifecycle):
    """The protocol state of CEC worker ``worker``; see the module docstring."""

    STOPPED = CecPhase.STOPPED
    WAITING_FOR = _WAITING_FOR

    def __init__(self, worker: int) -> None:
        super().__init__(worker, CecPhase.REGISTERING)
        #: a replacement of a lost worker (``Deploy(joining=True)``)
        self.joining = False
        #: a replacement reported its first input (``Resumed``)
        self.resumed = False

    def handle(self, event: Event) -> list[Instruction]:
        return self.dispatch(_HANDLERS, event)

    @property
    def running(self) -> bool:
        return self.phase in (CecPhase.RUNNING, CecPhase.DONE, CecPhase.FINISHED)

    @_HANDLERS.on(Deploy)
    def _deploy(self, message: Deploy) -> list[Instruction]:
        if self.phase is not CecPhase.REGISTERING:
            return []
        self.phase, self.deadline, self.joining = CecPhase.SETTING_UP, None, message.joining
        return [SetUpWorker(message)]

    @_HANDLERS.on(SetUp)
    def _set_up(self, event: SetUp) -> list[Instruction]:
        if self.phase is not CecPhase.SETTING_UP:
            raise OutOfPhase(_HANDLERS.name, self.phase, event)
        self._wait(CecPhase.READY, event.now, event.timeout)
        out: list[Instruction] = [Send(Ready(self.worker))]
        if self.joining:
            out.append(Send(KindReport(self.worker, Rejoined(self.worker, dict(event.phases)))))
        return out

    @_HANDLERS.on(Start)
    def _start(self, message: Start) -> list[Instruction]:
        if self.phase is not CecPhase.READY:
            return []
        self.phase, self.deadline = CecPhase.RUNNING, None
        return [BeginProcessing(), Send(Processing(self.worker))]

    @_HANDLERS.on(FirstInput)
    def _first_input(self, event: FirstInput) -> list[Instruction]:
        if not self.joining or self.resumed:
            return []
        self.resumed = True
        return [Send(KindReport(self.worker, Resumed(self.worker)))]

    @_HANDLERS.on(InputDone)
    def _input_done(self, event: InputDone) -> list[Instruction]:
        if self.phase is not CecPhase.RUNNING:
            raise OutOfPhase(_HANDLERS.name, self.phase, event)
        self.phase = CecPhase.DONE
        return [Send(KindReport(self.worker, StageDone(self.worker, dict(event.counters))))]

    @_HANDLERS.on(KindCommand)
    def _command(self, message: KindCommand) -> list[Instruction]:
        handler = _COMMANDS.handlers.get(type(message.payload))
        if handler is None:
            raise UnknownEvent(_COMMANDS.name, message.payload)
        return handler(self, message.payload)

    @_COMMANDS.on(FinishJob)
    def _finish(self, command: FinishJob) -> list[Instruction]:
        if self.phase is not CecPhase.DONE:
            return []
        self.phase = CecPhase.FINISHED
        return [ReportFinished()]


register_lifecycle(_HANDLERS)
