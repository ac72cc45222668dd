"""What high availability costs a job that never fails (issue 36): throughput with HA off, on with
the file-based services, and on with ZooKeeper.

The job is a keyed count at full speed (generator source -> key_by -> count -> every 100th count
of a key -> an exactly-once file sink, parallelism 2, checkpoints every second), over
``--records`` records.
With HA on, the driver (alone: it is elected at once) takes each checkpoint id from the store's
counter before the trigger, publishes each completed checkpoint's pointer with a fenced write,
renews its lease every ``lease_timeout / 5`` s, and the sink's workers read the fence directory
before each commit: what this measures.

Runs are interleaved: every round runs the three configurations in a rotating order, so drift of
this shared machine hits them alike; the load average is recorded beside every run. All runs share
one SparkSession (``local[2]``) after an untimed warm-up; throughput counts from the moment every
worker runs (``JobClient.wait_until_running``) to the job's end, and the start before it (HA's
election, its stores, the plan stored: once per job) is recorded beside it as ``start_s``.
ZooKeeper is a real server started here (``epochal.testing.zookeeper_server``, in its own JVM on
the same machine).

    python -m benchmarks.ha_overhead                                   # 2,000,000 records, 5 rounds
    python -m benchmarks.ha_overhead --records 300000 --rounds 1       # quick check

Writes ``ha_overhead.csv`` (one row per run) and ``ha_overhead.png`` into ``--out`` (default
``benchmarks/results/ha_overhead``) and prints each configuration's median throughput and its
ratio to ``off``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common.isolation import rotate
from benchmarks.common.results import RESULTS, ROOT, machine, pyplot, save_figure, write_csv
from benchmarks.common.stats import median

CONFIGS = ("off", "file", "zookeeper")


def key(i: int) -> str:
    return f"k{(i * 7919) % 10_000}"


def run_job(spark: Any, records: int, work: Path, ha_uri: str | None) -> tuple[float, float]:
    """One keyed count of ``records`` records (HA on at ``ha_uri``, off if None): the seconds
    from ``execute_async`` until every worker ran (the start: HA's election and stores, once per
    job) and from then until the job ended (the run: what HA costs per checkpoint)."""
    import epochal
    from epochal.connectors.files import ExactlyOnceFileSink

    name = f"ha-overhead-{uuid.uuid4().hex[:8]}"  # a job id of its own: never "ended elsewhere"
    env = epochal.Environment(2, spark=spark)
    env.enable_checkpointing(1.0, storage=str(work / "checkpoints"))
    if ha_uri is not None:
        env.enable_high_availability(ha_uri)
    (env.from_generator(key, count=records).key_by(lambda k: k).count().filter(lambda kv: kv[1] % 100 == 0)
        .sink_to(ExactlyOnceFileSink(str(work / "out" / name), format=lambda kv: f"{kv[0]} {kv[1]}")))
    started = time.perf_counter()
    client = env.execute_async(name)
    client.wait_until_running(600)
    running = time.perf_counter()
    client.result(900)
    return running - started, time.perf_counter() - running


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--out", default=str(ROOT / RESULTS / "ha_overhead"))
    options = parser.parse_args()
    from epochal.control.spark import create_session

    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "machine.txt").write_text(machine())
    work = Path(tempfile.mkdtemp(prefix="epochal-ha-overhead-"))
    spark = create_session("local[2]", 2, app_name="epochal-ha-overhead")
    zookeeper = None
    if "zookeeper" in options.configs:
        from epochal.testing.zookeeper_server import ZooKeeperServer

        zookeeper = ZooKeeperServer(tick_ms=500).start()
    rows: list[dict[str, Any]] = []
    try:
        print("warm-up ...", flush=True)
        run_job(spark, max(options.records // 10, 10_000), work, None)
        configs = tuple(options.configs)
        for round_ in range(options.rounds):
            for config in rotate(configs, round_):
                uri = None if config == "off" else str(work / f"ha-{round_}") if config == "file" else \
                    zookeeper.uri(f"/bench-{uuid.uuid4().hex[:8]}") if zookeeper is not None else None
                load = os.getloadavg()[0]
                start_s, seconds = run_job(spark, options.records, work, uri)
                row = {"config": config, "round": round_, "records": options.records, "start_s": round(start_s, 3),
                       "seconds": round(seconds, 3), "records_per_s": round(options.records / seconds, 1),
                       "load_1min": round(load, 2)}
                print(row, flush=True)
                rows.append(row)
                write_csv(out / "ha_overhead.csv", rows)
    finally:
        if zookeeper is not None:
            zookeeper.close()
        spark.stop()
    summary(rows)
    plot(rows, out / "ha_overhead.png")


def summary(rows: list[dict[str, Any]]) -> None:
    base = median(r["records_per_s"] for r in rows if r["config"] == "off") if any(
        r["config"] == "off" for r in rows) else None
    for config in CONFIGS:
        mine = [r["records_per_s"] for r in rows if r["config"] == config]
        if mine:
            ratio = f", x{median(mine) / base:.3f} of off" if base else ""
            start = median(r["start_s"] for r in rows if r["config"] == config)
            print(f"{config}: median {median(mine):,.0f} records/s over {len(mine)} runs "
                  f"({min(mine):,.0f} to {max(mine):,.0f}){ratio}; start (once per job) median {start:.2f} s")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    for index, config in enumerate(CONFIGS):
        mine = [r["records_per_s"] for r in rows if r["config"] == config]
        if mine:
            axis.scatter([index] * len(mine), mine, alpha=0.6)
            axis.plot([index - 0.2, index + 0.2], [median(mine)] * 2, color="black")
    axis.set_xticks(range(len(CONFIGS)), ["HA off", "HA on (files)", "HA on (ZooKeeper)"])
    axis.set_ylabel("records / s (each run; line: median)")
    axis.set_title("The cost of HA in a failure-free run")
    save_figure(figure, path)


if __name__ == "__main__":
    main()
