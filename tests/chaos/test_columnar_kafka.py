"""Kafka (batches) -> event-time windows -> Kafka, exactly once, with workers SIGKILLed.

The job: ``KafkaSource(batches=True)`` over 2 partitions, JSON values decoded into columns, event
time from the Kafka timestamps (``watermarks=True``) -> ``key_by("k").window(...).agg(count)`` ->
``KafkaSink`` taking the batches' key/value columns, exactly once (transactions per checkpoint),
at parallelism 2. A read_committed consumer of the output must see every window's count once,
as the oracle computes it: with workers killed at random moments, and with a worker killed after
a checkpoint completed but before its sink committed the checkpoint's transaction (the restored
job commits it again from the write-ahead log in the checkpoint, not twice). Necessity: with the
sink at_least_once both cases write windows twice.

One partition a source subtask: its watermark follows that partition, so windows fire all
through the run and the kills land among them (a subtask reading two partitions, one far ahead
of the other, holds its watermark back nearly to the end of its input). The input topic keeps
its records whatever their timestamps (``retention.ms=-1``): they are small event times of
1970, which the broker's retention check would delete.
"""

from __future__ import annotations

import collections
import json
import time
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from epochal.connectors.kafka import KafkaSink, KafkaSource
from epochal.control.restart import FixedDelayRestart
from epochal.testing import Fault, random_faults
from tests.kafka_helpers import QUIET, new_topic, produce, read_committed

RECORDS = 6_000
KEYS = 13
WINDOW = 100  # ms of event time; record i has the Kafka timestamp 1000 + i
VALUES = pa.schema([("k", pa.int64()), ("i", pa.int64())])


def filled_topic(broker: Any) -> str:
    topic = f"in-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 2, **{"retention.ms": "-1"})
    produce(broker, topic, [json.dumps({"k": i % KEYS, "i": i}) for i in range(RECORDS)],
            key=lambda value: str(json.loads(value)["k"]), timestamps=list(range(1000, 1000 + RECORDS)))
    return topic


def paced(batch: pa.RecordBatch) -> pa.RecordBatch:
    time.sleep(batch.num_rows * 0.001)  # ~3 s of input per subtask: the planned kills land while it runs
    return batch


def key_value(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Key ``k``, value ``k|window start|count``."""
    text = [pc.cast(batch["k"], pa.string()), pc.cast(batch["window_start"], pa.string()),
            pc.cast(batch["n"], pa.string())]
    return pa.RecordBatch.from_arrays([text[0], pc.binary_join_element_wise(*text, "|")], names=["key", "value"])


def window_oracle() -> collections.Counter:
    counts = collections.Counter((i % KEYS, (1000 + i) // WINDOW * WINDOW) for i in range(RECORDS))
    return collections.Counter(f"{k}|{start}|{n}" for (k, start), n in counts.items())


@pytest.mark.parametrize("faults", [
    random_faults(29, 2, count=2, window=(1.5, 3.0)),
    [Fault("before_commit", worker=1, checkpoint=2)],
], ids=["random-kills", "kill-before-commit"])
def test_kafka_batches_through_windows_to_kafka_are_exactly_once_under_kills(kafka_broker, make_env, tmp_path, faults):
    source, out = filled_topic(kafka_broker), new_topic(kafka_broker, partitions=2, name="out")
    env = make_env(2)
    env.enable_checkpointing(0.25, storage=str(tmp_path / "checkpoints"))
    env.set_restart_strategy(FixedDelayRestart(attempts=len(faults) + 2, delay=0.2))
    records = env.from_source(KafkaSource(kafka_broker.bootstrap, [source], bounded=True, batches=True,
                                          value_format="json", value_schema=VALUES, watermarks=True,
                                          idle_timeout=10.0, batch_records=20, config=QUIET), name="kafka")
    windows = (records.uid("kafka").map_batches(paced).uid("paced")
               .key_by("k").window(WINDOW, timestamp="timestamp").agg(n=("i", "count")).uid("windows"))
    windows.map_batches(key_value).uid("text").sink_to(
        KafkaSink(kafka_broker.bootstrap, out, transactional_id_prefix=f"cw-{out}", config=QUIET),
        name="kafka-out").uid("kafka-out")
    result = env.execute("columnar-kafka-chaos", timeout=300, faults=faults)
    assert len(result.restarts) == len(faults), result.restarts
    assert result.late_records_dropped == 0
    output, oracle = collections.Counter(read_committed(kafka_broker, out)), window_oracle()
    assert output == oracle, (sorted(oracle - output)[:5], sorted(output - oracle)[:5])
