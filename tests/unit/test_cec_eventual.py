"""CEC's eventual checkpoint from hand-built outputs (closed windows skipped, N footprints found,
T computed, extent counted), exact per-window deduplication by position, and the Q/U and CI/CP
policy for G_check (papers/002 §II.B, §III)."""

from __future__ import annotations

import pytest

from epochal.cec.eventual import EventualCheckpoint, ReconstructionError, reconstruct
from epochal.cec.policy import CecSettings, CheckpointPolicy
from epochal.cec.tuples import Position, WindowCheckpoint, WindowResult, already_counted, is_control


def g(kind, window, state, n, ts, seq=0):
    return WindowCheckpoint(kind, window, state, n, Position(ts, seq))


def r(window, value, n, ts, seq=0):
    return WindowResult(window, value, n, Position(ts, seq))


def test_the_papers_figure_2_closed_windows_are_skipped_and_n_footprints_found():
    # oldest first: wk opens, wi opens, wk checked, wj opens, wk closes, wi checked, wc opens
    output = [g("open", "k", 1, 1, 1.0), g("open", "i", 5, 2, 2.0), g("check", "k", 3, 2, 3.0),
              g("open", "j", 7, 3, 4.0), r("k", 4, 2, 5.0), g("check", "i", 9, 2, 6.0), g("open", "c", 2, 3, 7.0)]
    ec = reconstruct(reversed(output))
    assert set(ec.windows) == {"i", "j", "c"}  # k closed before t_c: its footprints are skipped
    assert ec.windows["i"].state == 9 and ec.windows["i"].kind == "check"  # the newest footprint
    assert ec.replay_after == Position(4.0, 0)  # T: the oldest footprint, w_j's G_open
    assert ec.newest == Position(7.0, 0)
    assert ec.extent == 4  # rolled back over c, i's check, R_k, j's open
    # w_k closed inside the extent: replayed input of it must not open it again
    assert ec.closed == {"k": Position(5.0, 0)}


def test_an_empty_output_or_nothing_open_gives_an_empty_checkpoint():
    assert reconstruct([]) == EventualCheckpoint()
    ec = reconstruct(reversed([g("open", "a", 1, 1, 1.0), r("a", 1, 0, 2.0)]))
    assert ec.windows == {} and ec.replay_after is None and ec.newest == Position(2.0, 0)
    assert ec.closed == {"a": Position(2.0, 0)} and ec.extent == 1


def test_data_tuples_of_other_operators_are_passed_over_and_counted_in_the_extent():
    output = [g("open", "a", 1, 1, 1.0), "x", "y", g("check", "a", 2, 1, 2.0), "z"]
    ec = reconstruct(reversed(output))
    assert ec.windows["a"].state == 2 and ec.extent == 2


def test_a_log_trimmed_past_a_needed_footprint_is_an_error():
    with pytest.raises(ReconstructionError, match="1 of the 2 open windows' checkpoints found"):
        reconstruct(reversed([g("open", "b", 1, 2, 2.0)]))


def test_dedup_by_position_is_exact_where_timestamps_tie():
    footprint = g("check", "a", 10, 1, 5.0, seq=41)
    assert already_counted(footprint, Position(5.0, 41)) and already_counted(footprint, Position(4.0, 99))
    assert not already_counted(footprint, Position(5.0, 42))  # same timestamp, later input
    assert is_control(footprint) and not is_control(r("a", 1, 0, 1.0))


def test_replaying_from_t_and_skipping_counted_input_rebuilds_every_window_exactly():
    """An operator summing values per window (3 inputs close one): checkpoint some windows, crash,
    rebuild the EC from its output, replay the input after T, and every window's result equals
    the failure-free run's."""
    inputs = [(i, f"w{i % 7}-{i // 21}", i * 10) for i in range(63)]  # (seq, window, value); ts = seq

    def run(items, windows=None, output=None, policy_every=4):
        windows = {} if windows is None else windows
        counted = {w: c for w, c in (windows.pop("_counted", {}) or {}).items()}
        output = [] if output is None else output
        for n, (seq, window, value) in enumerate(items):
            pos = Position(float(seq), seq)
            if window in counted and already_counted(counted[window], pos):
                continue
            state = windows.get(window, (0, 0))
            state = (state[0] + value, state[1] + 1)
            if state[1] == 3:
                windows.pop(window, None)
                output.append(WindowResult(window, state[0], len(windows), pos))
            else:
                opening = window not in windows
                windows[window] = state
                if opening:
                    output.append(WindowCheckpoint("open", window, state, len(windows), pos))
                elif n % policy_every == 0:
                    output.append(WindowCheckpoint("check", window, state, len(windows), pos))
        return windows, output

    _, reference = run(inputs)
    expected = {t.window: t.value for t in reference if isinstance(t, WindowResult)}
    crash_after = 40
    _, before = run(inputs[:crash_after])
    ec = reconstruct(reversed(before))
    restored = {w: f.state for w, f in ec.windows.items()}
    restored["_counted"] = dict(ec.windows)
    t = ec.replay_after
    replay = [x for x in inputs if t is None or Position(float(x[0]), x[0]) > t]
    _, after = run(replay, restored, [])
    results = {}
    for tuple_ in before + after:
        if isinstance(tuple_, WindowResult):
            results.setdefault(tuple_.window, set()).add(tuple_.value)
    # every window's result is the failure-free one (re-sent results are dropped downstream by seq)
    assert {w: v for w, v in results.items()} == {w: {v} for w, v in expected.items()}


def test_the_policy_checks_the_oldest_window_while_q_exceeds_q():
    policy = CheckpointPolicy(CecSettings(q_target=4, u_target=10**6, interval=1.0, period=1.0))
    for w in "abc":
        policy.opened(w)
    assert policy.open_windows == 3 and policy.extent() == (3, 2) and policy.next_check(0.0) is None
    policy.emitted(2)  # two more tuples in the output queue: q = 5 > Q
    assert policy.extent() == (5, 2) and policy.next_check(0.0) == "a"  # the oldest footprint first
    policy.checked("a")
    assert policy.extent() == (5, 1) and policy.next_check(0.0) == "b"
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
    for _ in range(10):
        policy.updated()
    assert policy.extent()[1] == 11 and policy.next_check(0.0) == "slow"
    assert policy.next_check(0.009) == "slow"  # still inside the slice [0, 0.01)
    assert policy.next_check(0.02) is None  # the slice's time is spent
    assert policy.next_check(0.099) is None
    assert policy.next_check(0.1) == "slow"  # the next period's slice
    policy.checked("slow")
    assert policy.next_check(0.1) == "fast"  # u of 'fast' is still 10


def test_g_open_only_never_checks_and_bad_knobs_are_refused():
    policy = CheckpointPolicy(CecSettings(q_target=1, g_check=False))
    policy.opened("a")
    policy.opened("b")
    assert policy.next_check(0.0) is None
    with pytest.raises(ValueError, match="CI must be positive and at most CP"):
        CecSettings(interval=0.2, period=0.1)
    with pytest.raises(ValueError, match="Q and U must be at least 1"):
        CecSettings(q_target=0)
