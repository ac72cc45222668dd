"""KafkaSource's reader and KafkaSink's writers against the real test broker, without Spark:
start offsets, bounded reads, records' fields, watermarks per partition and idleness, partitions
added while reading, offsets committed on checkpoint completion, transactions (commit markers,
restore, lingering ones aborted after a downscale), a fenced producer's error, and a commit stuck
after a broker restart done by a new producer."""

from __future__ import annotations

import json
import time

import pytest

from epochal.connectors.base import JobSettings, ReaderContext, SinkContext
from epochal.connectors.kafka import KafkaError, KafkaSink, KafkaSource, UndecodableRecord
from epochal.errors import PlanError
from epochal.runtime.operators.functions import OutputTag
from tests.kafka_helpers import QUIET, new_topic, open_transactions_block, produce, read_committed


def read_all(reader, want: int, timeout: float = 20.0) -> list:
    out, deadline = [], time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        batch = reader.read_batch(1000)
        if batch is None:
            break
        out.extend(batch)
        if not batch:
            time.sleep(0.02)
    return out


def reader_of(source, parallelism=1, index=0, restored=None, was_restored=False):
    splits = source.create_splits(parallelism)[index::parallelism]
    return source.create_reader(splits, restored or {}, ReaderContext("src", index, parallelism, was_restored))


def test_records_carry_key_value_topic_partition_offset_timestamp_and_headers(kafka_broker):
    from confluent_kafka import Producer

    topic = new_topic(kafka_broker)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, **QUIET})
    producer.produce(topic, json.dumps({"a": 1}).encode(), b"k1", timestamp=1234, headers=[("h", b"v")])
    producer.flush(10)
    source = KafkaSource(kafka_broker.bootstrap, topic, bounded=True, key_deserializer="str", value_deserializer="json",
                         config=QUIET)
    reader = reader_of(source)
    assert source.progress_unit == "offsets" and reader.progress() == (0, 1)  # bounded: its end known
    [record] = read_all(reader, 1)
    assert (record.key, record.value, record.topic, record.partition, record.offset, record.timestamp,
            record.headers) == ("k1", {"a": 1}, topic, 0, 0, 1234, [("h", b"v")])
    assert read_all(reader, 1, timeout=5) == []  # bounded: ended
    assert reader.progress() == (1, 1)
    assert reader.read_batch(10) is None
    reader.close()


def test_start_from_earliest_latest_timestamp_and_committed_offsets(kafka_broker):
    topic = new_topic(kafka_broker)
    produce(kafka_broker, topic, [str(i) for i in range(10)], timestamps=[1000 + 100 * i for i in range(10)])

    def starts(**options):
        return [s.start for s in KafkaSource(kafka_broker.bootstrap, [topic], config=QUIET, **options).create_splits(1)]

    assert starts() == [0]
    assert starts(starting_offsets="latest") == [10]
    assert starts(starting_offsets=1450) == [5]  # the first record at or after 1450 ms
    group = f"g-{topic}"
    assert starts(starting_offsets="committed", group_id=group) == [0]  # no committed offset: earliest
    source = KafkaSource(kafka_broker.bootstrap, [topic], group_id=group, config=QUIET)
    reader = reader_of(source)
    assert len(read_all(reader, 10)) == 10
    reader.notify_checkpoint_complete(1, [(f"{topic}-0", 7)])  # what the checkpoint recorded
    deadline = time.monotonic() + 10
    while starts(starting_offsets="committed", group_id=group) != [7]:
        assert time.monotonic() < deadline, "offsets were not committed to the group"
        reader.notify_checkpoint_complete(2, [(f"{topic}-0", 7)])
        time.sleep(0.2)
    reader.close()


def test_restored_positions_and_a_partition_new_since_the_checkpoint_start_where_they_should(kafka_broker):
    topic = new_topic(kafka_broker, partitions=2)
    produce(kafka_broker, topic, [str(i) for i in range(5)], partition=0)
    produce(kafka_broker, topic, [str(i) for i in range(5)], partition=1)
    source = KafkaSource(kafka_broker.bootstrap, [topic], starting_offsets="latest", bounded=True, config=QUIET)
    # restored: partition 0 at offset 3; partition 1 is not in the checkpoint (created after it): from its start
    reader = reader_of(source, restored={f"{topic}-0": 3}, was_restored=True)
    got = sorted((r.partition, r.offset) for r in read_all(reader, 7))
    assert got == [(0, 3), (0, 4)] + [(1, o) for o in range(5)]
    reader.close()


