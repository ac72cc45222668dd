"""Leader election with leases and fencing tokens, as a pure state machine.

:class:`ElectionMachine` takes every decision of one driver's part in a job's election and owns
no file, socket, thread or clock: time arrives in the events (monotonic seconds, of this
process), and what is to be done leaves as instructions that the thin driver
(:mod:`epochal.control.ha.driver`) carries out against the :class:`~epochal.control.ha.services.HaServices`.

States (:class:`Role`)::

    STANDBY --(leader gone, or silent for lease_timeout)--> CLAIMING --(won)--> LEADER
       ^                                                       |(lost)            |
       +-------------------------------------------------------+                  |
    LEADER --(renewal refused, a fenced write refused, no renewal for lease_timeout)--> DEPOSED
    LEADER --(Resign)--> RESIGNED          STANDBY --(the job's result is stored)--> ENDED

- A standby observes the store every ``poll_interval``. A store without a leader is claimed at
  once. Where leases expire by silence (files), a version unchanged for ``lease_timeout`` seconds
  since this standby first saw it is a dead leader's: it is claimed (the claim is a
  compare-and-set on that version, so of several standbys one wins).
- A leader renews every ``renew_interval``; a renewal proves the lease from the moment it was
  *sent*. No proof for ``lease_timeout`` seconds (the store unreachable, the process paused), a
  refused renewal, or a refused fenced write (:class:`Fenced`, reported by the JobMaster) depose
  it: it must stop its workers and commit nothing more. The fencing token is what makes this
  safe; the lease only bounds how long a deposed leader goes on unaware.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from epochal.control.ha.records import Observation
from epochal.machines import TimePassed, UnknownEvent


class Role(enum.Enum):
    STANDBY = "standby"
    CLAIMING = "claiming"
    LEADER = "leader"
    DEPOSED = "deposed"
    RESIGNED = "resigned"
    ENDED = "ended"


# ---------------------------------------------------------------------- events
@dataclass(frozen=True)
class Observed:
    """The driver read the store (answer to :class:`Observe`)."""

    seen: Observation
    now: float


@dataclass(frozen=True)
class ObserveFailed:
    """The store could not be read (answer to :class:`Observe`): try again at the next poll."""

    now: float


@dataclass(frozen=True)
class ClaimAnswered:
    """The answer to :class:`Claim`: the new epoch, or None (another driver won); ``sent``: when
    the claim was sent (a won claim proves the lease from then)."""

    epoch: int | None
    sent: float


@dataclass(frozen=True)
class RenewAnswered:
    """The answer to :class:`Renew`: ``ok`` (still the leader), False (another leader), or None
    (the store could not be reached: no proof either way); ``sent``: when the renewal was sent."""

    ok: bool | None
    sent: float
    now: float


@dataclass(frozen=True)
class FencedWrite:
    """A fenced write of this leader (a checkpoint's commit, a deletion) was refused."""

    reason: str


@dataclass(frozen=True)
class Resign:
    """The job ended here (its result is stored) or the driver steps down: stop leading."""


Event = TimePassed | Observed | ObserveFailed | ClaimAnswered | RenewAnswered | FencedWrite | Resign


# ---------------------------------------------------------------------- instructions
@dataclass(frozen=True)
class Observe:
    """Read the store; answer :class:`Observed`."""


@dataclass(frozen=True)
class Claim:
    """Claim the leadership with a compare-and-set on ``seen``; answer :class:`ClaimAnswered`."""

    seen: Observation


@dataclass(frozen=True)
class Renew:
    """Renew the lease of ``epoch``; answer :class:`RenewAnswered`."""

    epoch: int


@dataclass(frozen=True)
class Elected:
    """This driver leads the job with ``epoch``: start it."""

    epoch: int


@dataclass(frozen=True)
class Deposed:
    """This driver no longer leads (``reason``): stop the workers, commit nothing more, exit."""

    epoch: int
    reason: str


@dataclass(frozen=True)
class JobEnded:
    """The job's result is stored: it ended under another driver and is never run again."""


@dataclass(frozen=True)
class ReleaseLeadership:
    """Give the leadership of ``epoch`` up."""

    epoch: int


Instruction = Observe | Claim | Renew | Elected | Deposed | JobEnded | ReleaseLeadership


@dataclass(frozen=True)
class ElectionTimings:
    """``lease_timeout``: seconds without a renewal after which a lease is lost (files: a silent
    leader's lease expires; either: a leader that could not renew deposes itself);
    ``renew_interval``: seconds between a leader's renewals; ``poll_interval``: seconds between
    a standby's reads of the store."""

    lease_timeout: float = 5.0
    renew_interval: float = 1.0
    poll_interval: float = 0.25


class ElectionMachine:
    """One driver's election (see the module docstring). ``expires_by_silence``: a silent leader's
    lease expires after ``lease_timeout`` (files); else only the store ends it (ZooKeeper)."""

    def __init__(self, timings: ElectionTimings, expires_by_silence: bool) -> None:
        self.timings = timings
        self.expires_by_silence = expires_by_silence
        self.role = Role.STANDBY
        self.epoch: int | None = None
        #: the version a standby last saw, and since when (its own clock) it has not changed
        self.seen_version: int | None = None
        self.seen_since = 0.0
        self.next_poll = 0.0
        self.polling = False
        #: a leader's lease is proven up to ``proven_at`` (when the latest good renewal was sent)
        self.proven_at = 0.0
        self.next_renewal = 0.0
        self.renewing = False
        self.reason = ""

    def handle(self, event: Event) -> list[Instruction]:
        if isinstance(event, TimePassed):
            return self._tick(event.now)
        if isinstance(event, Observed):
            return self._observed(event)
        if isinstance(event, ObserveFailed):
            self.polling, self.next_poll = False, event.now + self.timings.poll_interval
            return []
        if isinstance(event, ClaimAnswered):
            return self._claimed(event)
        if isinstance(event, RenewAnswered):
            return self._renewed(event)
        if isinstance(event, FencedWrite):
            return self._depose(f"a fenced write was refused: {event.reason}")
        if isinstance(event, Resign):
            return self._resign()
        raise UnknownEvent("the election machine", event)

    # ---------------------------------------------------------------- standby
    def _tick(self, now: float) -> list[Instruction]:
        if self.role is Role.STANDBY and not self.polling and now >= self.next_poll:
            self.polling = True
            return [Observe()]
        if self.role is Role.LEADER:
            if now - self.proven_at >= self.timings.lease_timeout:
                return self._depose(f"its lease could not be renewed for {now - self.proven_at:.1f} s "
                                    f"(lease timeout {self.timings.lease_timeout:g} s)")
            if not self.renewing and now >= self.next_renewal:
                assert self.epoch is not None
                self.renewing = True
                return [Renew(self.epoch)]
        return []

    def _observed(self, event: Observed) -> list[Instruction]:
        if self.role is not Role.STANDBY:
            return []
        self.polling = False
        self.next_poll = event.now + self.timings.poll_interval
        seen = event.seen
        if seen.finished:
            self.role = Role.ENDED
            return [JobEnded()]
        if seen.leader is None:
            self.role = Role.CLAIMING
            return [Claim(seen)]
        if seen.version != self.seen_version:
            self.seen_version, self.seen_since = seen.version, event.now
            return []
        if self.expires_by_silence and event.now - self.seen_since >= self.timings.lease_timeout:
            self.role = Role.CLAIMING
            return [Claim(seen)]
        return []

    def _claimed(self, event: ClaimAnswered) -> list[Instruction]:
        if self.role is not Role.CLAIMING:
            return []
        if event.epoch is None:  # another driver won: watch the new leader from scratch
            self.role, self.seen_version = Role.STANDBY, None
            return []
        self.role, self.epoch = Role.LEADER, event.epoch
        self.proven_at = event.sent
        self.next_renewal = event.sent + self.timings.renew_interval
        return [Elected(event.epoch)]

    # ---------------------------------------------------------------- leader
    def _renewed(self, event: RenewAnswered) -> list[Instruction]:
        if self.role is not Role.LEADER:
            return []
        self.renewing = False
        self.next_renewal = event.now + self.timings.renew_interval
        if event.ok is False:
            return self._depose("another driver took the leadership over (its renewal was refused)")
        if event.ok:
            self.proven_at = max(self.proven_at, event.sent)
        return self._tick(event.now) if event.ok is None else []

    def _depose(self, reason: str) -> list[Instruction]:
        if self.role is not Role.LEADER:
            return []
        assert self.epoch is not None
        self.role, self.reason = Role.DEPOSED, reason
        return [Deposed(self.epoch, reason)]

    def _resign(self) -> list[Instruction]:
        if self.role is Role.LEADER:
            assert self.epoch is not None
            self.role = Role.RESIGNED
            return [ReleaseLeadership(self.epoch)]
        if self.role in (Role.STANDBY, Role.CLAIMING):
            self.role = Role.RESIGNED
        return []
