"""The election machine (epochal.control.ha.election): leases, claims, fencing, no clock inside."""

from __future__ import annotations

from epochal.control.ha.election import (
    Claim,
    ClaimAnswered,
    Deposed,
    Elected,
    ElectionMachine,
    ElectionTimings,
    FencedWrite,
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
from epochal.control.ha.records import DriverInfo, Observation
from epochal.machines import TimePassed

T = ElectionTimings(lease_timeout=5.0, renew_interval=1.0, poll_interval=0.25)
OTHER = DriverInfo("other", "h", 1, 0.0)


def machine(silence: bool = True) -> ElectionMachine:
    return ElectionMachine(T, silence)


def seen(version: int, epoch: int = 1, leader: DriverInfo | None = OTHER, finished: bool = False) -> Observation:
    return Observation(version, epoch, leader, finished)


def elected(m: ElectionMachine, epoch: int = 2, at: float = 0.0) -> None:
    assert m.handle(TimePassed(at, 0.0)) == [Observe()]
    assert m.handle(Observed(seen(0, epoch - 1, None), at)) == [Claim(seen(0, epoch - 1, None))]
    assert m.handle(ClaimAnswered(epoch, at)) == [Elected(epoch)]


def test_a_store_without_leader_is_claimed_at_once():
    m = machine()
    elected(m)
    assert m.role is Role.LEADER and m.epoch == 2


def test_standby_polls_at_its_interval_one_read_at_a_time():
    m = machine()
    assert m.handle(TimePassed(0.0, 0.0)) == [Observe()]
    assert m.handle(TimePassed(0.1, 0.0)) == []  # a read in flight
    assert m.handle(Observed(seen(3), 0.1)) == []
    assert m.handle(TimePassed(0.2, 0.0)) == []
    assert m.handle(TimePassed(0.36, 0.0)) == [Observe()]
    assert m.handle(ObserveFailed(0.4)) == []
    assert m.handle(TimePassed(0.5, 0.0)) == []
    assert m.handle(TimePassed(0.66, 0.0)) == [Observe()]


def test_a_leader_that_keeps_writing_is_never_claimed():
    m = machine()
    for step in range(40):  # 10 s of polls, each seeing a new version (a heartbeat)
        m.handle(TimePassed(step * 0.25, 0.0))
        assert m.handle(Observed(seen(step), step * 0.25)) == []
    assert m.role is Role.STANDBY


def test_a_silent_leader_is_claimed_after_the_lease_timeout_of_the_standbys_clock():
    m = machine()
    m.handle(TimePassed(100.0, 0.0))
    assert m.handle(Observed(seen(7), 100.0)) == []
    m.handle(TimePassed(104.9, 0.0))
    assert m.handle(Observed(seen(7), 104.9)) == []
    m.handle(TimePassed(105.0, 0.0))
    assert m.handle(Observed(seen(7), 105.0)) == [Claim(seen(7))]
    assert m.role is Role.CLAIMING


def test_without_expiry_by_silence_only_a_gone_leader_is_claimed():
    m = machine(silence=False)
    m.handle(TimePassed(0.0, 0.0))
    m.handle(Observed(seen(7), 0.0))
    m.handle(TimePassed(60.0, 0.0))
    assert m.handle(Observed(seen(7), 60.0)) == []  # ZooKeeper: the session ends it, not the silence
    m.handle(TimePassed(61.0, 0.0))
    assert m.handle(Observed(seen(8, leader=None), 61.0)) == [Claim(seen(8, leader=None))]


def test_a_lost_claim_goes_back_to_watching_the_new_leader():
    m = machine()
    m.handle(TimePassed(0.0, 0.0))
    m.handle(Observed(seen(1, leader=None), 0.0))
    assert m.handle(ClaimAnswered(None, 0.0)) == []
    assert m.role is Role.STANDBY and m.seen_version is None
    m.handle(TimePassed(1.0, 0.0))
    assert m.handle(Observed(seen(2), 1.0)) == []  # the winner's version: its silence counts from now


def test_a_stored_result_ends_the_standby():
    m = machine()
    m.handle(TimePassed(0.0, 0.0))
    assert m.handle(Observed(seen(4, leader=None, finished=True), 0.0)) == [JobEnded()]
    assert m.role is Role.ENDED
    assert m.handle(TimePassed(10.0, 0.0)) == []


def test_leader_renews_every_interval_one_at_a_time():
    m = machine()
    elected(m, at=10.0)
    assert m.handle(TimePassed(10.5, 0.0)) == []
    assert m.handle(TimePassed(11.0, 0.0)) == [Renew(2)]
    assert m.handle(TimePassed(11.5, 0.0)) == []  # in flight
    assert m.handle(RenewAnswered(True, 11.0, 11.6)) == []
    assert m.handle(TimePassed(12.5, 0.0)) == []
    assert m.handle(TimePassed(12.6, 0.0)) == [Renew(2)]


def test_a_refused_renewal_deposes():
    m = machine()
    elected(m)
    m.handle(TimePassed(1.0, 0.0))
    assert m.handle(RenewAnswered(False, 1.0, 1.0)) == [Deposed(2, m.reason)]
    assert m.role is Role.DEPOSED and "refused" in m.reason
    assert m.handle(TimePassed(2.0, 0.0)) == []


def test_no_proof_for_the_lease_timeout_deposes_counting_from_when_the_renewal_was_sent():
    m = machine()
    elected(m, at=0.0)
    m.handle(TimePassed(1.0, 0.0))
    m.handle(RenewAnswered(True, 1.0, 3.5))  # answered late: proves the lease from 1.0 only
    for at in (4.0, 5.0):
        out = m.handle(TimePassed(at, 0.0))
        assert all(not isinstance(i, Deposed) for i in out)
        if out:
            m.handle(RenewAnswered(None, at, at))  # the store cannot be reached
    out = m.handle(TimePassed(6.0, 0.0))
    assert out == [Deposed(2, m.reason)] and "lease" in m.reason


def test_a_paused_leader_deposes_itself_at_its_first_tick():
    m = machine()
    elected(m, at=0.0)
    m.handle(TimePassed(1.0, 0.0))
    m.handle(RenewAnswered(True, 1.0, 1.0))
    assert m.handle(TimePassed(30.0, 0.0)) == [Deposed(2, m.reason)]  # SIGSTOP for 29 s, then SIGCONT


def test_a_refused_fenced_write_deposes_once():
    m = machine()
    elected(m)
    assert m.handle(FencedWrite("epoch 3 leads")) == [Deposed(2, m.reason)]
    assert m.handle(FencedWrite("again")) == []


def test_resigning_releases_the_leadership_and_a_standby_just_stops():
    m = machine()
    elected(m)
    assert m.handle(Resign()) == [ReleaseLeadership(2)]
    assert m.role is Role.RESIGNED and m.handle(TimePassed(100.0, 0.0)) == []
    s = machine()
    assert s.handle(Resign()) == [] and s.role is Role.RESIGNED
