"""CEC's eventual checkpoint from hand-built outputs (closed windows skipped, N footprints found,
T computed, extent counted), exact per-window deduplication by position, and the Q/U and CI/CP
policy for G_check (papers/002 §II.B, §III)."""

from __future__ import annotations

import pytest

from epochal.cec.eventual import EventualCheckpoint, ReconstructionError, reconstruct, reconstruct_full
from epochal.cec.policy import CecSettings, CheckpointPolicy
from epochal.cec.tuples import (
    FullCheckpoint,
    LoggedFrame,
    Position,
    WindowCheckpoint,
    WindowChecks,
    WindowClosed,
    already_counted,
    decode_item,
    earliest,
    encode_items,
    is_control,
)


def at(seq, other=0):
    """A position on two input channels."""
    return Position((seq, other))


def g(kind, window, state, seq, other=0):
    return WindowCheckpoint(kind, window, state, at(seq, other))


def frame(n, seq, other=0, *control, records=0):
    """A stream event of the queue: N and the position after it, ``records`` results, ``control``."""
    return LoggedFrame(n, at(seq, other), records, encode_items(list(control)))


def test_the_papers_figure_2_closed_windows_are_skipped_and_n_footprints_found():
    # oldest first, a stream event each: wk opens, wi opens, wk checked, wj opens, wk closes,
    # wi checked, wc opens
    output = [frame(1, 1, 4, g("open", "k", 1, 1, 4)), frame(2, 2, 5, g("open", "i", 5, 2, 5)),
              frame(2, 3, 6, g("check", "k", 3, 3, 6)), frame(3, 4, 6, g("open", "j", 7, 4, 6)),
              frame(2, 5, 7, WindowClosed("k"), records=1), frame(2, 6, 7, g("check", "i", 9, 6, 7)),
              frame(3, 7, 8, g("open", "c", 2, 7, 8))]
    ec = reconstruct(reversed(output))
    assert set(ec.windows) == {"i", "j", "c"}  # k closed before t_c: its footprints are skipped
    assert ec.windows["i"].state == 9 and ec.windows["i"].kind == "check"  # the newest footprint
    assert ec.replay_after == at(4, 6)  # T: per channel the oldest footprint, w_j's G_open
    assert ec.newest == at(7, 8)
    assert ec.extent == 5  # rolled back over c, i's check, R_k with k's result, j's open


def test_footprints_in_one_stream_event_are_read_newest_first():
    output = [frame(1, 1, 0, g("open", "a", 1, 1)),
              frame(2, 3, 0, g("check", "a", 2, 2), g("open", "b", 1, 3), WindowClosed("b"), g("open", "c", 5, 3),
                    records=1)]
    ec = reconstruct(reversed(output))
    assert set(ec.windows) == {"a", "c"} and ec.windows["a"].state == 2 and ec.extent == 5
    assert ec.replay_after == at(2)


def test_g_checks_taken_in_one_go_are_footprints_of_each_window():
    output = [frame(3, 1, 0, g("open", "a", 1, 1), g("open", "b", 1, 1), g("open", "c", 1, 1)),
              frame(3, 2, 0, WindowChecks(["a", "b"], [4, 5], at(2))),
              frame(2, 3, 0, WindowClosed("a"), records=1)]
    ec = reconstruct(reversed(output))
    assert ec.windows == {"b": g("check", "b", 5, 2), "c": g("open", "c", 1, 1)}  # a closed after its check
    assert ec.replay_after == at(1) and ec.extent == 2 + 2 + 3  # one tuple per window checked


def test_an_empty_output_or_nothing_open_gives_an_empty_checkpoint():
    assert reconstruct([]) == EventualCheckpoint()
    ec = reconstruct(reversed([frame(1, 1, 0, g("open", "a", 1, 1)), frame(0, 2, 0, WindowClosed("a"), records=1)]))
    assert ec.windows == {} and ec.replay_after is None and ec.newest == at(2) and ec.extent == 2


def test_results_without_control_tuples_are_passed_over_and_counted_in_the_extent():
    output = [frame(1, 1, 0, g("open", "a", 1, 1)), frame(1, 1, 0, records=2), frame(1, 2, 0, g("check", "a", 2, 2)),
              frame(1, 3, 0, records=1)]
    ec = reconstruct(reversed(output))
    assert ec.windows["a"].state == 2 and ec.extent == 2 and ec.newest == at(3)


def test_a_log_trimmed_past_a_needed_footprint_is_an_error():
    with pytest.raises(ReconstructionError, match="1 of the 2 open windows' checkpoints found"):
        reconstruct(reversed([frame(2, 2, 0, g("open", "b", 1, 2))]))


