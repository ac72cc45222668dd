"""The arithmetic the benchmarks' summaries are made of: percentiles, medians, and ratios of
throughputs with their confidence intervals.

Ratios of two noisy rates are summarised by their geometric mean with a Student's t interval on
the logarithms (:func:`ratio_interval`), per block of phases or rounds that ran next to each other
(:func:`block_ratios`), so that the machine's drift between blocks cancels out
(``benchmarks/machine_noise.py`` measures that drift). The peer benchmarks' rates subtract each
system's start-up (:func:`rate_after_startup`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def percentile(values: Sequence[float], q: float, *, method: str = "nearest") -> float:
    """The ``q``-quantile (``q`` from 0 to 1) of ``values``: one of the values, by its rank in
    sorted order; NaN when there are none.

    ``method="nearest"``: the value at rank ``round(q * (n - 1))`` (the first value for q = 0, the
    last for q = 1): what the latency percentiles of the benchmarks use. ``method="above"``: the
    value at rank ``floor(q * n)`` (at most the last): the smallest value with more than a ``q``
    share of the values at or below it (the SQL sinks' commit percentiles)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if method == "nearest":
        rank = max(0, round(q * (len(ordered) - 1)))
    elif method == "above":
        rank = int(q * len(ordered))
    else:
        raise ValueError(f"unknown percentile method {method!r}")
    return ordered[min(len(ordered) - 1, rank)]


def median(values: Iterable[float]) -> float:
    """The median of the finite values, as they are (NaN values left out; NaN when none remain)."""
    finite = [v for v in values if v == v]
    return statistics.median(finite) if finite else float("nan")


def cell_median(values: Iterable[Any]) -> float:
    """The median of the values that are numbers, as floats: blank cells (``""``), None and NaN
    left out; NaN when none remain. Of two, their mean."""
    numbers = [float(v) for v in values if v not in ("", None) and v == v]
    return statistics.median(numbers) if numbers else float("nan")


def median_min_max(values: Iterable[Any]) -> tuple[float, float, float]:
    """(median, min, max) of the values that are finite numbers (NaN three times when none are)."""
    finite = [v for v in values if isinstance(v, (int, float)) and v == v]
    if not finite:
        nan = float("nan")
        return nan, nan, nan
    return statistics.median(finite), min(finite), max(finite)


def block_ratios(rows: Iterable[dict[str, Any]], config: str, baseline: str,
                 value: Callable[[dict[str, Any]], float] = lambda row: row["records_per_s"]) -> list[float]:
    """Per block (``row["block"]``, in the rows' order), ``value`` of its ``config`` row over that of
    its ``baseline`` row; blocks without both are left out."""
    by_block: dict[Any, dict[str, float]] = {}
    for row in rows:
        by_block.setdefault(row["block"], {})[row["config"]] = value(row)
    return [phases[config] / phases[baseline] for phases in by_block.values()
            if config in phases and baseline in phases]


def ratio_interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """The geometric mean of ``ratios`` (each a configuration's throughput over its block's
    baseline) and its 95 % confidence interval (Student's t on the logarithms): (ratio, low, high).

    On logarithms because a ratio of two noisy rates is skewed: with 25 % noise on each, the
    arithmetic mean of the ratios comes out about 6 % above 1 when nothing differs."""
    from scipy import stats

    logs = [math.log(r) for r in ratios if r > 0]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), 0.0, math.inf
    half = float(stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / len(logs) ** 0.5)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def startup_of(runs: Iterable[Any], **match: Any) -> tuple[int, float] | None:
    """(records, median ``job_s``) of the successful ``startup`` runs whose attributes equal
    ``match`` (e.g. ``system=..., job=...``); None without one. The records are the first run's."""
    tiny = [r for r in runs if r.kind == "startup" and all(getattr(r, k) == v for k, v in match.items())
            and r.job_s is not None and not r.error]
    return (tiny[0].records, statistics.median(r.job_s for r in tiny)) if tiny else None


def rate_after_startup(run: Any, startup: tuple[int, float] | None) -> float:
    """Records per second of ``run`` after start-up: ``(N - n0) / (job_s(N) - median job_s(n0))``
    with ``startup`` = (n0, median job_s(n0)) of the tiny runs (:func:`startup_of`); ``N / job_s``
    without it. NaN for a run that failed, could not run, or took no longer than the start-up.
    ``run`` has ``records``, ``job_s``, ``error`` and ``unsupported``."""
    if run.job_s is None or run.error or run.unsupported:
        return float("nan")
    if startup is None:
        return run.records / run.job_s
    records, seconds = startup
    busy = run.job_s - seconds
    return (run.records - records) / busy if busy > 0 else float("nan")
