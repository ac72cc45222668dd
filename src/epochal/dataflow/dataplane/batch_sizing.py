"""Batches sized by time as well as by count (Flink's buffer debloating, papers/001 §3.2).

A barrier waits behind every record ahead of it: the rest of the source batch being processed,
and the batches in flight on each channel (up to ``channel_credits`` of them). With batches of
``batch_size`` records only, that wait, and so the checkpoint interval and end-to-end latency,
follows the batch size and the operators' speed, not the configuration: 1,024 records of a
2 ms/record operator are 2 s per batch. With ``EngineConfig.batch_time`` set, every subtask
measures what a record costs it (:class:`BatchSizer`, fed the seconds each batch took) and
keeps batches to about a target time of that work:

* a source subtask reads at most ``batch_time / cost`` records per poll (its chained operators'
  cost, so a barrier waits at most about ``batch_time`` behind one);
* a consumer announces, with every credit it returns, the batch size it wants on its input
  channels: ``batch_time / (channel_credits * cost)``, so the credits' worth of batches in flight
  on a channel holds about ``batch_time`` of its work; the producer cuts its batches for that
  channel to it (:class:`~epochal.dataflow.dataplane.chains.EdgeOutput`).

Both are also capped by what the subtask's own outputs take per batch (:func:`output_capacity`),
so a fast operator in front of a slow one does not fill its outputs' queues faster than they
drain, and the sizes propagate upstream as backpressure does. Fast jobs are not changed: their
cost per record is far below the target, so their batches stay at ``batch_size``.

:class:`BatchSizer` is a pure machine: measured times in, a size out; no clock of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: Records per batch before anything was measured: small, so that a slow operator's first
#: batches do not hold barriers back for long; it grows by at most :data:`GROWTH` per batch.
INITIAL_SIZE = 32
#: How much a size may grow from one batch to the next (it shrinks at once).
GROWTH = 4
#: Weight of the newest batch in the cost per record (an exponentially weighted moving average).
SMOOTHING = 0.3


class BatchSizer:
    """How many records a subtask's next batch should hold so that it costs about ``target``
    seconds of its work, between 1 and ``limit`` (``batch_size``).

    ``observe(records, seconds)`` after each batch; ``size`` then says how big the next may be.
    The cost per record is a moving average (weight :data:`SMOOTHING` for the newest batch), so a
    single hiccup (a fork, a pause of the machine) moves it only part of the way; a smaller size
    applies at once, a larger one grows by at most :data:`GROWTH` per batch from the last size.
    Without a ``target`` (``batch_time=None``) the size is always ``limit``. ``busy_s`` sums
    every batch's seconds: the subtask's busy time, which the REST API and the dashboard show as
    a share of wall time (Flink's ``busyTimeMsPerSecond``).
    """

    __slots__ = ("limit", "target", "cost", "_size", "busy_s")

    def __init__(self, limit: int, target: float | None, initial: int = INITIAL_SIZE) -> None:
        self.limit = limit
        self.target = target
        #: seconds per record, averaged; None until a batch was measured
        self.cost: float | None = None
        self._size = limit if target is None else max(1, min(limit, initial))
        self.busy_s = 0.0

    @property
    def size(self) -> int:
        return self._size

    def observe(self, records: int, seconds: float) -> int:
        """A batch of ``records`` took ``seconds``; returns the size for the next one."""
        self.busy_s += seconds
        if self.target is None or records <= 0:
            return self._size
        cost = max(seconds, 0.0) / records
        self.cost = cost if self.cost is None else self.cost + SMOOTHING * (cost - self.cost)
        wanted = self.limit if self.cost <= 0 else int(self.target / self.cost)
        self._size = max(1, min(self.limit, wanted, self._size * GROWTH))
        return self._size


def output_capacity(outputs: Iterable[Any], limit: int) -> int:
    """Records one batch of a subtask may emit without queueing more than a batch per channel
    behind its outputs: per edge output, the sum of its channels' announced sizes (the smallest
    one for a broadcast, where every record goes to every channel); the smallest over outputs.
    ``limit`` when the subtask has no outputs (a sink)."""
    capacity = limit
    for output in outputs:
        sizes = [channel.batch_size for channel in output.channels]
        if sizes:
            total = min(sizes) if output.partitioner.strategy == "broadcast" else sum(sizes)
            capacity = min(capacity, total)
    return max(1, capacity)
