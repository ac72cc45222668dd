"""One checkpoint or savepoint opened for reading as data: what it holds, and how to split it.

:class:`SnapshotView` opens what ``restore_from`` would accept (a savepoint directory, a
``chk-<n>`` directory, a run or a job directory: :func:`~epochal.state.checkpoint_dirs.find_restore_point`),
reads its metadata, and answers the questions of the DataFrame reader: which operators (by uid)
and state names it holds, which of them are keyed, operator or timer state, and the key-group
ranges a read is split into. Every mistake (a path that is not a checkpoint, an unknown uid or
state name, a state of another kind) is one :class:`StateDataFrameError` that lists what there
is. It opens no state file; :class:`~epochal.state.snapshot.RestoreSource` (what a restoring
job reads with, every backend's format) reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from epochal.errors import EpochalError
from epochal.plan.keygroups import key_group_range
from epochal.state.checkpoint_dirs import find_restore_point
from epochal.state.snapshot import RestoreSource
from epochal.state.storage import CheckpointError, is_savepoint, state_files, storage_of

#: the keyed state that holds an operator's timers (``runtime.operators.timers.TIMERS``)
TIMERS = "__timers__"
#: keyed states whose value per key is ``{window: value}`` (the window operators' own states,
#: and per-window state of a ``ProcessWindowFunction``): read as one row per key and window
WINDOW_STATES = frozenset({"window-contents", "window-timers", "window-join"})
WINDOW_STATE_PREFIX = "window-state:"
KINDS = ("keyed", "operator", "timers")


class StateDataFrameError(EpochalError):
    """A checkpoint or savepoint cannot be read or written as a DataFrame as asked: the path is
    not one, it has no operator of that uid or no state of that name, or a value does not fit."""


def is_window_state(name: str) -> bool:
    """Whether keyed state ``name`` holds ``{window: value}`` per key (its rows get a namespace)."""
    return name in WINDOW_STATES or name.startswith(WINDOW_STATE_PREFIX)


@dataclass(frozen=True)
class ReadPlan:
    """What one read takes from a snapshot: shipped to every Spark task of the read."""

    storage_uri: str
    checkpoint_id: int
    metadata: dict[str, Any]
    uid: str
    kind: str
    #: the state name (keyed: required; operator: a list state's name, or None for all of them)
    state: str | None

    def source(self) -> RestoreSource:
        return RestoreSource(storage_of(self.storage_uri, self.metadata), self.checkpoint_id, self.metadata)


class SnapshotView:
    """The checkpoint or savepoint at ``path`` (what ``restore_from`` accepts), read from its
    metadata. Raises :class:`StateDataFrameError` if ``path`` holds none."""

    def __init__(self, path: str) -> None:
        if not isinstance(path, str) or not path:
            raise StateDataFrameError(f"the path of a checkpoint or savepoint is needed, got {path!r}: pass "
                                      "load('<savepoint directory or .../chk-<n>>') or option('path', ...)")
        try:
            point = find_restore_point(path)
            self.metadata: dict[str, Any] = point.storage.read_metadata(point.checkpoint_id)
        except CheckpointError as error:
            raise StateDataFrameError(
                f"{path} is not a checkpoint or savepoint epochal can read: {error}\nPass a savepoint directory "
                "(what trigger_savepoint returned), a checkpoint's chk-<n> directory, or a job's checkpoint "
                "directory (its latest completed checkpoint is read).") from error
        self.path = path
        self.storage = point.storage
        self.checkpoint_id = point.checkpoint_id
        self.location = point.location
        self.max_parallelism = int(self.metadata.get("max_parallelism") or 0)

    @property
    def operators(self) -> dict[str, dict[str, Any]]:
        return dict(self.metadata.get("operators", {}))

    @property
    def is_savepoint(self) -> bool:
        return is_savepoint(self.metadata)

    # ------------------------------------------------------------------ what it holds
    def keyed_states(self, uid: str) -> dict[str, str]:
        """State name -> state type of operator ``uid``'s keyed states (timers included)."""
        states: dict[str, str] = {}
        for handle in self.operators.get(uid, {}).get("subtasks", {}).values():
            states.update(handle.get("states", {}))
        return states

    def has_operator_state(self, uid: str) -> bool:
        return any("operator" in h for h in self.operators.get(uid, {}).get("subtasks", {}).values())

    def operator_bytes(self, uid: str) -> int:
        total = 0
        for handle in self.operators.get(uid, {}).get("subtasks", {}).values():
            for part in ("keyed", "operator"):
                total += sum(f.get("size", 0) for f in state_files(handle[part])) if part in handle else 0
        return total

    def describe(self) -> str:
        """Every operator and its states, as an error lists them."""
        lines = []
        for uid in sorted(self.operators):
            states = ", ".join(sorted(n for n in self.keyed_states(uid) if n != TIMERS)) or "no keyed state"
            extra = "; timers" if TIMERS in self.keyed_states(uid) else ""
            extra += "; operator state" if self.has_operator_state(uid) else ""
            lines.append(f"  - uid {uid!r}: {states}{extra}")
        return "\n".join(lines) or "  (no operator has state)"

    # ------------------------------------------------------------------ a read
    def plan(self, uid: str | None, kind: str = "keyed", state: str | None = None) -> ReadPlan:
        """The read of ``state`` of operator ``uid`` (``kind``: ``keyed``, ``operator`` or
        ``timers``); a :class:`StateDataFrameError` that lists what there is if it has none."""
        if kind not in KINDS:
            raise StateDataFrameError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        where = f"{'savepoint' if self.is_savepoint else 'checkpoint'} {self.location}"
        if not uid:
            raise StateDataFrameError(f"say which operator's state to read: option('uid', ...). {where} holds:\n"
                                      f"{self.describe()}")
        if uid not in self.operators:
            raise StateDataFrameError(f"{where} holds no state of an operator with uid {uid!r}; it holds:\n"
                                      f"{self.describe()}\nState is found by the operator's uid: the one set "
                                      "with .uid(), else '<operation>:<name>' (epochal.savepoint_info lists them)")
        if kind == "operator":
            if not self.has_operator_state(uid):
                raise StateDataFrameError(f"operator {uid!r} of {where} has no operator state:\n{self.describe()}")
            return ReadPlan(self.storage.uri, self.checkpoint_id, self.metadata, uid, kind, state or None)
        if kind == "timers":
            if TIMERS not in self.keyed_states(uid):
                raise StateDataFrameError(f"operator {uid!r} of {where} has no timers:\n{self.describe()}")
            return ReadPlan(self.storage.uri, self.checkpoint_id, self.metadata, uid, kind, TIMERS)
        names = sorted(n for n in self.keyed_states(uid) if n != TIMERS)
        if not state:
            raise StateDataFrameError(f"say which keyed state of operator {uid!r} to read: option('stateName', ...), "
                                      f"one of {', '.join(map(repr, names)) or '(none)'}")
        if state not in names:
            hint = "; its timers are read with option('kind', 'timers')" if state == TIMERS else ""
            raise StateDataFrameError(f"operator {uid!r} of {where} has no keyed state named {state!r}{hint}; "
                                      f"its keyed states: {', '.join(map(repr, names)) or '(none)'}")
        return ReadPlan(self.storage.uri, self.checkpoint_id, self.metadata, uid, kind, state)

    def splits(self, uid: str, partitions: int | None = None) -> list[range]:
        """Contiguous key-group ranges covering every key group, each inside the range of one old
        subtask of ``uid`` (so a split opens the files of one subtask only), about ``partitions``
        of them (default: at least 8, and at least one per old subtask)."""
        parallelism = int(self.operators[uid].get("parallelism") or len(self.operators[uid]["subtasks"]) or 1)
        maximum = self.max_parallelism
        wanted = max(partitions or 8, parallelism)
        per_subtask = max(1, -(-wanted // parallelism))
        out = []
        for index in range(parallelism):
            owned = key_group_range(index, parallelism, maximum)
            if not owned:
                continue
            cut = min(per_subtask, len(owned))
            for part in range(cut):
                start = owned.start + part * len(owned) // cut
                stop = owned.start + (part + 1) * len(owned) // cut
                out.append(range(start, stop))
        return out
