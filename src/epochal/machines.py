"""What epochal's pure state machines share: the passing of time, and the error for an unknown event.

Every protocol of epochal is a pure machine, events in and instructions out, with no sockets,
threads or clocks inside: the JobMaster's (:mod:`epochal.control.jobmaster_machine`), the leader
election's (:mod:`epochal.control.ha.election`), each job kind's worker machine (on
:mod:`epochal.runtime.host.lifecycle`). A machine learns that time passed only from a
:class:`TimePassed` its driver feeds it, the same event for every machine. An event of a type a
machine does not take is a bug (a driver feeding the wrong machine, a message of another job
kind): the machine raises :class:`UnknownEvent` rather than ignoring it. A machine whose own
driver reports something the machine did not ask for in its phase (a bug of the driver, not a
message that arrived late) may raise :class:`OutOfPhase`.

This module imports nothing from epochal: machines of every layer use it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TimePassed:
    """The clock moved: ``now`` (``time.monotonic()``) is what deadlines and timers are checked
    against, ``wall`` (``time.time()``) dates what a machine records (the JobMaster's
    checkpoints). Drivers feed one every few tens of milliseconds."""

    now: float
    wall: float


class UnknownEvent(TypeError):
    """Machine ``machine`` was fed ``event``, of a type it does not take."""

    def __init__(self, machine: str, event: object) -> None:
        kind = type(event)
        super().__init__(f"{machine} does not take {kind.__module__}.{kind.__qualname__} events")
        self.machine = machine
        self.event = event


class OutOfPhase(RuntimeError):
    """Machine ``machine``, in phase ``phase``, was fed ``event``, which its own driver sends only
    in answer to an instruction the machine gives in another phase: a bug of the driver."""

    def __init__(self, machine: str, phase: object, event: object) -> None:
        super().__init__(f"{machine} was fed {type(event).__qualname__} in phase {phase}, which never asks for it")
        self.machine = machine
        self.phase = phase
        self.event = event
