"""Where the window worker's time goes, measured in this one process (no Spark, no sockets, no
other process competing for a core): the per-frame work of a CEC window stage and its rebuild.

:func:`window_path` replays what :class:`~epochal.cec.worker.CecWorker` does for each input
stream event of a window stage whose sink is chained to it: unpickle the input batch, feed each
tuple to the :class:`~epochal.cec.aggregate.WindowAggregate`, run the G_check loop, take its
output batch (results and control tuples), pickle the frame (``(meta, parts, control)``) as
``StageOutput.emit`` does, append it to an :class:`~epochal.cec.output_log.OutputLog`, and get
the own sink's records from the parts in memory. Each step is timed on its own.

:func:`rebuild_path` writes a CEC window stage's output log up to a crash, then rebuilds the
instance as ``CecWorker._recover`` does: open the log, read it backwards (frame reads),
unpickle each frame, :func:`~epochal.cec.eventual.reconstruct` over the stream events, and
``WindowAggregate.restore``, each step timed, with a cProfile of ``restore``.

``gc_off=True`` is a *what-if*, never what the benchmark figures use: Python's cyclic garbage
collector off for the measured steps (with ~100,000 open windows, each a few tracked objects,
every full collection walks them all). It shows how much of the cost is the collector's.
"""

from __future__ import annotations

import cProfile
import gc
import io
import os
import pickle
import pstats
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.cec.workload import Items, item_id, item_price
from epochal.cec.aggregate import WindowAggregate
from epochal.cec.eventual import reconstruct
from epochal.cec.output_log import OutputLog
from epochal.cec.policy import CecSettings
from epochal.cec.tuples import OutputBatch, encode_items, item_seq, logged_frame, window_frame_meta
from epochal.runtime.operators.aggregates import AvgFunction
from epochal.runtime.windows.shapes import CountWindows
from epochal.serialization import dumps

FRAME = 1024  # records per source stream event (EngineConfig.batch_size)

def _payload(batch: OutputBatch, parts: list[bytes], records: int) -> bytes:
    return dumps((window_frame_meta(batch, records), parts, encode_items(batch.control)))


@contextmanager
def no_gc(enabled: bool = True) -> Iterator[None]:
    """The garbage collector off for the block (a what-if)."""
    was = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _aggregate(mode: str, size: int, settings: CecSettings) -> WindowAggregate:
    return WindowAggregate(CountWindows(size, size), AvgFunction(item_price), item_id, 1,
                           "none" if mode == "native" else mode, settings)


def _input_frames(records: int, keys: int) -> Iterator[tuple[int, bytes]]:
    items = Items(keys)
    for start in range(0, records, FRAME):
        batch = [items(i) for i in range(start, min(records, start + FRAME))]
        yield start + len(batch), dumps((list(range(len(batch))), batch))


def window_path(mode: str, records: int, keys: int, size: int, settings: CecSettings | None = None,
                gc_off: bool = False) -> dict[str, Any]:
    """Seconds per step of a window stage's work over ``records`` tuples (see the module
    docstring); ``mode``: ``native``, ``cec`` (``settings.g_check=False``: G_open only)."""
    settings = settings or CecSettings(g_check=False)
    aggregate = _aggregate(mode, size, settings)
    frames = list(_input_frames(records, keys))  # pickled before the clock starts
    steps = dict.fromkeys(("input_unpickle", "process", "g_check", "split", "pickle", "log_append",
                           "sink_records"), 0.0)
    root = tempfile.mkdtemp(prefix="cec-anatomy-")
    items_out = 0
    logged_bytes = 0
    try:
        log = OutputLog.open(os.path.join(root, "out"))
        clock = time.perf_counter
        with no_gc(gc_off):
            for out_seq, (frame_seq, blob) in enumerate(frames):
                t0 = clock()
                indices, batch = pickle.loads(blob)
                t1 = clock()
                aggregate.now = time.monotonic()
                process = aggregate.process
                for k, record in zip(indices, batch, strict=True):
                    process(0, item_seq(frame_seq, k), record)
                t2 = clock()
                while aggregate.check_next(time.monotonic()):
                    pass
                t3 = clock()
                batch = aggregate.take()
                results = batch.records
                t4 = clock()
                parts = [dumps((list(range(len(results))), results))]
                native = aggregate.mode == "none"
                payload = dumps((None, parts, None)) if native else _payload(batch, parts, len(results))
                t5 = clock()
                log.append(out_seq, 0.0, 0.0, payload)
                t6 = clock()
                pickle.loads(parts[0])  # the own sink's records, from the durable parts in memory
                t7 = clock()
                items_out += len(results) + len(batch.control)
                logged_bytes += len(payload)
                for name, seconds in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6),
                                         strict=True):
                    steps[name] += seconds
        log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    total = sum(steps.values())
    return {"mode": mode if mode == "native" or settings.g_check else "gopen_disk",
            "records": records, "keys": keys, "size": size, "gc_off": gc_off, "total_s": total,
            "us_per_tuple": total / records * 1e6, "items_out": items_out, "logged_bytes": logged_bytes,
            "g_open": aggregate.stats["g_open"], "g_check": aggregate.stats["g_check"],
            "results": aggregate.stats["results"], **{f"{k}_s": v for k, v in steps.items()}}


