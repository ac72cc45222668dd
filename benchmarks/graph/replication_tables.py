"""The tables of ``python -m benchmarks.graph replication``: papers/003's numbers beside ours.

Owns the paper's values (as stated in the text of papers/003 §2.3 and §6; where a figure gives
no numbers, what the text says about it) and the summaries made from the runs and layouts
(:mod:`benchmarks.graph.replication`): one list of rows per figure or table, each written as
``imitator_<name>.csv``. Every number comes from the rows: medians of the runs that passed
(status ``ok``); overheads are against the median of the no-FT runs of the same round set.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

from benchmarks.common.stats import median
from benchmarks.graph.imitator_runs import ALGORITHMS, NAMES

TABLES = ("fig7", "phases", "compute_overhead", "fig8", "table2", "table2_large", "fig10", "fig11", "table3", "fig12",
          "fig12_timeline", "goals", "recovery_profile")
#: Fig. 12's runs: mode label -> name in the figure
FIG12_RUNS = {"none": "BASE", "rep": "REP", "ckpt-4": "CKPT/4", "rep-rebirth": "REP+Rebirth",
              "rep-migration": "REP+Migration", "ckpt-4-fail": "CKPT/4+failure"}

# -------------------------------------------------------------------------------- papers/003
PAPER_FIG7_REP = "< 3.7 % for every algorithm and graph (mean 1.2 %, -0.6 to 3.7 %)"
PAPER_FIG7_CKPT = "65 % (PageRank, Wiki) to 449 % (CD, DBLP), HDFS"
#: Fig. 2(b): CKPT overhead, PageRank on LJournal, 20 iterations, by interval
PAPER_CKPT_PR = {1: 0.89, 2: 0.51, 4: 0.26}
PAPER_FIG8 = "extra replicas <= 0.12 % (without selfish vertices); extra messages <= 2.92 %, < 0.1 % with selfish opt."
#: Table 2: recovery time (s): algorithm -> (graph, CKPT, Rebirth, Migration)
PAPER_TABLE2 = {"pr": [("GWeb", 8.17, 2.08, 1.20), ("LJournal", 41.00, 8.85, 2.32), ("Wiki", 55.67, 14.12, 3.40)],
                "als": [("SYN-GL", 6.86, 1.00, 1.28)], "cdlp": [("DBLP", 3.88, 0.67, 1.09)],
                "sssp": [("RoadCA", 12.06, 2.27, 1.57)]}
#: the paper's graph nearest ours in vertices per worker (LJournal: 4.85M / 50 nodes ~ 97k)
PAPER_TABLE2_NEAREST = {"pr": "LJournal", "sssp": "RoadCA", "als": "SYN-GL", "cdlp": "DBLP"}
PAPER_FIG10 = "Fennel replication factor 1.61 (GWeb), 3.84 (LJournal), 5.09 (Wiki); REP overhead 1.8-4.7 %"
PAPER_FIG11 = "overhead < 10 % with k=3; Rebirth recovery grows with k (more messages), Migration stays small"
#: Table 3 (one node, PageRank on Wiki): config -> (max capacity GB, max usage GB)
PAPER_TABLE3 = {0: (3.85, 2.76), 1: (5.05, 3.70), 2: (6.24, 4.51), 3: (6.99, 4.91)}
PAPER_FIG12 = {"BASE": "", "REP": "", "CKPT/4": "", "REP+Rebirth": "recovery 8.8 s (after ~7 s detection)",
               "REP+Migration": "recovery ~2.6 s (after ~7 s detection)",
               "CKPT/4+failure": "recovery 45 s, then 2 iterations replayed"}
MIB = 2**20
#: the superstep after which workers are killed (papers/003 Fig. 12: between iterations 6 and 7)
FAIL_AT = 6


def _ok(rows: Iterable[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    """The runs that passed and match; the large runs (another graph) only when asked for."""
    large = match.get("experiment") == "large"
    return [r for r in rows if r["status"] == "ok" and (r["experiment"] == "large") == large
            and all(r.get(k) == v for k, v in match.items())]


def _med(rows: Sequence[dict[str, Any]], key: str) -> float:
    return median(float(r[key]) for r in rows if r.get(key, "") != "")


def _ratio(a: float, b: float) -> float:
    return a / b if b == b and b else float("nan")


def _layout(layouts: Sequence[dict[str, Any]], algorithm: str, partitioner: str, k: int) -> dict[str, Any]:
    return next((s for s in layouts if s["algorithm"] == algorithm and s["partitioner"] == partitioner
                 and s["k"] == k and not s.get("large")), {})


def _paired(mine: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]], key: str) -> float:
    """The median over rounds of ``mine``'s run over the same round's ``base`` run, minus one: the
    estimator that cancels load changing between rounds."""
    by_round = {r["repeat"]: float(r[key]) for r in base}
    return median(_ratio(float(r[key]), by_round[r["repeat"]]) - 1 for r in mine if r["repeat"] in by_round)


def _overheads(mine: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Medians of ``mine`` and their overhead over the medians of ``base`` (and paired by round:
    ``*_paired``); the superstep-phase overhead's spread over the single runs too."""
    out: dict[str, float] = {"runs": len(mine)}
    for key, short in (("supersteps_s", "supersteps"), ("step_ms", "step"), ("job_s", "job"), ("seconds", "wall")):
        value, reference = _med(mine, key), _med(base, key)
        out[key] = value
        out[f"overhead_{short}"] = _ratio(value, reference) - 1
        out[f"overhead_{short}_paired"] = _paired(mine, base, key)
    single = [_ratio(float(r["supersteps_s"]), _med(base, "supersteps_s")) - 1 for r in mine]
    out["overhead_supersteps_min"] = min(single, default=float("nan"))
    out["overhead_supersteps_max"] = max(single, default=float("nan"))
    return out


