"""The thin driver of a driver's election: a thread that feeds the :class:`ElectionMachine` the
time and the store's answers, and carries out its instructions against the HA services.

:class:`ElectionDriver` is what the HA job runner waits on: :meth:`wait` returns once this
driver leads (``"leader"``) or the job ended elsewhere (``"ended"``); :attr:`deposed` is set
when the leadership is lost, after every ``on_deposed`` callback ran (the job runner's stops
the JobMaster). The JobMaster reports refused fenced writes through :meth:`fenced`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from epochal.control.ha.election import (
    Claim,
    ClaimAnswered,
    Deposed,
    Elected,
    ElectionMachine,
    ElectionTimings,
    Event,
    FencedWrite,
    Instruction,
    JobEnded,
    Observe,
    Observed,
    ObserveFailed,
    ReleaseLeadership,
    Renew,
    RenewAnswered,
    Resign,
    Role,
)
from epochal.control.ha.records import DriverInfo
from epochal.control.ha.services import HaServices
from epochal.machines import TimePassed

_log = logging.getLogger("epochal")

#: Seconds between the thread's ticks.
TICK_S = 0.05
#: Seconds between refreshes of this driver's contender announcement.
REFRESH_S = 1.0


class ElectionDriver:
    """Runs one driver's election for the job of ``services`` on a daemon thread."""

    def __init__(self, services: HaServices, me: DriverInfo, timings: ElectionTimings) -> None:
        self.services = services
        self.me = me
        self.machine = ElectionMachine(timings, services.expires_by_silence)
        self.decided = threading.Event()
        self.deposed = threading.Event()
        self.outcome = ""
        self.epoch: int | None = None
        self.deposed_reason = ""
        self.on_deposed: list[Callable[[str], None]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="epochal-ha", daemon=True)
        self._refreshed = 0.0

    def start(self) -> ElectionDriver:
        self.services.join(self.me)
        self._refreshed = time.monotonic()
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> str:
        """Block until this driver leads (``"leader"``) or the job ended elsewhere (``"ended"``)."""
        while not self.decided.wait(0.2 if timeout is None else timeout):
            if timeout is not None:
                return ""
        return self.outcome

    @property
    def role(self) -> Role:
        return self.machine.role

    def fenced(self, reason: str) -> None:
        """A fenced write of this leader was refused (called from the JobMaster's thread)."""
        self._feed(FencedWrite(reason))

    def resign(self) -> None:
        """Stop leading (the job's end is recorded, or this driver steps down) and stop the thread."""
        self._feed(Resign())
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(5.0)
        try:
            self.services.leave(self.me)
        except Exception:  # noqa: BLE001 - best effort: a stale announcement expires
            pass

    # ---------------------------------------------------------------- the thread
    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            self._feed(TimePassed(now, time.time()))
            if now - self._refreshed >= REFRESH_S:
                self._refreshed = now
                try:
                    self.services.refresh(self.me)
                except Exception:  # noqa: BLE001 - only what epochal list shows
                    pass
            if self.machine.role in (Role.DEPOSED, Role.ENDED, Role.RESIGNED):
                return
            self._stop.wait(TICK_S)

    def _feed(self, event: Event) -> None:
        with self._lock:
            instructions = self.machine.handle(event)
        for instruction in instructions:
            self._carry_out(instruction)

    def _carry_out(self, instruction: Instruction) -> None:
        if isinstance(instruction, Observe):
            try:
                seen = self.services.observe()
            except Exception as error:  # noqa: BLE001 - unreachable now: try again at the next poll
                _log.debug("high availability: reading %s failed: %s", self.services.uri, error)
                self._feed(ObserveFailed(time.monotonic()))
                return
            self._feed(Observed(seen, time.monotonic()))
        elif isinstance(instruction, Claim):
            sent = time.monotonic()
            try:
                epoch = self.services.claim(instruction.seen, self.me)
            except Exception as error:  # noqa: BLE001 - an unreachable store: no claim
                _log.debug("high availability: claiming failed: %s", error)
                epoch = None
            self._feed(ClaimAnswered(epoch, sent))
        elif isinstance(instruction, Renew):
            sent = time.monotonic()
            ok: bool | None
            try:
                ok = self.services.renew(instruction.epoch)
            except Exception as error:  # noqa: BLE001 - no proof either way; the lease may run out
                _log.warning("high availability: renewing the lease of epoch %d failed: %s", instruction.epoch, error)
                ok = None
            self._feed(RenewAnswered(ok, sent, time.monotonic()))
        elif isinstance(instruction, Elected):
            self.epoch, self.outcome = instruction.epoch, "leader"
            _log.info("high availability: %s elected for job %s (epoch %d)", self.me.describe(), self.services.job_id,
                      instruction.epoch)
            self.decided.set()
        elif isinstance(instruction, JobEnded):
            self.outcome = "ended"
            self.decided.set()
        elif isinstance(instruction, Deposed):
            self.deposed_reason = instruction.reason
            _log.error("high availability: %s lost the leadership of job %s (epoch %d): %s", self.me.describe(),
                       self.services.job_id, instruction.epoch, instruction.reason)
            for callback in self.on_deposed:
                try:
                    callback(instruction.reason)
                except Exception:  # noqa: BLE001 - every callback runs
                    _log.exception("high availability: a deposition callback failed")
            self.deposed.set()
        elif isinstance(instruction, ReleaseLeadership):
            try:
                self.services.release(instruction.epoch)
            except Exception as error:  # noqa: BLE001 - a standby takes over once the lease expires
                _log.debug("high availability: releasing failed: %s", error)
