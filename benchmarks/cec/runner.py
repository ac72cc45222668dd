"""One benchmark job of the CEC experiments, run and measured: the paper's pipeline
``generator -> [filter] -> key_by(item_id).count_window(size).avg(item_price) -> exactly-once file sink``
under one recovery mode, optionally with its window worker killed mid-run.

Modes (:data:`MODES`), all on the ``cec`` job kind except ``abs``:

* ``native``: the same job kind without fault tolerance (no control tuples, nothing persisted);
* ``gopen_net``: CEC with G_open only, forwarded but not persisted (the paper's Gopen/Net);
* ``gopen_disk``: CEC with G_open only, persisted (Gopen/Disk);
* ``cec``: CEC with G_checks (Q, U, CI, CP as given);
* ``crb``: the paper's baseline, every open window checkpointed every ``crb_interval`` seconds;
* ``dataflow``: the same job on the dataflow runtime without checkpoints (``abs``'s own
  baseline; the sink commits once, at the end);
* ``abs``: the dataflow runtime with exactly-once ABS checkpoints every ``abs_interval`` seconds
  and a full restart from the latest one (``FixedDelayRestart``).

Worker indices on the ``cec`` job kind with parallelism 1: worker 0 is the source (and the
chained filter), worker 1 the window aggregate with the chained sink; a fault kills worker 1.
On the dataflow runtime (``dataflow``, ``abs``) everything is one worker (0), which a fault kills.

Timing (:func:`run`): ``processing_s`` is the JobMaster's processing phase, from the first
``Processing`` message (a worker started its input) to the last ``StageDone`` (every worker's
input ended, its output is durable and its sink committed); it leaves out Spark's task launch,
registration and deployment before and the shutdown after, which ``duration_s`` (the
``JobResult``'s) includes. A poller thread lists the sink's directory every few milliseconds
and keeps when each committed file first appeared, which gives *kill -> first new committed
result*. ``foreign_cpu`` is the CPU time (in cores, averaged over the run) that processes
outside this benchmark's process tree used meanwhile: other work on the machine competing for
its 2 cores. ``cpu_w<i>_s`` is the CPU time of worker ``i``'s process from its registration to
the job's end (``cpu_w<i>_share``: per second of the processing phase; 1.0 is one core).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

import epochal
from benchmarks.cec.workload import Items, check_output, item_id, item_price, oracle
from benchmarks.common.measure import jobmaster_events
from benchmarks.common.noise import CpuWatch
from epochal.config import CecConfig
from epochal.connectors.files import ExactlyOnceFileSink
from epochal.control.restart import FixedDelayRestart
from epochal.testing import Fault

MODES = ("native", "gopen_net", "gopen_disk", "cec", "crb", "dataflow", "abs")
WINDOW_WORKER = 1


@dataclass
class Spec:
    """One run."""

    mode: str
    records: int
    keys: int
    size: int
    filter_stage: bool = False
    q_target: int = 1_000
    u_target: int = 1_000_000
    ci: float = 0.005
    cp: float = 0.1
    crb_interval: float = 1.0
    abs_interval: float = 1.0
    commit_interval: float = 0.5
    #: kill the window worker after it read this many records (None: no failure)
    kill_after: int | None = None
    #: tuples per second the source is paced at (None: as fast as it can)
    rate: float | None = None
    timeout: float = 900.0
    tags: dict[str, Any] = field(default_factory=dict)


def keep_all(record: Any) -> bool:
    """The interposed filter of papers/002 §IV.B (lets every tuple through)."""
    return record[1] >= 0


def _cpu_seconds(pid: int) -> float:
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.Error:
        return float("nan")


class _CommitPoller(threading.Thread):
    """Lists ``directory`` every ``interval`` seconds; ``seen`` maps each committed file name to
    the monotonic time it was first seen."""

    def __init__(self, directory: str, interval: float = 0.005) -> None:
        super().__init__(daemon=True, name="commit-poller")
        self.directory, self.interval = directory, interval
        self.seen: dict[str, float] = {}
        self.halt = threading.Event()
        #: the job's client, once started: its workers' heartbeat metrics are kept too
        self.client: Any = None
        #: (worker, pid) -> the newest heartbeat metrics of that process
        self.heartbeats: dict[tuple[int, int], dict[str, Any]] = {}
        #: (time seen, worker, pid, records_in) of every heartbeat metrics poll
        self.series: list[tuple[float, int, int, int]] = []
        #: (worker, pid) -> CPU seconds (user + system) of that process when it registered
        self.cpu_at_start: dict[tuple[int, int], float] = {}
        #: sampled every 0.1 s, so that a killed worker's CPU time is not lost
        self.cpu: CpuWatch | None = None

    def run(self) -> None:
        polls = 0
        while not self.halt.is_set():
            polls += 1
            if self.client is not None:
                try:
                    for worker, info in self.client.workers().items():
                        key = (worker, info["pid"])
                        if key not in self.cpu_at_start:
                            self.cpu_at_start[key] = _cpu_seconds(info["pid"])
                except Exception:  # noqa: BLE001 - instrumentation only
                    pass
            if self.cpu is not None and polls % 20 == 0:
                try:
                    self.cpu.sample()
                except Exception:  # noqa: BLE001 - instrumentation only
                    pass
            if self.client is not None and polls % 20 == 0:
                try:
                    for worker, m in self.client.metrics().items():
                        if "pid" in m:
                            self.heartbeats[(worker, m["pid"])] = dict(m)
                            self.series.append((time.monotonic(), worker, m["pid"], m.get("records_in", 0)))
                except Exception:  # noqa: BLE001 - instrumentation only
                    pass
            now = time.monotonic()
            try:
                names = os.listdir(self.directory)
            except FileNotFoundError:
                names = []
            for name in names:
                if not name.startswith(("_", ".")) and name not in self.seen:
                    self.seen[name] = now
            self.halt.wait(self.interval)

    def cpu_used(self) -> dict[tuple[int, int], float]:
        """CPU seconds each worker process used since it registered (NaN: it is gone, killed).
        Spark reuses its Python worker processes, so the count starts at registration."""
        return {key: _cpu_seconds(key[1]) - start for key, start in self.cpu_at_start.items()}

    def first_after(self, t: float) -> float:
        times = [s for s in self.seen.values() if s > t]
        return min(times) if times else float("nan")


def build(spec: Spec, spark: Any, root: str) -> tuple[epochal.Environment, str]:
    """The environment of ``spec``'s job, its sink writing to ``<root>/out``."""
    out = os.path.join(root, "out")
    logs = os.path.join(root, "logs")
    # runs with a kill report heartbeats every 0.1 s (not 0.5 s): when the replacement is back at
    # the crash point is read from them
    env = epochal.Environment(parallelism=1, spark=spark,
                              heartbeat_interval=0.1 if spec.kill_after is not None else 0.5)
    mode = spec.mode
    if mode == "native":
        env.cec_config = CecConfig("native", log_dir=logs, commit_interval=spec.commit_interval)
    elif mode in ("gopen_net", "gopen_disk"):
        env.enable_cec(g_check=False, persist=mode == "gopen_disk", log_dir=logs,
                       commit_interval=spec.commit_interval)
    elif mode == "cec":
        env.enable_cec(q_target=spec.q_target, u_target=spec.u_target, interval=spec.ci, period=spec.cp,
                       g_check=True, log_dir=logs, commit_interval=spec.commit_interval)
    elif mode == "crb":
        env.enable_crb(spec.crb_interval, log_dir=logs, commit_interval=spec.commit_interval)
    elif mode == "dataflow":
        pass
    elif mode == "abs":
        env.enable_checkpointing(spec.abs_interval, storage=os.path.join(root, "checkpoints"))
        env.set_restart_strategy(FixedDelayRestart(attempts=3, delay=0.0))
    else:
        raise ValueError(f"unknown mode {mode!r}")
    stream = env.from_generator(Items(spec.keys), count=spec.records, rate=spec.rate)
    if spec.filter_stage:
        stream = stream.filter(keep_all)
    (stream.key_by(item_id).count_window(spec.size).avg(item_price)
        .sink_to(ExactlyOnceFileSink(out)))
    return env, out