def test_crb_restores_the_newest_full_checkpoint_and_suppresses_results_after_it():
    full = FullCheckpoint({"w": (1, 1)}, {"k": 1}, 1, at(3))
    output = [frame(1, 1, 0, FullCheckpoint({}, {}, 0, at(1))), frame(1, 3, 0, full),
              frame(0, 4, 0, WindowClosed("w"), records=1), frame(0, 4, 0, records=3)]
    restore = reconstruct_full(reversed(output))
    assert restore.checkpoint == full and restore.results_after == {"w"} and restore.extent == 6
    assert reconstruct_full([]).checkpoint is None


def test_dedup_is_per_channel_and_exact():
    footprint = g("check", "a", 10, 41, 7)
    assert already_counted(footprint, 0, 41) and already_counted(footprint, 1, 7)
    assert not already_counted(footprint, 0, 42) and not already_counted(footprint, 1, 8)
    assert is_control(footprint) and is_control(WindowClosed("a")) and not is_control(("a", 1))
    # T is taken per channel: the oldest footprint of one channel need not be that of the other
    assert earliest([at(4, 9), at(6, 2)]) == at(4, 2)


def test_the_policy_checks_the_oldest_window_while_q_exceeds_q():
    policy = CheckpointPolicy(CecSettings(q_target=4, u_target=10**6, interval=1.0, period=1.0))
    for w in "abc":
        policy.opened(w)
    assert policy.open_windows == 3 and policy.extent() == (3, 0) and policy.next_check(0.0) is None
    policy.emitted(2)  # two more tuples in the output queue: q = 5 > Q
    assert policy.extent() == (5, 0) and policy.next_check(0.0) == "a"  # the oldest footprint first
    policy.checked("a")
    assert policy.extent() == (5, 0) and policy.next_check(0.0) == "b"
    policy.checked("b")
    assert policy.next_check(0.0) == "c"
    policy.checked("c")
    assert policy.extent() == (3, 0) and policy.next_check(0.0) is None  # q back under Q
    policy.closed("b")
    assert list(policy.footprints) == ["a", "c"] and policy.checks == 3


def test_the_policy_checks_while_u_exceeds_u_and_only_inside_ci_slices():
    policy = CheckpointPolicy(CecSettings(q_target=10**6, u_target=5, interval=0.01, period=0.1))
    policy.opened("slow")
    policy.opened("fast")
    policy.took(10)
    assert policy.extent()[1] == 10 and policy.next_check(0.0) == "slow"
    assert policy.next_check(0.009) == "slow"  # still inside the slice [0, 0.01)
    assert policy.next_check(0.02) is None  # the slice's time is spent
    assert policy.next_check(0.099) is None
    assert policy.next_check(0.1) == "slow"  # the next period's slice
    policy.checked("slow")
    assert policy.next_check(0.1) == "fast"  # u of 'fast' is still 10


def test_the_policy_hands_out_as_many_windows_at_once_as_one_by_one():
    def policy():
        p = CheckpointPolicy(CecSettings(q_target=5, u_target=10**6, interval=1.0, period=1.0))
        for w in "abcdefg":
            p.opened(w)
        p.emitted(4)  # q = 11 > max(Q, N) = 7
        return p

    one_by_one, at_once = policy(), policy()
    singles = []
    while (w := one_by_one.next_check(0.0)) is not None:
        singles.append(w)
        one_by_one.checked(w)
    # each G_check is one more output tuple: q stays 11 until every window was checked once
    assert singles == list("abcdefg") and one_by_one.extent()[0] == 7
    assert at_once.next_checks(0.0, 2) == ["a", "b"] and at_once.next_checks(0.0, 10) == list("abcdefg")
    at_once.checked_all(list("abcdefg"))
    assert at_once.extent() == one_by_one.extent() and list(at_once.footprints) == list(one_by_one.footprints)
    assert at_once.next_checks(0.0, 10) == [] and at_once.checks == 7


def test_g_open_only_never_checks_and_bad_knobs_are_refused():
    policy = CheckpointPolicy(CecSettings(q_target=1, g_check=False))
    policy.opened("a")
    policy.opened("b")
    assert policy.next_check(0.0) is None
    with pytest.raises(ValueError, match="CI must be positive and at most CP"):
        CecSettings(interval=0.2, period=0.1)
    with pytest.raises(ValueError, match="Q and U must be at least 1"):
        CecSettings(q_target=0)


def test_control_tuples_are_stored_as_plain_tuples_and_read_back_equal():
    items = [g("open", ("k", 0, 3), (5, 1), 3, 4), g("check", "w", (9, 2), 5), WindowClosed("w"),
             WindowChecks([("k", 0, 3), "w"], [(6, 2), (1, 1)], at(9, 9)),
             FullCheckpoint({"w": (1, 1)}, {"k": 1}, 1, at(7, 8), frozenset({"x"}))]
    stored = encode_items(items)
    assert all(type(entry) is tuple for entry in stored)
    assert [decode_item(entry) for entry in stored] == items
