"""Test sources: :class:`TestSource`, a replayable source of scripted records and markers.

Owns the markers a test writes between records (:data:`END`, :data:`ABORT`, :data:`PAUSE`) and
the split that plays them back. Like every epochal source, a test source's splits report a read
position and seek back to one, so it behaves under checkpoints and restores as real sources do::

    source = TestSource([1, 2, TestSource.PAUSE, 3], ["a", TestSource.END, "b"])   # two splits
    env.from_source(source)

Each positional argument is the item list of one split; split ``j`` is read by subtask
``j % parallelism`` of the source (a subtask reads its splits one after the other; subtasks
without a split end at once). Markers:

* ``TestSource.END``: the split ends here (``read_batch`` returns ``None``). Its position is
  past the marker, so a job restored from a checkpoint taken after it continues with the items
  after it, as Bytewax's ``EOF`` does across executions.
* ``TestSource.PAUSE``: "no data now": the split returns ``[]`` once, as an unbounded source
  with nothing available does, then goes on. Lets a test order what different splits deliver.
* ``TestSource.ABORT``: reading it raises :class:`TestSourceAborted` (every time it is reached),
  which fails the job and names the source: for testing failure handling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from epochal.connectors.base import Source, SourceSplit


class Marker:
    """A scripted event inside a :class:`TestSource`'s items (not a record).

    Markers stay singletons through pickling, so ``item is TestSource.END`` holds on workers too.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"TestSource.{self.name}"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_marker, (self.name,))


#: The split ends here; a restore past this position continues after it.
END = Marker("END")
#: Reading this raises :class:`TestSourceAborted`.
ABORT = Marker("ABORT")
#: The split has nothing right now: ``read_batch`` returns ``[]`` once.
PAUSE = Marker("PAUSE")
_MARKERS = {m.name: m for m in (END, ABORT, PAUSE)}


def _marker(name: str) -> Marker:
    return _MARKERS[name]


class TestSourceAborted(RuntimeError):
    """Raised by a :class:`TestSource` split that reached ``TestSource.ABORT``."""

    __test__ = False  # not a pytest test class


class TestSourceSplit(SourceSplit):
    """One list of items played back in order; its position is the index of the next item."""

    __test__ = False

    def __init__(self, split_id: str, items: list[Any], max_batch: int | None = None) -> None:
        self.split_id = split_id
        self.items = items
        self.max_batch = max_batch
        self.next_index = 0
        self.ended = False

    def read_batch(self, max_records: int) -> list[Any] | None:
        if self.ended:
            return None
        items = self.items
        limit = max_records if self.max_batch is None else min(max_records, self.max_batch)
        out: list[Any] = []
        while self.next_index < len(items) and len(out) < limit:
            item = items[self.next_index]
            if type(item) is Marker:
                if out:
                    return out  # the marker takes effect at the next read
                self.next_index += 1
                if item is PAUSE:
                    return []
                if item is END:
                    self.ended = True
                    return None
                self.next_index -= 1  # ABORT stays where it is: reaching it again raises again
                raise TestSourceAborted(f"{self.split_id} reached TestSource.ABORT at position {self.next_index}")
            out.append(item)
            self.next_index += 1
        if not out and self.next_index >= len(items):
            return None
        return out

    def position(self) -> int:
        return self.next_index

    def seek(self, position: Any) -> None:
        self.next_index = int(position)
        self.ended = False


class TestSource(Source):
    """Scripted records for tests: each positional argument is one split's items (records and
    markers, see the module docstring). ``max_batch`` caps the records one read returns (e.g. 1
    to interleave splits record by record in the local runner)."""

    __test__ = False

    END = END
    ABORT = ABORT
    PAUSE = PAUSE

    def __init__(self, *splits: Sequence[Any], max_batch: int | None = None) -> None:
        for index, items in enumerate(splits):
            if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
                raise TypeError(f"TestSource takes one list of items per split; argument {index} is a "
                                f"{type(items).__name__}: {items!r}")
        if max_batch is not None and (not isinstance(max_batch, int) or max_batch < 1):
            raise ValueError(f"max_batch must be a positive int or None, got {max_batch!r}")
        self.splits = [list(items) for items in splits] or [[]]
        self.max_batch = max_batch

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [TestSourceSplit(f"test-{j}", items, self.max_batch) for j, items in enumerate(self.splits)]

    def records(self) -> list[Any]:
        """Every record of every split (markers left out), split after split."""
        return [item for items in self.splits for item in items if type(item) is not Marker]