def run(spec: Spec, spark: Any) -> dict[str, Any]:
    """Run ``spec`` once; returns one CSV row (the spec, timings, worker metrics, recovery and the
    oracle check)."""
    root = tempfile.mkdtemp(prefix=f"cec-bench-{spec.mode}-")
    try:
        env, out = build(spec, spark, root)
        os.makedirs(out, exist_ok=True)
        faults = []
        if spec.kill_after is not None:
            worker = 0 if spec.mode in ("abs", "dataflow") else WINDOW_WORKER
            faults = [Fault("records", worker=worker, after=spec.kill_after)]
        poller = _CommitPoller(out)
        cpu = poller.cpu = CpuWatch()
        load = os.getloadavg()[0]
        started = time.monotonic()
        with jobmaster_events() as events:
            poller.start()
            client = env.execute_async(f"cec-bench-{spec.mode}", faults=faults)
            poller.client = client
            result = client.result(spec.timeout)
            wall = time.monotonic() - started
        poller.halt.set()
        poller.join()
        worker_cpu = {worker: used for (worker, pid), used in poller.cpu_used().items()
               if pid == result.metrics.get(worker, {}).get("pid")}
        row: dict[str, Any] = {
            "mode": spec.mode, **spec.tags, "records": spec.records, "keys": spec.keys, "size": spec.size,
            "filter": spec.filter_stage, "q_target": spec.q_target if spec.mode == "cec" else "",
            "u_target": spec.u_target if spec.mode == "cec" else "", "ci_s": spec.ci if spec.mode == "cec" else "",
            "cp_s": spec.cp if spec.mode == "cec" else "",
            "crb_interval_s": spec.crb_interval if spec.mode == "crb" else "",
            "abs_interval_s": spec.abs_interval if spec.mode == "abs" else "",
            "kill_after": spec.kill_after if spec.kill_after is not None else "",
            "wall_s": wall, "duration_s": result.duration_s,
            "loadavg_before": load, "foreign_cpu_cores": cpu.foreign_cores()}
        processing = [t for t, name, _ in events if name == "Processing"]
        done = [t for t, name, _ in events if name == "KindReport:StageDone"]
        finished = [t for t, name, _ in events if name == "Finished"]
        if done:
            end = max(done)
        elif finished:  # dataflow runtime: the final checkpoint's acks (its commit) come after
            acks = [t for t, name, _ in events if name == "Ack" and t >= max(finished)]
            end = max(acks) if acks else max(finished)
        else:
            end = float("nan")
        row["processing_s"] = end - min(processing) if processing else float("nan")
        # CPU seconds of each worker's (final) process from its registration to the job's end, and
        # as a share of the processing phase (1.0 = one core busy throughout)
        for worker, used in sorted(worker_cpu.items()):
            row[f"cpu_w{worker}_s"] = used
            row[f"cpu_w{worker}_share"] = used / row["processing_s"] if row["processing_s"] > 0 else float("nan")
        row.update(_worker_metrics(spec, result.metrics))
        row.update(_recovery(spec, client, poller, events, result.metrics))
        if processing and "lost_at" in row:  # when the kill came, from the start of processing
            row["kill_at_s"] = row.pop("lost_at") - min(processing)
        row.update(check_output(out, oracle(spec.records, spec.keys, spec.size)))
        return row
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _worker_metrics(spec: Spec, metrics: dict[int, dict[str, Any]]) -> dict[str, Any]:
    if spec.mode in ("abs", "dataflow"):
        m = metrics.get(0, {})
        return {"window_uptime_s": m.get("uptime", float("nan"))}
    source, window = metrics.get(0, {}), metrics.get(WINDOW_WORKER, {})
    results = window.get("window_results", 0)
    return {
        "source_frames": source.get("frames", 0), "source_bytes_logged": source.get("bytes_logged", 0),
        "source_replayed_frames": source.get("replayed_frames", 0),
        "source_queued_frames": source.get("queued_frames", 0),
        "window_uptime_s": window.get("uptime", float("nan")),
        "window_records_in": window.get("records_in", 0), "window_frames": window.get("frames", 0),
        "window_bytes_logged": window.get("bytes_logged", 0), "g_open": window.get("window_g_open", 0),
        "g_check": window.get("window_g_check", 0), "window_results": results,
        "caught_up": window.get("window_caught_up", 0), "duplicates": window.get("window_duplicates", 0),
        "open_windows_end": window.get("open_windows", 0),
        "response_s": window.get("window_response_s", 0.0) / results if results else float("nan"),
        "pause_s": window.get("checkpoint_pause_s", float("nan")),
        "pause_max_s": window.get("checkpoint_pause_max_s", float("nan"))}