def test_partitions_added_while_reading_are_picked_up(kafka_broker):
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = new_topic(kafka_broker, partitions=1)
    source = KafkaSource(kafka_broker.bootstrap, [topic], discovery_interval=0.5, config=QUIET)
    readers = [reader_of(source, 2, i) for i in range(2)]
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap, **QUIET})
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    for p in range(4):
        produce(kafka_broker, topic, [f"p{p}"], partition=p)
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 4 and time.monotonic() < deadline:
        for reader in readers:
            got.extend(reader.read_batch(100) or [])
        time.sleep(0.05)
    assert sorted(r.value for r in got) == [b"p0", b"p1", b"p2", b"p3"]
    owned = [sorted(sid for sid, _ in reader.positions()) for reader in readers]
    assert sorted(owned[0] + owned[1]) == [f"{topic}-{p}" for p in range(4)]  # each partition read once
    for reader in readers:
        reader.close()


def test_watermark_is_the_minimum_over_partitions_until_one_goes_idle(kafka_broker):
    topic = new_topic(kafka_broker, partitions=2)
    produce(kafka_broker, topic, ["a", "b"], partition=0, timestamps=[1000, 5000])
    produce(kafka_broker, topic, ["c"], partition=1, timestamps=[2000])
    source = KafkaSource(kafka_broker.bootstrap, [topic], watermarks=True, idle_timeout=1.0,
                         max_out_of_orderness=100, config=QUIET)
    reader = reader_of(source)
    assert len(read_all(reader, 3)) == 3
    assert reader.watermark() == 2000 - 100 - 1  # partition 1 holds event time back
    produce(kafka_broker, topic, ["d"], partition=0, timestamps=[6000])
    deadline = time.monotonic() + 10
    while reader.watermark() != 6000 - 100 - 1:  # partition 1 idle for 1 s: only partition 0 counts
        assert time.monotonic() < deadline, reader.watermark()
        reader.read_batch(10)
        time.sleep(0.1)
    reader.close()


def test_an_undecodable_record_names_its_place_or_goes_to_the_side_output(kafka_broker):
    topic = new_topic(kafka_broker)
    produce(kafka_broker, topic, ['{"ok": 1}', "not json", '{"ok": 2}'])
    failing = reader_of(KafkaSource(kafka_broker.bootstrap, [topic], value_deserializer="json", bounded=True,
                                    config=QUIET))
    with pytest.raises(KafkaError, match=rf"topic '{topic}' partition 0 offset 1 does not deserialise"):
        read_all(failing, 3)
    failing.close()
    routed = reader_of(KafkaSource(kafka_broker.bootstrap, [topic], value_deserializer="json", bounded=True,
                                   errors=OutputTag("bad"), config=QUIET))
    assert [r.value for r in read_all(routed, 2)] == [{"ok": 1}, {"ok": 2}]
    [(tag, bad)] = routed.take_side_output()
    assert tag == "bad" and isinstance(bad, UndecodableRecord) and (bad.offset, bad.value) == (1, b"not json")
    routed.close()


def test_submit_time_errors_come_within_seconds(kafka_broker):
    started = time.monotonic()
    with pytest.raises(PlanError, match="no Kafka broker answered at 127.0.0.1:9"):
        KafkaSource("127.0.0.1:9", ["t"], metadata_timeout=3, config=QUIET).create_splits(1)
    assert time.monotonic() - started < 15
    with pytest.raises(PlanError, match="topic\\(s\\) missing-topic do not exist"):
        KafkaSource(kafka_broker.bootstrap, ["missing-topic"], config=QUIET).create_splits(1)
    settings = JobSettings(checkpoint_interval=30.0, restart_delay=5.0, parallelism=2)
    sink = KafkaSink(kafka_broker.bootstrap, "missing-topic", transactional_id_prefix="x", transaction_timeout=60,
                     config=QUIET)
    with pytest.raises(PlanError, match=r"transaction_timeout=60 s is too short.*more than 65 s"):
        sink.validate(settings)
    with pytest.raises(PlanError, match="topic 'missing-topic' does not exist"):
        sink.validate(JobSettings(1.0, 1.0, 2))
    with pytest.raises(PlanError, match="needs transactional_id_prefix"):
        KafkaSink(kafka_broker.bootstrap, "t")


def writer(broker, topic, prefix, index, parallelism, job="job-1", restored=False, restored_parallelism=None,
           **sink_options):
    sink = KafkaSink(broker.bootstrap, topic, transactional_id_prefix=prefix, config=QUIET, **sink_options)
    context = SinkContext("sink", index, parallelism, lambda payload: None, checkpointing=True, job_id=job,
                          restored=restored, restored_parallelism=restored_parallelism)
    return sink.create_writer(context)


