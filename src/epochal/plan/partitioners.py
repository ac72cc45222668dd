"""How records of one producer subtask are divided among the consumer subtasks of an edge.

A partitioner works on a whole batch at once and returns one list per consumer channel (empty
lists are skipped by the caller). Each producer subtask gets its own copy, so stateful
partitioners (round robin) need no locking.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from epochal.errors import each, note_record
from epochal.plan.keygroups import key_groups_of


class Partitioner(ABC):
    """Divides a batch among ``n`` consumer channels."""

    #: A short name shown in plans and errors.
    strategy: str = "custom"
    #: Forward edges connect subtask i only to subtask i (and allow chaining).
    is_forward: bool = False

    @abstractmethod
    def split(self, batch: list[Any], n: int) -> list[list[Any]]:
        """Return ``n`` lists whose concatenation is a permutation of ``batch`` (order kept per list)."""


class ForwardPartitioner(Partitioner):
    """Subtask i sends to subtask i: the edge has exactly one channel per producer."""

    strategy = "forward"
    is_forward = True

    def split(self, batch: list[Any], n: int) -> list[list[Any]]:
        return [batch]


class RebalancePartitioner(Partitioner):
    """Round robin, record by record, continuing where the previous batch stopped."""

    strategy = "rebalance"

    def __init__(self) -> None:
        self.next_target = 0

    def split(self, batch: list[Any], n: int) -> list[list[Any]]:
        start = self.next_target % n
        self.next_target = (start + len(batch)) % n
        # record k of the batch goes to target (start + k) % n
        return [batch[(target - start) % n::n] for target in range(n)]


class BroadcastPartitioner(Partitioner):
    """Every consumer subtask receives every record."""

    strategy = "broadcast"

    def split(self, batch: list[Any], n: int) -> list[list[Any]]:
        return [batch] * n


class KeyGroupPartitioner(Partitioner):
    """Sends a record to the subtask that owns its key's key group (papers/001 §3.1.2)."""

    strategy = "hash"

    def __init__(self, key_selector: Callable[[Any], Any], max_parallelism: int) -> None:
        self.key_selector = key_selector
        self.max_parallelism = max_parallelism
        self._owners: tuple[int, list[int]] = (0, [])

    def _owner_table(self, n: int) -> list[int]:
        """Key group -> consumer index for ``n`` consumers, computed once."""
        if self._owners[0] != n:
            self._owners = (n, [group * n // self.max_parallelism for group in range(self.max_parallelism)])
        return self._owners[1]

    def split(self, batch: list[Any], n: int) -> list[list[Any]]:
        targets: list[list[Any]] = [[] for _ in range(n)]
        owners = self._owner_table(n)
        appends = [target.append for target in targets]
        groups = key_groups_of(each(self.key_selector, batch), self.max_parallelism)
        for record, group in zip(batch, groups, strict=True):
            appends[owners[group]](record)
        return targets


class CustomPartitioner(Partitioner):
    """``partition(key, n) -> index`` chooses the consumer for each record's key."""

    strategy = "custom"

    def __init__(self, partition: Callable[[Any, int], int], key_selector: Callable[[Any], Any]) -> None:
        self.partition = partition
        self.key_selector = key_selector

    def split(self, batch: list[Any], n: int) -> list[list[Any]]:
        targets: list[list[Any]] = [[] for _ in range(n)]
        partition = self.partition
        selector = self.key_selector
        record = None
        try:
            for record in batch:
                index = partition(selector(record), n)
                if not 0 <= index < n:
                    raise ValueError(f"custom partitioner returned {index!r}, expected an index in 0..{n - 1}")
                targets[index].append(record)
        except Exception as error:
            note_record(error, record)
            raise
        return targets
