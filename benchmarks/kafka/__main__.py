"""Kafka benchmark: epochal reading a pre-filled topic and writing a topic, on a local broker.

Job: KafkaSource -> parse ``key,produced_ms`` -> keyed running count -> KafkaSink, at
``exactly_once`` and ``at_least_once``, parallelism 2, a checkpoint every second. Each run is a
fresh process (``benchmarks.kafka.run_epochal``).

* Throughput: the topic (4 partitions, ``--keys`` keys) holds ``--records`` records before the
  job starts; the job reads it in bounded mode. ``records/s = (N - n0) / (job_s(N) - job_s(n0))``
  where ``job_s`` is the job's own duration (``JobResult.duration_s``: Spark's session start-up
  is outside it) and ``n0`` a small start-up run (task launch, planning), as in benchmarks/peers.
* Latency: a producer writes ``--rate`` records/s for ``--seconds`` while the job runs
  unbounded; a read_committed consumer of the output topic notes when each update becomes
  visible. The producer starts once the job's workers run. Latency = visible - produced (the
  ``produced_ms`` the record carries end to end): p50 and p99 (the first 5 % left out). With
  exactly_once an update is visible once the checkpoint after it completes, so it is bounded by
  about one to two checkpoint intervals.
* Peak memory: the largest sum of RSS over the run's process tree (driver, JVM, Python
  workers), sampled every 0.25 s. The broker's JVM is not counted.

Writes ``kafka.csv``, ``kafka.md`` and ``kafka.png`` into ``--out`` (default
``benchmarks/results/kafka``)::

    python -m benchmarks.kafka --records 300000
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import threading
import time
import uuid

import psutil

from benchmarks.peers.__main__ import _tree_rss
from epochal.testing.kafka_broker import KafkaBroker

QUIET = {"log_level": 0}


def fill(broker: KafkaBroker, topic: str, records: int, keys: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 2_000_000, **QUIET})
    now = int(time.time() * 1000)
    for i in range(records):
        key = b"k%d" % (i % keys)
        while True:
            try:
                producer.produce(topic, b"%s,%d" % (key, now), key)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def peak_rss(process: subprocess.Popen, peak: list[int]) -> None:
    try:
        root = psutil.Process(process.pid)
        while process.poll() is None:
            peak[0] = max(peak[0], _tree_rss(root))
            time.sleep(0.25)
    except psutil.Error:
        pass


def run_job(broker: KafkaBroker, source: str, sink: str, guarantee: str, *extra: str,
            running: threading.Event | None = None) -> dict:
    """Run the job in its own process; ``running`` is set once the job's workers run."""
    command = [sys.executable, "-m", "benchmarks.kafka.run_epochal", "--bootstrap", broker.bootstrap,
               "--source", source, "--sink", sink, "--guarantee", guarantee, *extra]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak = [0]
    sampler = threading.Thread(target=peak_rss, args=(process, peak), daemon=True)
    sampler.start()
    lines = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if running is not None and '"running"' in line:
            running.set()
    process.wait(timeout=3600)
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{command} failed with {process.returncode}")
    result = json.loads(lines[-1])
    result["peak_rss_mb"] = peak[0] / 2**20
    return result


def throughput(broker: KafkaBroker, guarantee: str, records: int, startup_records: int, keys: int) -> dict:
    small, large = (f"in-{uuid.uuid4().hex[:6]}" for _ in range(2))
    for topic, n in ((small, startup_records), (large, records)):
        broker.create_topic(topic, 4)
        fill(broker, topic, n, keys)
    outs = [f"out-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for topic in outs:
        broker.create_topic(topic, 4)
    startup = run_job(broker, small, outs[0], guarantee, "--bounded")
    timed = run_job(broker, large, outs[1], guarantee, "--bounded")
    rate = (records - startup_records) / max(1e-9, timed["job_s"] - startup["job_s"])
    return {"records": records, "job_s": timed["job_s"], "startup_s": startup["job_s"], "records_per_s": rate,
            "peak_rss_mb": timed["peak_rss_mb"]}


def latency(broker: KafkaBroker, guarantee: str, rate: int, seconds: float, keys: int) -> dict:
    from confluent_kafka import Consumer, Producer

    source, sink = f"lin-{uuid.uuid4().hex[:6]}", f"lout-{uuid.uuid4().hex[:6]}"
    broker.create_topic(source, 4)
    broker.create_topic(sink, 4)
    stop, running = threading.Event(), threading.Event()
    seen: list[float] = []

    def consume() -> None:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"lat-{sink}",
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest", **QUIET})
        consumer.subscribe([sink])
        while not stop.is_set():
            for message in consumer.consume(10000, 0.2):
                if message.error() is None:
                    produced = int(message.value().rsplit(b",", 1)[1])
                    seen.append(time.time() * 1000 - produced)
        consumer.close()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1, **QUIET})
        running.wait(600)
        started, sent = time.monotonic(), 0
        while not stop.is_set() and time.monotonic() - started < seconds:
            due = int((time.monotonic() - started) * rate)
            while sent < due:
                key = b"k%d" % (sent % keys)
                producer.produce(source, b"%s,%d" % (key, int(time.time() * 1000)), key)
                sent += 1
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(30)

    threads = [threading.Thread(target=consume), threading.Thread(target=produce)]
    for thread in threads:
        thread.start()
    # the job runs past the producer's end so that its last records become visible
    job = run_job(broker, source, sink, guarantee, "--seconds", str(seconds + 8), running=running)
    stop.set()
    for thread in threads:
        thread.join()
    warm = sorted(seen[len(seen) // 20:])  # the first 5 %: the job was still warming up

    def quantile(q: float) -> float:
        return warm[min(len(warm) - 1, int(q * len(warm)))] if warm else float("nan")

    return {"latency_p50_ms": quantile(0.5), "latency_p99_ms": quantile(0.99), "latency_samples": len(warm),
            "latency_peak_rss_mb": job["peak_rss_mb"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--startup-records", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--guarantees", nargs="+", default=["exactly_once", "at_least_once"])
    parser.add_argument("--out", default=os.path.join("benchmarks", "results", "kafka"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    with KafkaBroker(heap="1g") as broker:
        for guarantee in args.guarantees:
            row = {"system": f"epochal {guarantee}"}
            row.update(throughput(broker, guarantee, args.records, args.startup_records, args.keys))
            row.update(latency(broker, guarantee, args.rate, args.seconds, args.keys))
            print(json.dumps(row), flush=True)
            rows.append(row)
    write(rows, args.out)


def write(rows: list[dict], out: str) -> None:
    with open(os.path.join(out, "kafka.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| system | records/s | p50 latency (ms) | p99 latency (ms) | peak memory (MB) |", "|---|---|---|---|---|"]
    lines += [f"| {r['system']} | {r['records_per_s']:,.0f} | {r['latency_p50_ms']:,.0f} | {r['latency_p99_ms']:,.0f} "
              f"| {r['peak_rss_mb']:,.0f} |" for r in rows]
    with open(os.path.join(out, "kafka.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = [r["system"] for r in rows]
    axes[0].bar(names, [r["records_per_s"] for r in rows])
    axes[0].set_title("records/s (Kafka -> count -> Kafka)")
    axes[1].bar(names, [r["latency_p99_ms"] for r in rows], label="p99")
    axes[1].bar(names, [r["latency_p50_ms"] for r in rows], label="p50")
    axes[1].set_title("latency, produced -> visible (ms)")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "kafka.png"), dpi=100)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