def test_transactions_commit_on_completion_and_a_restore_writes_only_what_did_not_commit(kafka_broker):
    topic = new_topic(kafka_broker)
    first = writer(kafka_broker, topic, "t1", 0, 1)
    first.write_batch(["a", "b"])
    one = first.pre_commit(1)
    first.write_batch(["c"])  # waits for checkpoint 1's commit, then opens the next transaction
    first.commit([one])
    two = first.pre_commit(2)
    first.commit([two])
    assert read_committed(kafka_broker, topic) == ["a", "b", "c"]
    first.write_batch(["d"])
    three = first.pre_commit(3)
    first.write_batch(["e"])
    four = first.pre_commit(4)  # 3 has not committed: 4's records wait in its committable
    assert [r[2] for r in four.records] == [b"e"]
    # checkpoint 4 completes, the worker dies before committing 3 and 4: the restore gets the
    # committables of the checkpoints it restores (2 was committed: its marker says so)
    second = writer(kafka_broker, topic, "t1", 0, 1, restored=True, restored_parallelism=1)
    second.restore_committables([two, three, four])
    assert read_committed(kafka_broker, topic) == ["a", "b", "c", "d", "e"]
    second.restore_committables([two, three, four])  # idempotent
    assert read_committed(kafka_broker, topic) == ["a", "b", "c", "d", "e"]
    second.close()
    first.close()


def test_a_barrier_before_the_previous_commit_keeps_later_records_waiting(kafka_broker):
    """Checkpoint 2's barrier reaches the sink before checkpoint 1 commits (concurrent
    checkpoints, a savepoint beside a checkpoint): records after it must not open a transaction
    when 1 commits, or 2's own transaction cannot begin ("Operation not valid in state
    InTransaction", the job restarted)."""
    topic = new_topic(kafka_broker)
    w = writer(kafka_broker, topic, "ahead", 0, 1)
    w.write_batch(["a"])
    one = w.pre_commit(1)
    w.write_batch(["b"])
    two = w.pre_commit(2)  # nothing of it sent yet: queued behind 1
    w.write_batch(["c"])
    w.commit([one])
    w.write_batch(["d"])
    assert read_committed(kafka_broker, topic) == ["a"]
    w.commit([two])  # then c and d open the next transaction
    w.commit([w.pre_commit(3)])
    assert read_committed(kafka_broker, topic) == ["a", "b", "c", "d"]
    w.close()


def test_a_downscale_aborts_the_transactions_removed_subtasks_left_open(kafka_broker):
    topic = new_topic(kafka_broker, partitions=3)
    writers = [writer(kafka_broker, topic, "down", i, 3) for i in range(3)]
    for index, w in enumerate(writers):
        w.write_batch([f"open-{index}"])
        w.pre_commit(1)  # flushed, open: then every worker dies before checkpoint 1 completes
    assert open_transactions_block(kafka_broker, topic, wait=3)
    survivor = writer(kafka_broker, topic, "down", 0, 1, restored=True, restored_parallelism=3)
    survivor.restore_committables([])
    assert not open_transactions_block(kafka_broker, topic)  # none stays open
    assert read_committed(kafka_broker, topic) == []


def test_a_fenced_producer_fails_with_a_readable_error(kafka_broker):
    topic = new_topic(kafka_broker)
    old = writer(kafka_broker, topic, "fence", 0, 1)
    old.write_batch(["zombie"])
    committable = old.pre_commit(1)
    newer = writer(kafka_broker, topic, "fence", 0, 1, job="job-1", restored=True, restored_parallelism=1)
    newer.restore_committables([])  # a newer attempt takes the id over
    with pytest.raises(KafkaError, match="was fenced while"):
        old.commit([committable])
    assert read_committed(kafka_broker, topic) == []
    newer.close()


@pytest.mark.slow
@pytest.mark.parametrize("recovery", [True, False], ids=["new-producer", "without-recovery"])
def test_a_commit_stuck_after_a_broker_restart_is_done_by_a_new_producer(monkeypatch, recovery):
    """After a broker restart librdkafka's producer keeps the group coordinator it knew and never
    sends the next marker (confluentinc/librdkafka#5456, #5511): ``send_offsets_to_transaction``
    blocks past its timeout. The writer gives up on it after RECOVER_AFTER and commits the epoch
    with a new producer, in the running attempt, exactly once. Without that the commit fails
    (StuckCall): the job would restart from its checkpoint after operation_timeout + margin."""
    from epochal.connectors.kafka import writers
    from epochal.testing.kafka_broker import KafkaBroker

    monkeypatch.setattr(writers, "RECOVER_AFTER", 3.0 if recovery else None)
    monkeypatch.setattr(writers, "STUCK_MARGIN", 2.0)
    with KafkaBroker() as broker:
        topic = new_topic(broker)
        w = writer(broker, topic, "stuck", 0, 1, operation_timeout=4.0)
        w.write_batch(["a"])
        w.commit([w.pre_commit(1)])  # the producer now knows the group coordinator
        w.write_batch(["b", "c"])
        two = w.pre_commit(2)
        w.write_batch(["d"])  # waits for checkpoint 2's commit
        broker.stop()
        time.sleep(3.0)
        broker.start()
        started = time.monotonic()
        if not recovery:
            with pytest.raises(writers.StuckCall, match="did not return within 6 s"):
                w.commit([two])
            return
        w.commit([two])
        assert time.monotonic() - started < 3.0 + 20.0
        w.commit([w.pre_commit(3)])
        assert read_committed(broker, topic) == ["a", "b", "c", "d"]
        assert not open_transactions_block(broker, topic)
        w.close()