def fig7(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runtime overhead of REP and CKPT over no FT, per algorithm (failure-free rounds)."""
    out = []
    for algorithm in ALGORITHMS:
        free = _ok(rows, algorithm=algorithm, experiment="overhead")
        base = [r for r in free if r["mode"] == "none"]
        if not base:
            continue
        out.append({"algorithm": NAMES[algorithm], "mode": "none", **_overheads(base, base), "paper": ""})
        for mode in sorted({r["mode"] for r in free} - {"none"}, key=lambda m: (m != "rep", m)):
            paper = PAPER_FIG7_REP if mode == "rep" else PAPER_FIG7_CKPT
            interval = int(mode.split("-")[1]) if mode.startswith("ckpt") else None
            if algorithm == "pr" and interval in PAPER_CKPT_PR:
                paper = f"{PAPER_CKPT_PR[interval]:.0%} (PageRank LJournal, CKPT/{interval}, Fig. 2b)"
            out.append({"algorithm": NAMES[algorithm], "mode": mode,
                        **_overheads([r for r in free if r["mode"] == mode], base), "paper": paper})
    return out


def phases(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where the superstep phase goes, no FT against REP (failure-free rounds, medians): the
    slowest worker's compute, send and commit seconds summed over supersteps, and the rest."""
    out = []
    for algorithm in ALGORITHMS:
        free = _ok(rows, algorithm=algorithm, experiment="overhead")
        for mode in ("none", "rep"):
            mine = [r for r in free if r["mode"] == mode and "compute_s" in r]
            if mine:
                out.append({"algorithm": NAMES[algorithm], "mode": mode, "runs": len(mine),
                            **{key: _med(mine, key) for key in ("supersteps_s", "compute_s", "send_s", "commit_s",
                                                                "barrier_s")}})
    return out


def fig8(rows: Sequence[dict[str, Any]], layouts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Extra replicas (% of all replicas) and extra messages (% of REP's), selfish on and off."""
    out = []
    for algorithm in ALGORITHMS:
        layout = _layout(layouts, algorithm, "hash", 1)
        base = _ok(rows, algorithm=algorithm, mode="none", partitioner="hash")
        if not layout or not base:
            continue
        total, extra, selfish = layout["total_replicas"], layout["extra_replicas"], layout["extra_selfish"]
        sent_none = _med(base, "sent")
        row = {"algorithm": NAMES[algorithm], "replicas_total": total, "extra_replicas": extra,
               "extra_replicas_pct": 100 * _ratio(extra, total), "extra_selfish_replicas": selfish,
               "extra_nonselfish_pct": 100 * _ratio(extra - selfish, total), "messages_none": sent_none}
        for label, mode in (("selfish", "rep"), ("noselfish", "rep-noselfish")):
            mine = _ok(rows, algorithm=algorithm, mode=mode)
            if not mine and mode == "rep-noselfish" and algorithm != "pr":
                mine = _ok(rows, algorithm=algorithm, mode="rep")  # no selfish vertices: the same job
            sent = _med(mine, "sent")
            row[f"messages_rep_{label}"] = sent
            row[f"extra_messages_{label}_pct"] = 100 * _ratio(sent - sent_none, sent)
        row["paper"] = PAPER_FIG8
        out.append(row)
    return out


def _paper_recovery(algorithm: str, mode: str) -> float:
    nearest = PAPER_TABLE2_NEAREST.get(algorithm)
    for graph, ckpt, rebirth, migration in PAPER_TABLE2.get(algorithm, []):
        if graph == nearest:
            return {"ckpt": ckpt, "rebirth": rebirth, "migration": migration}[mode]
    return float("nan")


PHASES = ("recovery_s", "detected_to_started_s", "started_to_recovered_s", "task_start_s", "deploy_s", "reload_s",
          "reconstruct_s", "resumed_step_s", "recovered_s", "stop_s", "resubmit_s", "register_s", "load_restore_s",
          "replay_s", "replayed_supersteps", "worker_rewind_s", "worker_build_s", "worker_send_s",
          "worker_assemble_s")


def table2(rows: Sequence[dict[str, Any]], layouts: Sequence[dict[str, Any]],
           experiment: str = "recovery") -> list[dict[str, Any]]:
    """Recovery time of CKPT/4, Rebirth and Migration after one killed worker, with phases."""
    out = []
    for algorithm in ALGORITHMS:
        failed = _ok(rows, algorithm=algorithm, experiment=experiment)
        if not failed:
            continue
        layout = next((s for s in layouts if s["algorithm"] == algorithm and s["k"] == 1 and s["partitioner"] == "hash"
                       and bool(s.get("large")) == (experiment == "large")), {})
        held = layout.get("held", [float("nan")] * 2)[1]
        ckpt = _med([r for r in failed if r["ft"] == "checkpoint"], "recovery_s")
        for mode, label in (("ckpt", "CKPT/4"), ("rebirth", "Rebirth"), ("migration", "Migration")):
            mine = [r for r in failed if (r["ft"] == "checkpoint") == (mode == "ckpt")
                    and (mode == "ckpt" or r["recovery"] == mode)]
            if not mine:
                continue
            row: dict[str, Any] = {"algorithm": NAMES[algorithm], "graph": mine[0]["graph"], "mode": label,
                                   "parallelism": mine[0]["parallelism"], "runs": len(mine),
                                   "killed_worker_held": held}
            row.update({p: _med(mine, p) for p in PHASES if any(p in r for r in mine)})
            row["ckpt_over_this"] = _ratio(ckpt, row["recovery_s"])
            row["paper_graph"] = PAPER_TABLE2_NEAREST.get(algorithm, "")
            row["paper_s"] = _paper_recovery(algorithm, mode)
            row["paper_ckpt_over_this"] = _ratio(_paper_recovery(algorithm, "ckpt"), row["paper_s"])
            out.append(row)
    return out


def fig10(rows: Sequence[dict[str, Any]], layouts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hash vs Fennel: replication factor without and with FT, extra replicas and messages, REP overhead."""
    out = []
    for partitioner in ("hash", "fennel"):
        base = _ok(rows, algorithm="pr", mode="none" if partitioner == "hash" else "none-fennel")
        rep = _ok(rows, algorithm="pr", mode="rep" if partitioner == "hash" else "rep-fennel")
        plain, ft = _layout(layouts, "pr", partitioner, 0), _layout(layouts, "pr", partitioner, 1)
        if not base or not rep or not ft:
            continue
        sent_none, sent_rep = _med(base, "sent"), _med(rep, "sent")
        out.append({"partitioner": partitioner, "replication_factor": plain.get("replication_factor", float("nan")),
                    "replication_factor_ft": ft["replication_factor"],
                    "extra_replicas_pct": 100 * _ratio(ft["extra_replicas"], ft["total_replicas"]),
                    "extra_messages_pct": 100 * _ratio(sent_rep - sent_none, sent_rep),
                    "partition_s": ft["partition_s"], **_overheads(rep, base), "paper": PAPER_FIG10})
    return out


def fig11(rows: Sequence[dict[str, Any]], layouts: Sequence[dict[str, Any]], max_k: int) -> list[dict[str, Any]]:
    """Tolerating k = 1..max_k failures: overhead, extra replicas, recovery of k workers killed at once."""
    base = _ok(rows, algorithm="pr", mode="none", experiment="overhead")
    out = []
    for k in range(1, max_k + 1):
        suffix = "" if k == 1 else f"-k{k}"
        rep = _ok(rows, algorithm="pr", mode=f"rep{suffix}", partitioner="hash")
        layout = _layout(layouts, "pr", "hash", k)
        row: dict[str, Any] = {"k": k, **_overheads(rep, base),
                               "replication_factor_ft": layout.get("replication_factor", float("nan")),
                               "extra_replicas_pct": 100 * _ratio(layout.get("extra_replicas", float("nan")),
                                                                  layout.get("total_replicas", float("nan")))}
        for recovery in ("rebirth", "migration"):
            failed = _ok(rows, algorithm="pr", mode=f"rep{suffix}-{recovery}")
            for key in ("recovery_s", "detected_to_started_s", "reload_s", "reconstruct_s"):
                row[f"{recovery}_{key}"] = _med(failed, key)
            row[f"{recovery}_runs"] = len(failed)
        row["paper"] = PAPER_FIG11
        out.append(row)
    return out


def table3(rows: Sequence[dict[str, Any]], layouts: Sequence[dict[str, Any]], max_k: int) -> list[dict[str, Any]]:
    """Memory without FT and with FT/1..FT/max_k: partition bytes (driver) and the workers' peak RSS."""
    out = []
    plain = None
    for k in range(0, max_k + 1):
        layout = _layout(layouts, "pr", "hash", k)
        if not layout:
            continue
        mode = "none" if k == 0 else "rep" + ("" if k == 1 else f"-k{k}")
        runs = [r for r in _ok(rows, algorithm="pr", mode=mode) if r["experiment"] in ("overhead", "multi")]
        worst = max(layout["bytes"])
        plain = plain or worst
        cap, usage = PAPER_TABLE3.get(k, (float("nan"), float("nan")))
        out.append({"config": "w/o FT" if k == 0 else f"FT/{k}", "max_worker_partition_mib": worst / MIB,
                    "mean_worker_partition_mib": sum(layout["bytes"]) / len(layout["bytes"]) / MIB,
                    "max_worker_mirror_mib": max(layout["mirror_bytes"]) / MIB,
                    "max_worker_held": max(layout["held"]), "vs_no_ft": worst / plain,
                    "workers_peak_rss_mib": _med(runs, "workers_peak_mb"),
                    "workers_rss_growth_mib": median(float(r["workers_peak_mb"]) - float(r["workers_base_mb"])
                                                     for r in runs if r.get("workers_base_mb", "") != ""),
                    "rss_runs": len(runs), "paper_max_usage_gb": usage, "paper_max_cap_gb": cap,
                    "paper_usage_vs_no_ft": usage / PAPER_TABLE3[0][1]})
    return out


def fig12(timeline: Sequence[dict[str, Any]], fail_at: int = 6) -> list[dict[str, Any]]:
    """Per run of Fig. 12: time to the last superstep, supersteps run twice, and the recovery span
    (failure detected -> the superstep after ``fail_at`` started again, replay included)."""
    out = []
    for name in FIG12_RUNS.values():
        mine = [t for t in timeline if t["run"] == name]
        steps = [t for t in mine if not t["event"]]
        if not steps:
            continue
        marks = {t["event"]: t["start_s"] for t in mine if t["event"]}
        done = [t for t in steps if t["end_s"] == t["end_s"]]
        numbers = [t["superstep"] for t in done]
        detected = marks.get("detected", float("nan"))
        # back where the failure struck: the first superstep after the failed one started again
        back = min((t["start_s"] for t in steps if t["start_s"] > detected and t["superstep"] > fail_at),
                   default=float("nan"))
        out.append({"run": name, "finished_s": max(t["end_s"] for t in done), "supersteps_run": len(done),
                    "supersteps_repeated": len(numbers) - len(set(numbers)), "detected_s": detected,
                    "recovery_s": back - detected,
                    "median_vertices_per_s": median(t["vertices_per_s"] for t in done if t["superstep"] > 0),
                    "paper": PAPER_FIG12.get(name, "")})
    return out


def goals(fig7_rows: Sequence[dict[str, Any]], table2_rows: Sequence[dict[str, Any]],
          large_rows: Sequence[dict[str, Any]], compute: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The three goals, met or missed, with the numbers behind each verdict."""
    out = []
    for row in compute:
        out.append({"goal": "REP overhead <= 5 %", "case": f"{row['algorithm']}, computation alone (one process)",
                    "measured": f"{100 * row['compute_overhead']:.1f} % (best of each), "
                                f"{100 * row['compute_overhead_paired']:.1f} % (median of paired repeats)",
                    "met": row["compute_overhead"] <= 0.05})
    for row in fig7_rows:
        if row["mode"] != "rep":
            continue
        for key, what in (("overhead_supersteps", "superstep phase"), ("overhead_job", "Spark job")):
            value, paired = row[key], row[f"{key}_paired"]
            out.append({"goal": "REP overhead <= 5 %", "case": f"{row['algorithm']}, {what}",
                        "measured": f"{100 * value:.1f} % (medians), {100 * paired:.1f} % (paired by round)",
                        "met": max(value, paired) <= 0.05})
    for rows, where in ((table2_rows, "rep-scale"), (large_rows, "large")):
        by = {(r["algorithm"], r["mode"]): r for r in rows}
        for (algorithm, mode), row in by.items():
            if mode == "Migration" and (algorithm, "CKPT/4") in by:
                ratio = row["ckpt_over_this"]
                out.append({"goal": "Migration >= 5x faster than CKPT recovery", "case": f"{algorithm}, {row['graph']}",
                            "measured": f"{ratio:.1f}x ({by[(algorithm, 'CKPT/4')]['recovery_s']:.2f} s / "
                                        f"{row['recovery_s']:.3f} s)", "met": ratio >= 5})
            if where == "large" and mode in ("Rebirth", "Migration"):
                out.append({"goal": "~1M vertices (masters + replicas) recovered within 1 s",
                            "case": f"{mode}, {row['graph']}, killed worker held {row['killed_worker_held']:,}",
                            "measured": f"{row['recovery_s']:.3f} s (detected->started "
                                        f"{row['detected_to_started_s']:.3f}, started->recovered "
                                        f"{row['started_to_recovered_s']:.3f})",
                            "met": row["recovery_s"] <= 1.0})
    return out


def build(rows: Sequence[dict[str, Any]], layouts: Sequence[dict[str, Any]], timeline: Sequence[dict[str, Any]],
          args: argparse.Namespace, compute: Sequence[dict[str, Any]] = ()) -> dict[str, list[dict[str, Any]]]:
    """Every table, by name (see :data:`TABLES`); ``compute``: the in-process compute overheads."""
    tables = {"fig7": fig7(rows), "phases": phases(rows), "fig8": fig8(rows, layouts), "table2": table2(rows, layouts),
              "fig10": fig10(rows, layouts), "fig11": fig11(rows, layouts, args.rep_max_k),
              "table3": table3(rows, layouts, args.rep_max_k), "fig12": fig12(timeline, FAIL_AT),
              "table2_large": table2(rows, layouts, "large")}
    tables["compute_overhead"] = list(compute)
    tables["goals"] = goals(tables["fig7"], tables["table2"], tables["table2_large"], compute)
    tables["fig12_timeline"] = list(timeline)
    return tables


def show(name: str, table: Sequence[dict[str, Any]]) -> None:
    """Print a table compactly (the timeline only as a count)."""
    if name == "fig12_timeline" or not table:
        print(f"\n{name}: {len(table)} rows", flush=True)
        return
    columns = [c for c in table[0] if not c.startswith("paper")]
    print(f"\n{name}:\n" + " | ".join(columns))
    for row in table:
        print(" | ".join(_fmt(row.get(c, "")) for c in columns))
    paper = {k: v for k, v in table[0].items() if k.startswith("paper") and isinstance(v, str)}
    for key, value in paper.items():
        if value:
            print(f"  {key}: {value}")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "-" if value != value else (f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}")
    return str(value)
