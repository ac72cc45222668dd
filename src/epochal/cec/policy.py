"""When to emit G_check, and for which window (papers/002 §III, §III.A): a pure state machine.

The operator keeps its open windows ordered by tau2, the time of each window's newest footprint
(G_open or G_check); the oldest is at the end of the extent, so it is the one to checkpoint
next. Alongside, two counters: tuples the operator has *emitted* (results and control tuples,
everything in its output queue) and input tuples it has *consumed*. For the oldest window:

- ``q`` (extent) = tuples emitted since its footprint: what EC reconstruction would roll back over;
- ``u`` (replay) = input consumed since its footprint: what upstream would replay.

The background path checkpoints the oldest window while ``q > Q`` or ``u > U`` (and ``q > N``:
the extent never falls below one footprint per open window), but only inside
slices of ``CI`` seconds that start every ``CP`` seconds, so checkpointing never takes more than
CI/CP of the operator's time. ``g_check=False`` turns G_check off (G_open only: minimum recovery
guarantees, the paper's baseline setting). The machine has no clock: the operator passes ``now``.

Events in: :meth:`took` (input), :meth:`opened`, :meth:`closed` (the foreground path),
:meth:`emitted` (any other output), :meth:`restored` (after a recovery). Decision out:
:meth:`next_checks` (the windows to G_check now, oldest first; :meth:`next_check` for one),
after which the operator emits the G_checks and reports them with :meth:`checked_all`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from itertools import repeat


@dataclass(frozen=True)
class CecSettings:
    """CEC's knobs (papers/002 §III): targets ``q_target`` (Q, tuples of extent) and
    ``u_target`` (U, input tuples to replay), ``interval`` (CI, seconds of checkpointing per
    slice) and ``period`` (CP, seconds between slice starts); ``g_check=False``: G_open only."""

    q_target: int = 1_000
    u_target: int = 1_000_000
    interval: float = 0.005
    period: float = 0.1
    g_check: bool = True
    #: exist only to show each mechanism is needed (the chaos tests turn them off): no G_open
    #: when a window opens; no per-window dedup of replayed input after a recovery
    g_open: bool = True
    dedup: bool = True

    def __post_init__(self) -> None:
        if self.q_target < 1 or self.u_target < 1:
            raise ValueError(f"Q and U must be at least 1 (got Q={self.q_target}, U={self.u_target})")
        if not 0 < self.interval <= self.period:
            raise ValueError(f"CI must be positive and at most CP (got CI={self.interval}, CP={self.period})")


class CheckpointPolicy:
    """The Q/U and CI/CP policy of one operator instance (see the module docstring)."""

    def __init__(self, settings: CecSettings) -> None:
        self.settings = settings
        #: open window -> (emitted, consumed) at its newest footprint; oldest footprint first
        self.footprints: OrderedDict[Hashable, tuple[int, int]] = OrderedDict()
        self.emitted_count = 0
        self.consumed = 0
        self.slice_start: float | None = None
        self.checks = 0

    # ------------------------------------------------------------------ foreground events
    def took(self, count: int = 1) -> None:
        """The operator consumed ``count`` input tuples."""
        self.consumed += count

    def opened(self, window: Hashable) -> None:
        """A window opened; the operator emitted its G_open (counted here)."""
        self.emitted_count += 1
        self.footprints[window] = (self.emitted_count, self.consumed)

    def closed(self, window: Hashable) -> None:
        """A window closed; the operator emitted its R (counted here)."""
        self.emitted_count += 1
        self.footprints.pop(window, None)

    def emitted(self, count: int = 1) -> None:
        """Other tuples went to the output queue."""
        self.emitted_count += count

    def restored(self, windows: list[Hashable], extent: int) -> None:
        """After a recovery: ``windows`` (oldest footprint first) came back from an eventual
        checkpoint whose footprints lie up to ``extent`` tuples back in the output queue."""
        base = self.emitted_count - extent
        # (~100,000 windows after a crash: the pairs are built by zip, not a Python loop)
        self.footprints.update(zip(windows, zip(range(base, base + len(windows)), repeat(self.consumed)),
                                   strict=False))

    # ------------------------------------------------------------------ accounting
    @property
    def open_windows(self) -> int:
        """N: windows open now."""
        return len(self.footprints)

    def extent(self) -> tuple[int, int]:
        """``(q, u)`` now: output tuples and input tuples since the oldest open window's footprint."""
        if not self.footprints:
            return 0, 0
        emitted, consumed = next(iter(self.footprints.values()))
        return self.emitted_count - emitted + 1, self.consumed - consumed

    # ------------------------------------------------------------------ background path
    def next_check(self, now: float) -> Hashable | None:
        """The window to G_check now, or None: the oldest window, while q > Q or u > U, inside
        the current CI slice (a new slice starts once CP has passed since the last began)."""
        windows = self.next_checks(now, 1)
        return windows[0] if windows else None

    def next_checks(self, now: float, limit: int) -> list[Hashable]:
        """Up to ``limit`` windows to G_check now, oldest footprint first: as many as
        :meth:`next_check` would give one after another if each were checked at once (every
        G_check moves its window to the newest end and is one more tuple of output)."""
        settings, footprints = self.settings, self.footprints
        if not settings.g_check or not footprints:
            return []
        start = self.slice_start
        if start is not None and start + settings.interval <= now < start + settings.period:
            return []  # this slice's time is spent (the driver asks after every input event)
        # q cannot fall below N (one footprint per open window): a Q under N checks no further
        q_bound, u_bound = max(settings.q_target, len(footprints)), settings.u_target
        out: list[Hashable] = []
        append, taken = out.append, 0
        # due while q > Q (emitted_now - emitted + 1 > q_bound, emitted_now rising by one per
        # window taken) or u > U (consumed_now - consumed > u_bound), as bounds on the footprint
        q_due_below, u_due_below = self.emitted_count + 1 - q_bound, self.consumed - u_bound
        for window, (emitted, consumed) in footprints.items():
            if taken == limit or (emitted >= q_due_below and consumed >= u_due_below):
                break
            append(window)
            taken += 1
            q_due_below += 1
        if not out:
            return out
        if start is None or now >= start + settings.period:
            self.slice_start = now  # a new slice (a spent one returned above; 0 < CI <= CP)
        return out

    def checked(self, window: Hashable) -> None:
        """The operator emitted a G_check of ``window``: it moves to the newest end."""
        self.checked_all([window])

    def checked_all(self, windows: list[Hashable]) -> None:
        """The operator emitted G_checks of ``windows``, in this order."""
        footprints, consumed, emitted = self.footprints, self.consumed, self.emitted_count
        move_to_end = footprints.move_to_end
        for window in windows:
            emitted += 1
            if window in footprints:
                footprints[window] = (emitted, consumed)
                move_to_end(window)
        self.emitted_count = emitted
        self.checks += len(windows)
