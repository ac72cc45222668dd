"""Kafka in and out, exactly once, against the real test broker, with workers SIGKILLed.

The job of the issue: Kafka (4 partitions) -> parse -> keyed running count -> KafkaSink. A
read_committed consumer of the output topic must see exactly the oracle: every update
``key:count`` once. The same with event-time windows (watermarks per partition); across
restores at other parallelisms (2 -> 3 -> 1, lingering transactions of removed subtasks
aborted); and with the broker stopped and started again mid-job. Necessity: with transactions
off (at_least_once) a kill duplicates output, and a source that does not restore its offsets
repeats input.
"""

from __future__ import annotations

import collections
import threading
import time

import pytest

from epochal.connectors.base import ReaderContext
from epochal.connectors.kafka import KafkaSink, KafkaSource
from epochal.control.restart import FixedDelayRestart
from epochal.testing import Fault, random_faults
from tests.kafka_helpers import QUIET, new_topic, open_transactions_block, produce, read_committed

KEYS = 13
RECORDS = 4000
WINDOW = 100  # ms of event time (a record's event time is its index)


def lines(start: int, end: int) -> list[str]:
    return [f"{i % KEYS},{i}" for i in range(start, end)]


def count_oracle(records: int) -> collections.Counter:
    per_key = collections.Counter(i % KEYS for i in range(records))
    return collections.Counter(f"{k}:{c}" for k, n in per_key.items() for c in range(1, n + 1))