def rebuild_path(records: int, keys: int, size: int, settings: CecSettings, gc_off: bool = False,
                 profile_lines: int = 0) -> dict[str, Any]:
    """Write a CEC window stage's output log for ``records`` tuples (its crash point), then rebuild
    it step by step (see the module docstring). With ``profile_lines``, ``restore_profile`` holds
    that many lines of the cProfile of ``restore`` (by own time)."""
    root = tempfile.mkdtemp(prefix="cec-anatomy-")
    try:
        directory = os.path.join(root, "out")
        log = OutputLog.open(directory)
        aggregate = _aggregate("cec", size, settings)
        for out_seq, (frame_seq, blob) in enumerate(_input_frames(records, keys)):
            indices, batch = pickle.loads(blob)
            for k, record in zip(indices, batch, strict=True):
                aggregate.process(0, item_seq(frame_seq, k), record)
            while aggregate.check_next(time.monotonic()):
                pass
            batch = aggregate.take()
            if batch.records or batch.control:
                results = batch.records
                log.append(out_seq, 0.0, 0.0, _payload(batch, [dumps((list(range(len(results))), results))],
                                                       len(results)))
        log.close()
        open_windows = len(aggregate.windows)
        g_checks, g_opens = aggregate.stats["g_check"], aggregate.stats["g_open"]
        del aggregate
        clock = time.perf_counter
        collector = no_gc(gc_off)
        collector.__enter__()
        t0 = clock()
        log = OutputLog.open(directory)
        t1 = clock()
        read_s = unpickle_s = 0.0
        frames_read = 0

        def newest_first() -> Iterator[Any]:
            nonlocal read_s, unpickle_s, frames_read
            for frame in reversed(log.frames):
                a = clock()
                payload = log.read(frame)
                b = clock()
                meta, _, control = pickle.loads(payload)
                c = clock()
                read_s += b - a
                unpickle_s += c - b
                frames_read += 1
                yield logged_frame(meta, control)

        t2 = clock()
        ec = reconstruct(newest_first())
        t3 = clock()
        fresh = _aggregate("cec", size, settings)
        profiler = cProfile.Profile() if profile_lines else None
        t4 = clock()
        if profiler is not None:
            profiler.enable()
        fresh.restore(ec)
        if profiler is not None:
            profiler.disable()
        t5 = clock()
        collector.__exit__(None, None, None)
        log.close()
        row = {"records": records, "keys": keys, "size": size, "gc_off": gc_off,
               "q_target": settings.q_target, "u_target": settings.u_target, "ci": settings.interval,
               "cp": settings.period, "g_checks": g_checks, "g_opens": g_opens,
               "open_windows": open_windows, "extent": ec.extent,
               "windows": len(ec.windows), "frames_read": frames_read, "open_s": t1 - t0, "read_s": read_s,
               "unpickle_s": unpickle_s, "reconstruct_only_s": (t3 - t2) - read_s - unpickle_s,
               "reconstruct_s": t3 - t2, "load_s": t5 - t4, "profiled": profiler is not None}
        if profiler is not None:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(profile_lines)
            row["restore_profile"] = out.getvalue()
        return row
    finally:
        shutil.rmtree(root, ignore_errors=True)


__all__ = ["no_gc", "rebuild_path", "window_path"]
