"""What every worker body's machine shares: the waits of its start-up and the ways it stops.

A worker of any job kind registers, waits for its deployment, later for ``Start``, each wait
with a deadline checked on :class:`~epochal.machines.TimePassed`; it stops on ``Cancel``
or ``Shutdown``, when the driver goes away, and on a ``Reject`` of its registration (a running
worker was not rejected and ignores a stale one). :class:`WorkerLifecycle` holds that part and
:func:`register_lifecycle` puts its handlers, for the :data:`LifecycleEvent` s, into a machine's
dispatch table; the dataflow (:mod:`epochal.dataflow.worker_machine`), graph
(:mod:`epochal.graph.worker_machine`) and CEC (:mod:`epochal.cec.worker_machine`) machines add
their own phases and events, each listed in its kind's ``Event`` union. An event of a type the
table has no handler for raises :class:`~epochal.machines.UnknownEvent`, in any phase; a stopped
machine ignores every other. Pure: no sockets, threads or clocks.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

from epochal.machines import TimePassed, UnknownEvent
from epochal.messages import Cancel, Dispatch, Reject, Shutdown
from epochal.runtime.host.events import Registered, StopWorker
from epochal.runtime.host.mailbox import JobMasterLost

#: The events every worker machine takes (their handlers are :func:`register_lifecycle`'s).
LifecycleEvent = Registered | TimePassed | Cancel | Shutdown | Reject | JobMasterLost


class WorkerLifecycle:
    """Phase, deadline and stops of worker ``worker``; subclasses name their phases."""

    #: the phase in which the machine ignores everything, and what each waiting phase waits for
    STOPPED: ClassVar[enum.Enum]
    WAITING_FOR: ClassVar[dict[Any, str]]

    def __init__(self, worker: int, phase: enum.Enum) -> None:
        self.worker = worker
        self.phase = phase
        #: Monotonic deadline of the phase's wait (None: no wait) and its length for messages.
        self.deadline: float | None = None
        self.timeout = 0.0

    @property
    def running(self) -> bool:
        """Past the start: a stale ``Reject`` is ignored."""
        raise NotImplementedError

    def dispatch(self, table: Dispatch, event: object) -> list[Any]:
        """Apply one event with ``table``'s handler. Raises :class:`~epochal.machines.UnknownEvent`
        for an event of a type it has no handler for; a stopped machine ignores every other."""
        handler = table.handlers.get(type(event))
        if handler is None:
            raise UnknownEvent(table.name, event)
        if self.phase is self.STOPPED:
            return []
        return handler(self, event)

    def _stop(self, reason: str) -> list[Any]:
        self.phase = self.STOPPED
        return [StopWorker(reason)]

    def _wait(self, phase: enum.Enum, now: float, timeout: float) -> None:
        self.phase, self.deadline, self.timeout = phase, now + timeout, timeout

    def _timed_out(self) -> str:
        """Why the worker stops when its phase's deadline passed."""
        wanted = self.WAITING_FOR.get(self.phase, "an answer")
        return f"no '{wanted}' from the JobMaster within {self.timeout:.0f} s"

    # ---------------------------------------------------------------- handlers
    def _registered(self, event: Registered) -> list[Any]:
        self._wait(self.phase, event.now, event.timeout)
        return []

    def _tick(self, event: TimePassed) -> list[Any]:
        if self.deadline is not None and event.now > self.deadline:
            return self._stop(self._timed_out())
        return []

    def _cancel(self, message: Cancel | Shutdown) -> list[Any]:
        return self._stop(message.reason)

    def _reject(self, message: Reject) -> list[Any]:
        return [] if self.running else self._stop(message.reason)

    def _jobmaster_lost(self, event: JobMasterLost) -> list[Any]:
        return self._stop(event.reason)


def register_lifecycle(table: Dispatch) -> None:
    """Handle the shared events of :class:`WorkerLifecycle` through ``table``."""
    table.on(Registered)(WorkerLifecycle._registered)
    table.on(TimePassed)(WorkerLifecycle._tick)
    table.on(Cancel, Shutdown)(WorkerLifecycle._cancel)
    table.on(Reject)(WorkerLifecycle._reject)
    table.on(JobMasterLost)(WorkerLifecycle._jobmaster_lost)
