"""The writers of :class:`~epochal.connectors.kafka.sink.KafkaSink`.

:class:`KafkaAtLeastOnceWriter` is an idempotent producer flushed at every barrier.
:class:`KafkaTransactionalWriter` runs two-phase commit with Kafka transactions and commit
markers; the module docstring of :mod:`epochal.connectors.kafka.sink` explains the protocol.
A writer knows its sink by :class:`SinkSettings`, what it reads of it: the sink module imports
this one, never the other way round.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, NamedTuple, Protocol

from epochal.connectors.base import SinkContext, SinkWriter, TransactionalSinkWriter
from epochal.connectors.kafka.common import KafkaError, client_config

#: ``(topic, key, value, partition, headers)``: a record as the writers send it and the
#: exactly-once committables keep it
Serialized = tuple[str, bytes | None, bytes | None, int | None, Any]

#: Seconds a flush, an init or a commit may take before the job fails (and restarts).
OPERATION_TIMEOUT = 60.0
#: Seconds past its own timeout a transactional call may block before the writer gives up on it:
#: librdkafka's transactional calls can block far beyond their timeout once the transaction
#: coordinator was lost (confluentinc/librdkafka#3779; seen here after a broker restart: a
#: commit_transaction(60 s) still blocked 300 s later, the job neither failing nor moving).
STUCK_MARGIN = 15.0
#: Seconds (at most the sink's ``operation_timeout`` + STUCK_MARGIN) that marking or committing an epoch's
#: transaction may take before the writer replaces its producer and commits the epoch again from
#: its records, in the running attempt. After a broker restart librdkafka's producer can keep a
#: stale group coordinator and never send the marker, whatever the call's timeout
#: (confluentinc/librdkafka#5456 and #5511; 13 of 16 broker restarts of the chaos test did this
#: to a subtask): a fresh producer finds the coordinator again within a second.
RECOVER_AFTER: float | None = 10.0  # (None: no recovery; the job restarts instead)

log = logging.getLogger(__name__)


class SinkSettings(Protocol):
    """What a writer reads of its sink: the settings of a
    :class:`~epochal.connectors.kafka.sink.KafkaSink` (which the sink passes as itself) and how it
    serialises records."""

    @property
    def bootstrap_servers(self) -> str: ...
    @property
    def config(self) -> dict[str, Any]:
        """Further librdkafka producer settings."""
    @property
    def operation_timeout(self) -> float:
        """Seconds one call to the broker may take."""
    @property
    def transaction_timeout(self) -> float:
        """Exactly once: seconds the broker keeps a transaction open."""
    @property
    def transactional_id_prefix(self) -> str | None:
        """Exactly once: the prefix of the transactional ids (``<prefix>-<subtask>``)."""

    def serialize_batch(self, records: list[Any]) -> list[Serialized]:
        """``(topic, key, value, partition, headers)`` of each of ``records``."""


class StuckCall(KafkaError):
    """A Kafka client call (``what``) that did not return within ``limit`` seconds (:func:`bounded`)."""

    def __init__(self, what: str, limit: float) -> None:
        super().__init__(f"KafkaSink: {what} did not return within {limit:g} s (the Kafka client is stuck, as "
                         "librdkafka's transactional calls can be after the transaction coordinator was lost); "
                         "the job restarts from its latest checkpoint")
        self.what, self.limit = what, limit


def bounded(action: Any, limit: float, what: str) -> Any:
    """``action()`` on a thread of its own, waited for at most ``limit`` seconds: its result, or
    what it raised; past ``limit`` a :class:`StuckCall` (its thread is left behind: fencing the
    producer ends it). Unless the writer recovers from it, the job fails and restarts from its
    latest checkpoint, whose new producers fence the stuck one."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, action()))
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            outcome.append((False, error))

    thread = threading.Thread(target=run, name="epochal-kafka-call", daemon=True)
    thread.start()
    thread.join(limit)
    if not outcome:
        raise StuckCall(what, limit)
    done, value = outcome[0]
    if not done:
        raise value
    return value


class Committable(NamedTuple):
    """One epoch's transaction: its id, the job and checkpoint it belongs to, the topic whose
    partition 0 holds its marker, and its records (the write-ahead log a restore may need)."""

    transactional_id: str
    job_id: str
    checkpoint_id: int
    marker_topic: str
    records: list[Serialized]