def _recovery(spec: Spec, client: Any, poller: _CommitPoller, events: list,
              final: dict[int, dict[str, Any]]) -> dict[str, Any]:
    if spec.kill_after is None:
        return {}
    row: dict[str, Any] = {}
    if spec.mode not in ("abs", "dataflow"):
        # the killed window worker's counters, from its last heartbeat (up to 0.5 s old), plus
        # its replacement's final ones: G_checks and G_opens over the whole run
        final_pid = final.get(WINDOW_WORKER, {}).get("pid")
        before = [m for (w, pid), m in poller.heartbeats.items() if w == WINDOW_WORKER and pid != final_pid]
        if before:
            killed = max(before, key=lambda m: m.get("uptime", 0.0))
            row["g_check_before_kill"] = killed.get("window_g_check", 0)
            row["g_open_before_kill"] = killed.get("window_g_open", 0)
            row["records_before_kill"] = killed.get("records_in", 0)
    if spec.mode == "abs":
        restarts = client.restarts()
        if restarts:
            r = restarts[0]
            lost = r["detected"]
            row.update({"recovered_s": r.get("recovered_s", float("nan")),
                        "resumed_s": r.get("resumed_s", float("nan"))})
        else:
            return {"recovery_note": "no restart"}
    else:
        history = list(client.kind.history)
        if not history:
            return {"recovery_note": "no recovery"}
        h = history[0]
        lost = h["lost"]
        phases = h.get("phases", {})
        row.update({"ready_s": h.get("ready", float("nan")) - lost,
                    "rebuilt_s": h.get("rebuilt", float("nan")) - lost,
                    "resumed_s": h.get("resumed", float("nan")) - lost,
                    **{f"phase_{k}": v for k, v in phases.items()}})
        row["ec_load_s"] = phases.get("reconstruct_s", 0.0) + phases.get("load_s", 0.0)
        # the replacement's Processing: it was started (sent right after its Ready)
        again = [t for t, name, w in events if name == "Processing" and w == WINDOW_WORKER and t > lost]
        row["started_s"] = (min(again) - lost) if again else float("nan")
    row["first_commit_s"] = poller.first_after(lost) - lost
    row["lost_at"] = lost
    if spec.mode not in ("abs", "dataflow") and spec.kill_after is not None:
        # back at the crash point: the replacement has read again everything its predecessor had
        # (it reads every tuple after T, so T = records - its records_in at the end)
        final_pid = final.get(WINDOW_WORKER, {}).get("pid")
        t_tuple = spec.records - final.get(WINDOW_WORKER, {}).get("records_in", spec.records)
        target = spec.kill_after - t_tuple
        back = [t for t, w, pid, records in poller.series
                if w == WINDOW_WORKER and pid == final_pid and records >= target and t > lost]
        row["back_at_crash_point_s"] = (min(back) - lost) if back else float("nan")
    return row
