"""A deliberately slow sink throttles a fast source: in-flight data and worker memory stay bounded."""

from __future__ import annotations

import time

from epochal.connectors.base import Sink, SinkWriter

RECORD_BYTES = 10_000
BATCH = 50
CREDITS = 4


class SlowWriter(SinkWriter):
    def write_batch(self, records):
        time.sleep(0.1)  # about 500 records/s


class FastWriter(SinkWriter):
    def write_batch(self, records):
        pass


class SlowSink(Sink):
    """Slow on subtask 1 only. Subtask 0 shares worker 0 with source subtask 0 and must not slow
    that worker's mailbox loop down, so only credit can hold source 0 back."""

    def create_writer(self, context):
        return SlowWriter() if context.subtask_index == 1 else FastWriter()


def test_slow_sink_bounds_in_flight_records_and_memory(make_env):
    env = make_env(2, batch_size=BATCH, channel_credits=CREDITS, buffer_timeout=0.01)
    # An unbounded source of 10 kB records: unthrottled it would produce gigabytes in seconds.
    source = env.from_generator(lambda i: "x" * RECORD_BYTES, count=None).name("fast-source")
    source.rebalance().sink_to(SlowSink(), name="slow-sink")
    client = env.execute_async("backpressure")
    client.wait_until_running()
    samples = []
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        time.sleep(0.25)
        metrics = client.metrics()
        if len(metrics) == 2 and all(metrics.values()):
            samples.append(metrics)
    client.cancel(timeout=60)
    assert len(samples) >= 5

    channels = 4  # 2 source subtasks x 2 sink subtasks, all-to-all
    # Per channel: credits at the consumer, one batch being written, a partial buffer and one
    # source batch split into pending output at the producer.
    in_flight_bound = channels * (CREDITS + 3) * BATCH
    # Heartbeats of the two workers are sampled up to 0.5 s apart; throttled, the job moves
    # about 1000 records/s in all, so the skew between two counters is below 2000 records.
    skew = 2000
    first_rss = {w: m["rss_bytes"] for w, m in samples[0].items()}
    for metrics in samples:
        read = sum(v for m in metrics.values() for k, v in m["operators"].items() if k.startswith("fast-source"))
        written = sum(v for m in metrics.values() for k, v in m["operators"].items() if k.startswith("slow-sink"))
        assert read - written <= in_flight_bound + skew, (read, written)
        for worker, m in metrics.items():
            assert m["queued_batches"] <= channels * CREDITS
            assert m["rss_bytes"] - first_rss[worker] < 100 * 2**20
    final = samples[-1]
    written = sum(v for m in final.values() for k, v in m["operators"].items() if k.startswith("slow-sink"))
    assert written > 0  # data flowed, only slowly
