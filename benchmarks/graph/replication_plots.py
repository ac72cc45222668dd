"""The PNGs of ``python -m benchmarks.graph replication``: one per papers/003 figure or table.

Owns only drawing (matplotlib, Agg backend): every value comes from the tables of
:mod:`benchmarks.graph.replication_tables`, which the CSVs hold too. Files: ``imitator_fig7.png``
(overheads), ``imitator_fig8.png`` (extra replicas and messages), ``imitator_table2.png``
(recovery phases), ``imitator_fig10.png`` (hash vs Fennel), ``imitator_fig11.png`` (k = 1..3),
``imitator_table3.png`` (memory), ``imitator_fig12.png`` (PageRank timelines with a failure).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.results import pyplot, save_figure

COLOURS = {"BASE": "black", "REP": "tab:blue", "CKPT/4": "tab:gray", "REP+Rebirth": "tab:orange",
           "REP+Migration": "tab:green", "CKPT/4+failure": "tab:red"}


def _bars(ax: Any, groups: Sequence[str], series: dict[str, list[float]], ylabel: str, title: str,
          percent: bool = False) -> None:
    """Grouped bars, one group per entry of ``groups``, one bar per series, values written on top."""
    x = np.arange(len(groups))
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        heights = np.array([v if v == v else 0.0 for v in values], dtype=float)
        bars = ax.bar(x + (i - (len(series) - 1) / 2) * width, heights, width, label=label)
        for bar, value in zip(bars, values, strict=True):
            if value == value:
                ax.annotate(f"{value:.1f}{'%' if percent else ''}",
                            (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                            fontsize=6, rotation=90 if len(series) > 2 else 0)
    ax.set_xticks(x, groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.axhline(0, color="black", linewidth=0.5)
    ax.legend(fontsize=7)


def _save(fig: Any, path: Path, title: str) -> None:
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path, dpi=110)


def fig7(path: Path, table: Sequence[dict[str, Any]], title: str) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    algorithms = list(dict.fromkeys(r["algorithm"] for r in table))
    modes = [m for m in dict.fromkeys(r["mode"] for r in table) if m != "none"]
    for ax, key, what in ((axes[0], "overhead_supersteps", "superstep phase"), (axes[1], "overhead_job", "Spark job")):
        series = {m: [next((100 * r[key] for r in table if r["algorithm"] == a and r["mode"] == m), float("nan"))
                      for a in algorithms] for m in modes}
        _bars(ax, algorithms, series, "overhead over no FT (%)", f"Fig. 7: overhead on the {what} (medians)",
              percent=True)
        ax.axhline(5, color="tab:red", linestyle=":", linewidth=1)
    _save(fig, path, title + "; paper: REP < 3.7 %, CKPT 65-449 %; dotted: the 5 % goal")


def fig8(path: Path, table: Sequence[dict[str, Any]], title: str) -> None:
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [r["algorithm"] for r in table]
    _bars(a, names, {"all FT replicas": [r["extra_replicas_pct"] for r in table],
                     "without selfish vertices' FT replicas": [r["extra_nonselfish_pct"] for r in table]},
          "% of all replicas", "Fig. 8(a): extra replicas (k=1)", percent=True)
    _bars(b, names, {"w/o selfish opt.": [r["extra_messages_noselfish_pct"] for r in table],
                     "w/ selfish opt.": [r["extra_messages_selfish_pct"] for r in table]},
          "% of REP's messages", "Fig. 8(b): extra messages", percent=True)
    _save(fig, path, title + "; paper: extra replicas <= 0.12 %, messages <= 2.92 % (< 0.1 % with selfish opt.)")


def table2(path: Path, tables: Sequence[Sequence[dict[str, Any]]], title: str) -> None:
    plt = pyplot()
    rows = [r for table in tables for r in table]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(max(7.0, 1.3 * len(rows)), 5))
    labels = [f"{r['algorithm']}\n{r['graph']}\n{r['mode']}" for r in rows]
    first = np.array([r.get("detected_to_started_s", np.nan) for r in rows], dtype=float)
    second = np.array([r.get("started_to_recovered_s", np.nan) for r in rows], dtype=float)
    ax.bar(labels, np.nan_to_num(first), label="detected -> started (new task / new attempt registered)")
    ax.bar(labels, np.nan_to_num(second), bottom=np.nan_to_num(first),
           label="started -> recovered (reload + reconstruct; CKPT: + replay)")
    for i, r in enumerate(rows):
        ax.annotate(f"{r['recovery_s']:.2f} s\npaper {r['paper_s']:.2f}", (i, r["recovery_s"]), ha="center",
                    va="bottom", fontsize=7)
    ax.set_ylabel("seconds (medians)")
    ax.set_ylim(0, max(r["recovery_s"] for r in rows) * 1.3)
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=7)
    ax.set_title("Table 2: recovery after one killed worker", fontsize=10)
    _save(fig, path, title)


def fig10(path: Path, table: Sequence[dict[str, Any]], title: str) -> None:
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.5))
    names = [r["partitioner"] for r in table]
    _bars(a, names, {"w/o FT": [r["replication_factor"] for r in table],
                     "with FT (k=1)": [r["replication_factor_ft"] for r in table]},
          "replication factor", "Fig. 10(a): replication factor, PageRank")
    _bars(b, names, {"REP overhead, supersteps": [100 * r["overhead_supersteps"] for r in table],
                     "extra replicas": [r["extra_replicas_pct"] for r in table],
                     "extra messages": [r["extra_messages_pct"] for r in table]},
          "%", "Fig. 10(b): REP under each partitioner", percent=True)
    _save(fig, path, title + "; paper: Fennel RF 1.61-5.09, REP overhead 1.8-4.7 %")


def fig11(path: Path, table: Sequence[dict[str, Any]], title: str) -> None:
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.5))
    ks = [f"k={r['k']}" for r in table]
    _bars(a, ks, {"supersteps": [100 * r["overhead_supersteps"] for r in table],
                  "Spark job": [100 * r["overhead_job"] for r in table]},
          "overhead over no FT (%)", "Fig. 11(a): REP overhead, PageRank", percent=True)
    a.axhline(10, color="tab:red", linestyle=":", linewidth=1)
    _bars(b, ks, {"Rebirth": [r["rebirth_recovery_s"] for r in table],
                  "Migration": [r["migration_recovery_s"] for r in table]},
          "seconds (median)", "Fig. 11(b): recovery with k workers killed at once")
    _save(fig, path, title + "; paper: overhead < 10 % at k=3 (dotted)")


def table3(path: Path, table: Sequence[dict[str, Any]], title: str) -> None:
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.5))
    configs = [r["config"] for r in table]
    _bars(a, configs, {"largest worker's partition (MiB)": [r["max_worker_partition_mib"] for r in table],
                       "of which mirror store": [r["max_worker_mirror_mib"] for r in table],
                       "workers' peak RSS growth, all workers (MiB)": [r["workers_rss_growth_mib"] for r in table]},
          "MiB", "Table 3: memory, PageRank")
    _bars(b, configs, {"epochal partition bytes": [r["vs_no_ft"] for r in table],
                       "paper max usage (Wiki)": [r["paper_usage_vs_no_ft"] for r in table]},
          "relative to w/o FT", "relative to no FT")
    _save(fig, path, title)


def fig12(path: Path, timeline: Sequence[dict[str, Any]], title: str) -> None:
    plt = pyplot()
    runs = list(dict.fromkeys(t["run"] for t in timeline))
    if not runs:
        return
    fig, (a, b) = plt.subplots(2, 1, figsize=(12, 8), sharex=True)
    for run in runs:
        steps = [t for t in timeline if t["run"] == run and not t["event"] and t["end_s"] == t["end_s"]]
        colour = COLOURS.get(run)
        ends = [t["end_s"] for t in steps]
        a.step([0.0, *ends], [-1, *(t["superstep"] for t in steps)], where="post", label=run, color=colour)
        for t in steps:
            b.hlines(t["vertices_per_s"] / 1e6, t["start_s"], t["end_s"], color=colour, linewidth=2)
        b.plot([(t["start_s"] + t["end_s"]) / 2 for t in steps], [t["vertices_per_s"] / 1e6 for t in steps], ".",
               color=colour, markersize=4, label=run)
        for t in timeline:
            if t["run"] == run and t["event"] in ("detected", "recovered"):
                for ax in (a, b):
                    ax.axvline(t["start_s"], color=colour, linestyle="--" if t["event"] == "detected" else ":",
                               linewidth=0.8)
    a.set_ylabel("superstep completed (a restart goes back)")
    a.set_title("Fig. 12: PageRank with a failure between iterations 6 and 7 (dashed: detected, dotted: recovered)",
                fontsize=10)
    a.legend(fontsize=8)
    b.set_ylabel("throughput (M vertices / s per superstep)")
    b.legend(fontsize=8)
    b.set_xlabel("seconds since superstep 0 started")
    _save(fig, path, title + "; paper: Migration ~2.6 s, Rebirth 8.8 s, CKPT/4 45 s")


def plot_all(out: Path, tables: dict[str, list[dict[str, Any]]], timeline: Sequence[dict[str, Any]],
             title: str) -> None:
    """Every PNG whose table has rows."""
    if tables["fig7"]:
        fig7(out / "imitator_fig7.png", tables["fig7"], title)
    if tables["fig8"]:
        fig8(out / "imitator_fig8.png", tables["fig8"], title)
    table2(out / "imitator_table2.png", [tables["table2"], tables["table2_large"]], title)
    if tables["fig10"]:
        fig10(out / "imitator_fig10.png", tables["fig10"], title)
    if tables["fig11"]:
        fig11(out / "imitator_fig11.png", tables["fig11"], title)
    if tables["table3"]:
        table3(out / "imitator_table3.png", tables["table3"], title)
    fig12(out / "imitator_fig12.png", timeline, title)