class _Producer:
    """A ``confluent_kafka.Producer`` whose failed deliveries are collected and raised at flush."""

    def __init__(self, config: dict[str, Any], timeout: float = OPERATION_TIMEOUT) -> None:
        from confluent_kafka import Producer

        self.timeout = timeout
        self.failures: list[str] = []
        self.producer = Producer({**config, "delivery.report.only.error": True, "on_delivery": self._delivered})

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failures.append(f"topic '{message.topic()}' partition {message.partition()}: {error.str()}")

    def send(self, records: list[Serialized]) -> None:
        produce, poll = self.producer.produce, self.producer.poll
        for topic, key, value, partition, headers in records:
            if partition is None and not headers:  # the common case: no keyword arguments to build
                try:
                    produce(topic, value, key)
                    continue
                except BufferError:
                    pass
            kwargs: dict[str, Any] = {}
            if partition is not None:
                kwargs["partition"] = partition
            if headers:
                kwargs["headers"] = headers
            while True:
                try:
                    produce(topic, value, key, **kwargs)
                    break
                except BufferError:  # librdkafka's queue is full: let it drain
                    poll(0.05)
        poll(0)

    def flush(self, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while self.producer.flush(1.0) > 0:
            if time.monotonic() > deadline:
                raise KafkaError(f"{what}: records not delivered within {self.timeout:g} s (broker unreachable?)")
        if self.failures:
            failures, self.failures = self.failures, []
            raise KafkaError(f"{what}: {len(failures)} record(s) not delivered, first: {failures[0]}")


class KafkaAtLeastOnceWriter(SinkWriter):
    """Produces as records arrive; ``flush`` (at every barrier) waits until all are acknowledged."""

    def __init__(self, sink: SinkSettings, context: SinkContext) -> None:
        self.sink = sink
        self.producer = _Producer(client_config(sink.bootstrap_servers, sink.config, **{
            "enable.idempotence": True, "linger.ms": 5, "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000}), sink.operation_timeout)

    def write_batch(self, records: list[Any]) -> None:
        self.producer.send(self.sink.serialize_batch(records))

    def flush(self) -> None:
        self.producer.flush("KafkaSink")


class KafkaTransactionalWriter(TransactionalSinkWriter):
    """Two-phase commit with one Kafka transaction per subtask and checkpoint.

    Records go into the open transaction as they arrive and are kept as the epoch's write-ahead
    log. ``pre_commit`` flushes them and adds the commit marker; the transaction stays open
    until ``commit``. Records that arrive in between wait in memory; a barrier that comes before
    the previous checkpoint's commit makes them a *queued* committable, written in a transaction
    of its own when its checkpoint commits. Records open the next transaction only once nothing
    pre-committed awaits its commit (a producer has one transaction at a time).
    """

    def __init__(self, sink: SinkSettings, context: SinkContext) -> None:
        self.sink = sink
        self.context = context
        self.transactional_id = f"{sink.transactional_id_prefix}-{context.subtask_index}"
        self.producer: _Producer | None = None
        self.in_transaction = False
        #: the records of the open transaction
        self.epoch: list[Serialized] = []
        #: the open transaction's committable once pre-committed (awaiting commit)
        self.live: Committable | None = None
        #: records that arrived after ``live`` (or a queued committable) was pre-committed
        self.waiting: list[Serialized] = []
        #: committables pre-committed from ``waiting`` (nothing sent yet), awaiting their commit
        self.queued: list[Committable] = []
        self.markers: Any = None  # the consumer whose group metadata commits markers

    # ------------------------------------------------------------------ producers
    def _config(self, transactional_id: str) -> dict[str, Any]:
        sink = self.sink
        return client_config(sink.bootstrap_servers, sink.config, **{
            "transactional.id": transactional_id, "transaction.timeout.ms": int(sink.transaction_timeout * 1000),
            "linger.ms": 5, "batch.num.messages": 10000, "queue.buffering.max.messages": 1_000_000})

    def _init(self, transactional_id: str) -> _Producer:
        """A producer of ``transactional_id``, initialised: the broker fences every earlier
        producer of the id and aborts the transaction it left open."""
        producer = _Producer(self._config(transactional_id), self.sink.operation_timeout)
        self._call(lambda: producer.producer.init_transactions(self.sink.operation_timeout), transactional_id,
                   "initialising")
        return producer

    def _own(self) -> _Producer:
        if self.producer is None:
            self.producer = self._init(self.transactional_id)
        return self.producer

    def _call(self, action: Any, transactional_id: str, doing: str, limit: float | None = None) -> Any:
        """``action()``, bounded by ``limit`` (default: the operation timeout and its margin);
        librdkafka's errors become :class:`KafkaError` saying what failed."""
        from confluent_kafka import KafkaException

        try:
            return bounded(action, limit or self.sink.operation_timeout + STUCK_MARGIN,
                           f"{doing} the transaction of '{transactional_id}'")
        except KafkaException as exception:
            error = exception.args[0]
            codes = type(error)
            if error.code() in (codes._FENCED, codes.PRODUCER_FENCED, codes.INVALID_PRODUCER_EPOCH):
                raise KafkaError(
                    f"KafkaSink: the producer of transactional id '{transactional_id}' was fenced while {doing} a "
                    "transaction: a newer attempt of this job, or another job using transactional_id_prefix "
                    f"'{self.sink.transactional_id_prefix}', took it over") from None
            failure = KafkaError(f"KafkaSink: {doing} the transaction of '{transactional_id}' failed: {error.str()}")
            failure.abortable = bool(error.txn_requires_abort())
            raise failure from None

    def _marker_consumer(self, transactional_id: str) -> Any:
        from confluent_kafka import Consumer

        return Consumer(client_config(self.sink.bootstrap_servers, self.sink.config, **{
            "group.id": transactional_id, "enable.auto.commit": False, "isolation.level": "read_committed"}))

    def _commit_with_marker(self, producer: _Producer, committable: Committable, markers: Any,
                            limit: float | None = None) -> None:
        """Add the marker to the open transaction and commit it (each call within ``limit``)."""
        from confluent_kafka import TopicPartition

        tid = committable.transactional_id
        marker = TopicPartition(committable.marker_topic, 0, committable.checkpoint_id,
                                f"{committable.job_id}:{committable.checkpoint_id}")
        self._call(lambda: producer.producer.send_offsets_to_transaction(
            [marker], markers.consumer_group_metadata(), self.sink.operation_timeout), tid, "marking", limit)
        self._call(lambda: producer.producer.commit_transaction(self.sink.operation_timeout), tid, "committing",
                   limit)

    def _write_again(self, producer: _Producer, committable: Committable, markers: Any,
                     limit: float | None = None) -> None:
        """Write an epoch's records in a new transaction and commit it with its marker."""
        tid = committable.transactional_id
        self._call(producer.producer.begin_transaction, tid, "beginning")
        producer.send(committable.records)
        producer.flush(f"KafkaSink ({tid})")
        self._commit_with_marker(producer, committable, markers, limit)

    # ------------------------------------------------------------------ the epoch
    def write_batch(self, records: list[Any]) -> None:
        serialized = self.sink.serialize_batch(records)
        if self.live is not None or self.queued:
            self.waiting.extend(serialized)
            return
        self._send(serialized)

    def _send(self, serialized: list[Serialized]) -> None:
        if not serialized:
            return
        producer = self._own()
        if not self.in_transaction:
            self._call(producer.producer.begin_transaction, self.transactional_id, "beginning")
            self.in_transaction = True
        producer.send(serialized)
        self.epoch.extend(serialized)

    def pre_commit(self, checkpoint_id: int) -> Any:
        job = self.context.job_id
        if self.live is None and not self.queued:
            if not self.epoch:
                return None
            self._own().flush(f"KafkaSink ({self.transactional_id})")
            self.live = Committable(self.transactional_id, job, checkpoint_id, self.epoch[0][0], self.epoch)
            self.epoch = []
            return self.live
        if not self.waiting:  # the previous epoch still awaits its commit; this one wrote nothing
            return None
        committable = Committable(self.transactional_id, job, checkpoint_id, self.waiting[0][0], self.waiting)
        self.waiting = []
        self.queued.append(committable)
        return committable

    def commit(self, committables: list[Any]) -> None:
        """Commit ``committables`` in checkpoint order. Marking or committing one that takes longer
        than :data:`RECOVER_AFTER` replaces the producer once and commits what did not commit
        again from the records (:meth:`_recover`); what fails then fails the job."""
        ordered = sorted(committables, key=lambda c: c.checkpoint_id)
        recover_after = RECOVER_AFTER
        limit = None if recover_after is None else min(recover_after, self.sink.operation_timeout + STUCK_MARGIN)
        try:
            markers = self._markers()
            for committable in ordered:
                if self.live is not None and committable.checkpoint_id == self.live.checkpoint_id:
                    self._commit_live(markers, limit)
                else:  # an epoch pre-committed while an earlier one awaited its commit
                    self._write_again(self._own(), committable, markers, limit)
        except StuckCall as stuck:
            if recover_after is None:
                raise
            log.warning("KafkaSink: %s did not return within %g s; committing checkpoint %s with a new producer",
                        stuck.what, stuck.limit, ordered[-1].checkpoint_id)
            self._recover(ordered)
        done = {c.checkpoint_id for c in ordered}
        self.queued = [c for c in self.queued if c.checkpoint_id not in done]
        if self.live is None and not self.queued and self.waiting:
            waiting, self.waiting = self.waiting, []
            self._send(waiting)

    def _commit_live(self, markers: Any, limit: float | None = None) -> None:
        live, producer = self.live, self._own()
        assert live is not None
        try:
            self._commit_with_marker(producer, live, markers, limit)
        except KafkaError as error:
            if not error.abortable:  # (a StuckCall never is: commit() recovers from it)
                raise
            # the broker aborted the transaction (it timed out, or lost it in a restart): abort
            # here too and write the epoch again from its records
            self._call(lambda: producer.producer.abort_transaction(self.sink.operation_timeout), self.transactional_id,
                       "aborting")
            self._write_again(producer, live, markers, limit)
        self.live = None
        self.in_transaction = False

    def _recover(self, committables: list[Committable]) -> None:
        """After a stuck call: a new producer of this subtask's id fences the stuck one (which ends
        its call) and settles its transaction (committed if its commit reached the broker, else
        aborted); then every committable whose marker does not show it committed is written
        again from its records, in order, as a restore does. Records waiting for the next
        transaction stay waiting. Anything that fails here fails the job (no second recovery)."""
        old_markers = self.markers  # (a consumer that may know the stale coordinator too)
        # the stuck producer is dropped: its call's thread holds it until the fence ends the call
        self.producer, self.markers, self.live, self.in_transaction = None, None, None, False
        if old_markers is not None:
            threading.Thread(target=old_markers.close, name="epochal-kafka-close", daemon=True).start()
        self._write_uncommitted(self._own(), committables, self._markers())

    def _write_uncommitted(self, producer: _Producer, committables: list[Committable], markers: Any) -> None:
        """Write again, in checkpoint order, each of ``committables`` whose marker does not show
        it committed (after a restore, or a recovery in place; see :meth:`_committed`)."""
        for committable in sorted(committables, key=lambda c: c.checkpoint_id):
            if not self._committed(markers, committable):
                self._write_again(producer, committable, markers)

    def _markers(self) -> Any:
        if self.markers is None:
            self.markers = self._marker_consumer(self.transactional_id)
        return self.markers

    # ------------------------------------------------------------------ after a restore
    def restore_committables(self, committables: list[Any]) -> None:
        """Commit the restored checkpoint's transactions that did not commit (from their records),
        and abort every transaction an earlier attempt left open under this subtask's id or the
        ids of subtasks a downscale removed."""
        by_id: dict[str, list[Committable]] = {}
        for committable in committables:
            by_id.setdefault(committable.transactional_id, []).append(committable)
        context = self.context
        prefix = self.sink.transactional_id_prefix
        old = context.restored_parallelism or 0
        for index in range(context.parallelism, old):  # subtasks removed by a downscale
            if index % context.parallelism == context.subtask_index:
                by_id.setdefault(f"{prefix}-{index}", [])
        by_id.setdefault(self.transactional_id, [])
        for transactional_id, mine in sorted(by_id.items()):
            own = transactional_id == self.transactional_id
            producer = self._own() if own else self._init(transactional_id)  # fences, aborts the open one
            if not mine:
                continue
            markers = self._markers() if own else self._marker_consumer(transactional_id)
            try:
                self._write_uncommitted(producer, mine, markers)
            finally:
                if not own:
                    markers.close()

    def _committed(self, markers: Any, committable: Committable) -> bool:
        """Whether the marker shows ``committable``'s transaction (or a later one of its job) committed."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            found = markers.committed([TopicPartition(committable.marker_topic, 0)],
                                      timeout=self.sink.operation_timeout)[0]
        except KafkaException as exception:
            raise KafkaError(f"KafkaSink: reading the commit marker of '{committable.transactional_id}' failed: "
                             f"{exception.args[0].str()}") from None
        job, _, checkpoint = (found.metadata or "").partition(":")
        return job == committable.job_id and checkpoint.isdigit() and int(checkpoint) >= committable.checkpoint_id

    def close(self) -> None:
        """Abort the open transaction (a failure, or the end without a commit); best effort."""
        if self.producer is not None and self.in_transaction:
            try:
                self.producer.producer.abort_transaction(5.0)
            except Exception:
                pass
        if self.markers is not None:
            try:
                self.markers.close()
            except Exception:
                pass
