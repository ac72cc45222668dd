"""Copy-on-write of heap state values that a snapshot's copy or a committed view still shares.

The heap backend's snapshot, when a thread of the worker writes it (``snapshot="thread"``, full
or incremental, and a loop head's), copies the per-key-group dicts at the barrier and serialises
the copy later, while the processing thread goes on; a ``read_committed`` view keeps such a copy
too, whatever the snapshot (:func:`epochal.dataflow.queries.shown.views_of`). The copies are
shallow: a value object is shared by the copy and the live state until one of them replaces it.
User code may change such an object in place: an ``AggregateFunction.add`` may change and return
its accumulator (the protocol allows it), a reduce function its first argument, a process
function the dict it read from a ``ValueState`` before writing it back. Changed in place after
the barrier, the object would reach the snapshot with changes of records that come after it (a
restore then counts them twice) and the committed view with values of no completed checkpoint.

So, as Flink's ``CopyOnWriteStateMap`` does, the state objects hand user code a private copy of a
value the copy may share: after each capture, the first access of a key that gives its value to
user code deep-copies it (once per key and capture) and stores the copy in the live table; the
shared object is left to the snapshot. Values that cannot change in place (numbers, strings,
bytes, None, and tuples of those) are never copied. A backend whose tables hand out fresh objects
(RocksDB, PostgreSQL: values are unpickled on every read) never shares, and a forked snapshot's
child has its own image of the state, so neither pays anything.
"""

from __future__ import annotations

import copy
import datetime
import decimal
import fractions
from collections.abc import Iterable, MutableMapping
from typing import Any

__all__ = ["ATOMS", "SharedValues", "frozen", "store_untracked"]

#: types whose objects never change in place
ATOMS = frozenset({int, float, complex, str, bytes, bool, type(None), range, decimal.Decimal, fractions.Fraction,
                   datetime.datetime, datetime.date, datetime.time, datetime.timedelta})


def frozen(value: Any) -> bool:
    """Whether ``value`` cannot change in place: an atom, or a tuple or frozenset of atoms (a
    tuple holding a list may change: it is copied)."""
    kind = type(value)
    if kind in ATOMS:
        return True
    if kind is tuple or kind is frozenset:
        return all(type(item) in ATOMS for item in value)
    return False


class SharedValues(dict[str, set[Any]]):
    """Which states' value objects a capture shares with the live tables (the keys), and which
    keys have had their value copied since (each state's set); one per heap backend, used on
    the processing thread only. A dict, so that the state objects' test for "anything shared?"
    costs what a dict's truth costs.

    Contract: :meth:`share` is called right after every capture that copies a state's tables
    shallowly; :meth:`private` is called, with the state's name and the key (or ``(key, user
    key)`` of a map state) before a value is handed to code that may change it in place.
    """

    def share(self, names: Iterable[str]) -> None:
        """States ``names`` were just captured: every value of theirs is shared again."""
        for name in names:
            self[name] = set()

    def private(self, name: str, key: Any, value: Any, elements: bool = False) -> Any:
        """``value`` (stored for ``key`` in state ``name``) if no capture shares it or it cannot
        change in place, else a deep copy that the caller stores in its place (the first time
        per key and capture only: the copy is the live value from then on, shared by nothing).
        ``elements``: the value is a list state's list, which every capture copies one level
        deep, so only its elements matter."""
        copied = self.get(name)
        if copied is None or type(value) in ATOMS or key in copied:
            return value
        copied.add(key)  # what is not shared now never will be: a later value is a new object
        if all(map(frozen, value)) if elements else frozen(value):
            return value
        return copy.deepcopy(value)


def store_untracked(entries: MutableMapping[Any, Any], key: Any, value: Any) -> None:
    """Put a private copy in the place of the shared object it copies: not a change of the state
    (an incremental checkpoint's tracked dict does not count it)."""
    if isinstance(entries, dict):
        dict.__setitem__(entries, key, value)
    else:
        entries[key] = value