def window_oracle(records: int) -> collections.Counter:
    per_window = collections.Counter((i % KEYS, i // WINDOW * WINDOW) for i in range(records))
    return collections.Counter(f"{k}:{start}:{n}" for (k, start), n in per_window.items())


def parse(record):
    time.sleep(0.0005)  # pace the job so that every planned kill lands while it runs
    key, index = record.value.split(",")
    return int(key), int(index)


def filled_topic(broker, records: int = RECORDS) -> str:
    topic = new_topic(broker, partitions=4, name="in")
    produce(broker, topic, lines(0, records), key=lambda line: line.split(",")[0])
    return topic


def count_job(env, broker, source_topic, out_topic, prefix, guarantee="exactly_once", bounded=True,
              source_type=KafkaSource, operation_timeout=60.0):
    records = env.from_source(source_type(broker.bootstrap, [source_topic], bounded=bounded, value_deserializer="str",
                                          config=QUIET), name="kafka").uid("kafka")
    counts = records.map(parse).uid("parse").key_by(lambda r: r[0]).count().uid("count")
    counts.sink_to(KafkaSink(broker.bootstrap, out_topic, guarantee=guarantee, key=lambda kc: kc[0],
                             value=lambda kc: f"{kc[0]}:{kc[1]}", transactional_id_prefix=prefix, config=QUIET,
                             operation_timeout=operation_timeout),
                   name="kafka-sink").uid("kafka-sink")


def run(make_env, tmp_path, parallelism, faults, build, name):
    env = make_env(parallelism)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    env.set_restart_strategy(FixedDelayRestart(attempts=len(faults) + 2, delay=0.2))
    build(env)
    return env.execute(name, timeout=300, faults=faults)


def missing_and_repeated(counter: collections.Counter, oracle: collections.Counter) -> tuple:
    """The first missing and repeated lines, and per key of ``key:...`` lines the counts missing as
    (lowest, highest, how many): a source that skipped input misses a key's highest counts, a
    lost transaction a run in the middle of several keys."""
    missing = oracle - counter
    by_key: dict[str, list[int]] = collections.defaultdict(list)
    for line in missing:
        key, _, count = line.partition(":")
        if count.isdigit():
            by_key[key].append(int(count))
    ranges = {key: (min(c), max(c), len(c)) for key, c in sorted(by_key.items())}
    return sorted(missing)[:5], sorted(counter - oracle)[:5], ranges


@pytest.mark.parametrize("parallelism,seed", [(2, 7), (3, 11)])
def test_running_count_exactly_once_under_three_kills(kafka_broker, make_env, tmp_path, parallelism, seed):
    source, out = filled_topic(kafka_broker), new_topic(kafka_broker, partitions=3, name="counts")
    faults = random_faults(seed, parallelism, count=3, window=(0.4, 1.0))
    result = run(make_env, tmp_path, parallelism, faults,
                 lambda env: count_job(env, kafka_broker, source, out, f"count-{out}"), "kafka-counts")
    assert len(result.restarts) == 3, result.restarts
    output = collections.Counter(read_committed(kafka_broker, out))
    assert output == count_oracle(RECORDS), missing_and_repeated(output, count_oracle(RECORDS))


def test_event_time_windows_exactly_once_under_three_kills(kafka_broker, make_env, tmp_path):
    source, out = filled_topic(kafka_broker), new_topic(kafka_broker, partitions=2, name="windows")

    def build(env):
        records = env.from_source(KafkaSource(kafka_broker.bootstrap, [source], bounded=True, value_deserializer="str",
                                              watermarks=True, timestamp=lambda r: int(r.value.split(",")[1]),
                                              idle_timeout=10.0, config=QUIET), name="kafka")
        windows = records.map(parse).key_by(lambda r: r[0]).window(WINDOW, timestamp=lambda r: r[1]).count()
        windows.sink_to(KafkaSink(kafka_broker.bootstrap, out, key=lambda w: w[0],
                                  value=lambda w: f"{w[0]}:{w[1]}:{w[2]}", transactional_id_prefix=f"win-{out}",
                                  config=QUIET))

    result = run(make_env, tmp_path, 2, random_faults(5, 2, count=3, window=(0.4, 1.0)), build, "kafka-windows")
    assert len(result.restarts) == 3 and result.late_records_dropped == 0
    output = collections.Counter(read_committed(kafka_broker, out))
    assert output == window_oracle(RECORDS), missing_and_repeated(output, window_oracle(RECORDS))


def test_a_source_subtask_that_finished_early_is_not_read_again_after_a_kill(kafka_broker, make_env, tmp_path):
    """Subtask 0's partition holds 10 records, subtask 1's 6,000: subtask 0 finishes at once and
    later checkpoints still record where it ended. A kill of worker 1 restores one of those; the
    10 records must not be counted again (they were, when a finished reader's snapshot recorded
    its partitions' start offsets)."""
    source, out = new_topic(kafka_broker, partitions=2, name="uneven"), new_topic(kafka_broker, 3, "uneven-out")
    short, long = [f"0,{i}" for i in range(10)], [f"{1 + i % (KEYS - 1)},{i}" for i in range(10, 6010)]
    produce(kafka_broker, source, short, partition=0)
    produce(kafka_broker, source, long, partition=1)
    result = run(make_env, tmp_path, 2, [Fault("during_upload", worker=1, checkpoint=6)],
                 lambda env: count_job(env, kafka_broker, source, out, f"uneven-{out}"), "kafka-uneven")
    assert len(result.restarts) == 1, result.restarts
    per_key = collections.Counter(line.split(",")[0] for line in short + long)
    oracle = collections.Counter(f"{k}:{c}" for k, n in per_key.items() for c in range(1, n + 1))
    output = collections.Counter(read_committed(kafka_broker, out))
    assert output == oracle, missing_and_repeated(output, oracle)


# ------------------------------------------------------------------ necessity


def test_without_transactions_a_kill_duplicates_output(kafka_broker, make_env, tmp_path):
    """at_least_once: flushed at every barrier, so nothing is lost; the kill during checkpoint
    3's upload makes the job restore checkpoint 2 and write the epoch after it again."""
    source, out = filled_topic(kafka_broker), new_topic(kafka_broker, partitions=3, name="alo")
    run(make_env, tmp_path, 2, [Fault("during_upload", worker=0, checkpoint=3)],
        lambda env: count_job(env, kafka_broker, source, out, "alo", guarantee="at_least_once"), "kafka-alo")
    output = collections.Counter(read_committed(kafka_broker, out))
    assert set(output) == set(count_oracle(RECORDS))  # nothing lost
    assert sum(output.values()) > RECORDS, "at-least-once output was exact: the kill repeated nothing"


class ForgetfulKafkaSource(KafkaSource):
    """A KafkaSource that ignores its restored offsets: every attempt starts where the job did."""

    def create_reader(self, splits, restored, context):
        return super().create_reader(splits, {}, ReaderContext(context.operator_name, context.subtask_index,
                                                               context.parallelism, restored=False))


def test_a_source_that_does_not_restore_its_offsets_repeats_input(kafka_broker, make_env, tmp_path):
    source, out = filled_topic(kafka_broker), new_topic(kafka_broker, partitions=3, name="forget")
    result = run(make_env, tmp_path, 2, [Fault("during_upload", worker=1, checkpoint=3)],
                 lambda env: count_job(env, kafka_broker, source, out, f"forget-{out}",
                                       source_type=ForgetfulKafkaSource), "kafka-forgetful")
    assert len(result.restarts) == 1  # restored checkpoint 2, whose offsets the source ignored
    output = collections.Counter(read_committed(kafka_broker, out))
    assert output != count_oracle(RECORDS)
    assert output - count_oracle(RECORDS), "no count went past the oracle: nothing was read twice"


# ------------------------------------------------------------------ rescale and broker restart


def test_restores_at_other_parallelisms_carry_offsets_and_transactions(kafka_broker, make_env, tmp_path):
    """2 -> 3 -> 1: each run is cancelled after a few checkpoints (its open transactions left
    behind), more input arrives, and the next run restores the latest checkpoint."""
    source = new_topic(kafka_broker, partitions=4, name="in")
    out = new_topic(kafka_broker, partitions=3, name="rescale")
    storage = str(tmp_path / "checkpoints")
    parts = [(0, 1500), (1500, 3000), (3000, RECORDS)]
    restore_from = None
    for (start, end), parallelism in zip(parts, [2, 3, 1], strict=True):
        produce(kafka_broker, source, lines(start, end), key=lambda line: line.split(",")[0])
        env = make_env(parallelism)
        env.enable_checkpointing(0.3, storage=storage)
        last = parallelism == 1
        count_job(env, kafka_broker, source, out, f"rescale-{out}", bounded=last)
        if last:
            env.execute("kafka-rescale", timeout=200, restore_from=restore_from)
            break
        client = env.execute_async("kafka-rescale", restore_from=restore_from)
        deadline = time.monotonic() + 120
        while sum(c["status"] == "completed" for c in client.checkpoint_stats()) < 4:
            assert time.monotonic() < deadline, "no checkpoints"
            time.sleep(0.05)
        client.cancel(timeout=60)
        restore_from = client.checkpoint_path
    output = collections.Counter(read_committed(kafka_broker, out))
    assert output == count_oracle(RECORDS), missing_and_repeated(output, count_oracle(RECORDS))
    assert not open_transactions_block(kafka_broker, out)  # none stays open


def test_the_broker_stopped_and_started_again_mid_job(make_env, tmp_path):
    from epochal.testing.kafka_broker import KafkaBroker

    with KafkaBroker() as broker:
        source, out = filled_topic(broker), new_topic(broker, partitions=3, name="restart")

        def bounce():
            time.sleep(2.0)
            broker.stop()
            time.sleep(3.0)
            broker.start()

        env = make_env(2)
        env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
        env.set_restart_strategy(FixedDelayRestart(attempts=10, delay=1.0))
        # a commit hung on the lost coordinator is done by a new producer after 10 s; a call hung
        # otherwise fails the attempt after 15 + 15 s, not 60 + 15 s
        count_job(env, broker, source, out, f"bounce-{out}", operation_timeout=15.0)
        thread = threading.Thread(target=bounce)
        thread.start()
        result = env.execute("kafka-broker-restart", timeout=300)
        thread.join()
        output = collections.Counter(read_committed(broker, out))
        assert output == count_oracle(RECORDS), (missing_and_repeated(output, count_oracle(RECORDS)),
                                                 [r.get("cause") for r in result.restarts])
