"""What the dashboard costs the browser showing it: Chromium's CPU seconds per second of wall time
with a running job's page open (summed over Chromium's processes), and the page's work per poll
as the Chrome DevTools Protocol's ``Performance`` domain counts it (layouts, style
recalculations, script and task time), for the page as it is and for the page of another git
revision (``--baseline``), in alternating windows of one run against one job.

The job is the dataflow of the peers' ``keyed`` job (generator -> parse -> ``(key, 1)`` ->
``key_by`` -> running count -> discard; 10,000 keys, exactly-once checkpoints every second,
parallelism 2 on ``local[2]``), its generator held to ``--rate`` records per second so that the
machine is not saturated by the job itself. Each window opens the page in a fresh browser
context (nothing cached), waits until it shows the graph and ``--settle`` seconds more, then
measures for ``--window`` seconds. The baseline's page is the revision's ``dashboard.js``,
``dashboard.css`` and ``index.html`` served in place of the package's (Playwright's request
routing), against the same server: what changed is the page alone.

    python -m benchmarks.dashboard_browser_cost --baseline 72a53e3        # 3 rounds of 60 s windows
    python -m benchmarks.dashboard_browser_cost --window 20 --rounds 1    # quick check, this page only

Writes ``dashboard_browser_cost.csv`` (one row per window) into ``--out`` and prints the median
of each variant.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common.isolation import isolated_home, rotate
from benchmarks.common.results import RESULTS, ROOT, write_csv

CHROMIUM = "/usr/bin/chromium"
#: How Chromium is started: headless, no sandbox, nothing fetched from the network (as the tests).
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: The CDP ``Performance`` metrics reported per poll (durations in seconds, counts).
PERFORMANCE = ("LayoutCount", "RecalcStyleCount", "ScriptDuration", "TaskDuration", "LayoutDuration",
               "RecalcStyleDuration")
#: The dashboard's files a baseline revision replaces (under src/epochal/rest/dashboard/).
ASSETS = ("dashboard.js", "dashboard.css", "index.html")


def chromium_missing() -> bool:
    """Whether :data:`CHROMIUM` is missing (said on standard error): the dashboard benchmarks need it."""
    if os.path.exists(CHROMIUM):
        return False
    print(f"{CHROMIUM} is missing: apt-get install chromium", file=sys.stderr)
    return True


def chromium_cpu(root: int | None = None) -> dict[int, float]:
    """CPU seconds (user + system) of every live Chromium process under ``root`` (default: this
    process), by pid: the browser, its renderers, GPU and utility processes; not Playwright's
    driver, and not Spark's or the job's processes."""
    import psutil

    out: dict[int, float] = {}
    try:
        processes = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return out
    for process in processes:
        try:
            if "chrom" not in process.name().lower():
                continue
            times = process.cpu_times()
            out[process.pid] = times.user + times.system
        except psutil.Error:
            continue
    return out


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two :func:`chromium_cpu` readings (a process new since counts whole)."""
    return sum(after[pid] - before.get(pid, 0.0) for pid in after)


def performance(cdp: Any) -> dict[str, float]:
    """The page's CDP ``Performance.getMetrics`` (``Performance.enable`` sent before)."""
    return {m["name"]: float(m["value"]) for m in cdp.send("Performance.getMetrics")["metrics"]}


#: What the page fetched so far that its poll asks once per poll (one entry per poll).
POLLS_JS = "performance.getEntriesByType('resource').filter(e => e.name.includes('/vertices')).length"


@dataclass
class PageCost:
    """One window of the page open: Chromium's CPU, polls done, and the page's work per poll."""

    variant: str
    round: int
    seconds: float
    chromium_cpu_s: float
    polls: int
    layouts_per_poll: float
    style_recalcs_per_poll: float
    script_ms_per_poll: float
    task_ms_per_poll: float
    layout_ms_per_poll: float
    style_ms_per_poll: float
    load_1min: float

    @property
    def cpu_per_s(self) -> float:
        return self.chromium_cpu_s / self.seconds


class PageMeter:
    """Measures one open page: :meth:`start`, then :meth:`stop` returns a :class:`PageCost`
    (``variant``/``round`` filled in by the caller)."""

    def __init__(self, context: Any, page: Any) -> None:
        self.page = page
        self.cdp = context.new_cdp_session(page)
        self.cdp.send("Performance.enable")
        page.evaluate("performance.setResourceTimingBufferSize(1000000)")

    def start(self) -> None:
        self.load = os.getloadavg()[0]
        self.polls = int(self.page.evaluate(POLLS_JS))
        self.metrics = performance(self.cdp)
        self.cpu = chromium_cpu()
        self.started = time.perf_counter()

    def stop(self, variant: str, round_: int) -> PageCost:
        cpu = cpu_spent(self.cpu, chromium_cpu())
        seconds = time.perf_counter() - self.started
        metrics = performance(self.cdp)
        polls = int(self.page.evaluate(POLLS_JS)) - self.polls
        per = {name: (metrics.get(name, 0.0) - self.metrics.get(name, 0.0)) / max(polls, 1) for name in PERFORMANCE}
        return PageCost(variant, round_, seconds, cpu, polls, per["LayoutCount"], per["RecalcStyleCount"],
                        per["ScriptDuration"] * 1e3, per["TaskDuration"] * 1e3, per["LayoutDuration"] * 1e3,
                        per["RecalcStyleDuration"] * 1e3, self.load)


def baseline_assets(revision: str) -> dict[str, bytes]:
    """The dashboard's files at git ``revision``."""
    return {name: subprocess.run(["git", "show", f"{revision}:src/epochal/rest/dashboard/{name}"], cwd=ROOT,
                                 check=True, capture_output=True).stdout for name in ASSETS}


def start_job(spark: Any, rate: float, work: Path) -> Any:
    """The keyed job, unbounded at ``rate`` records/s, with its REST server; its client."""
    import epochal
    from benchmarks.peers import run_epochal, spec

    keys = spec.JOBS["keyed"].keys
    make_line = spec.make_line
    env = epochal.Environment(2, spark=spark, progress=False)
    env.enable_checkpointing(spec.CHECKPOINT_INTERVAL_S, "exactly_once", storage=str(work / "checkpoints"))
    run_epochal.running_counts(env.from_generator(lambda i: make_line(i, keys), rate=rate).map(spec.parse_line)) \
        .discard()
    client = env.execute_async("dashboard-browser-cost")
    client.wait_until_running()
    return client


def serve(name: str, body: bytes) -> Any:
    """A Playwright route handler answering with ``body`` as file ``name``."""
    kind = {"js": "text/javascript", "css": "text/css", "html": "text/html"}[name.rsplit(".", 1)[1]]
    return lambda route, request: route.fulfill(body=body, content_type=kind)


def measure(url: str, variants: dict[str, dict[str, bytes] | None], rounds: int, window: float,
            settle: float) -> list[PageCost]:
    """Rounds of one window per variant (rotating order): the page at ``url`` in Chromium, its
    assets replaced by the variant's (None: as served)."""
    from playwright.sync_api import sync_playwright

    costs: list[PageCost] = []
    names = list(variants)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            for round_ in range(rounds):
                for variant in rotate(names, round_):
                    context = browser.new_context(viewport={"width": 1400, "height": 1000})
                    for name, body in (variants[variant] or {}).items():
                        context.route(f"**/dashboard/{name if name != 'index.html' else ''}", serve(name, body))
                    page = context.new_page()
                    page.goto(url)
                    page.wait_for_selector("#graph .vertex")
                    meter = PageMeter(context, page)
                    time.sleep(settle)
                    meter.start()
                    time.sleep(window)
                    cost = meter.stop(variant, round_)
                    context.close()
                    costs.append(cost)
                    print(f"[{round_}] {variant:>9}: {cost.cpu_per_s:.3f} Chromium CPU-s/s, {cost.polls} polls, "
                          f"per poll {cost.layouts_per_poll:.1f} layouts, {cost.style_recalcs_per_poll:.1f} style "
                          f"recalcs, script {cost.script_ms_per_poll:.1f} ms, tasks {cost.task_ms_per_poll:.1f} ms "
                          f"(load {cost.load_1min:.1f})", flush=True)
        finally:
            browser.close()
    return costs


def report(costs: list[PageCost]) -> None:
    print("\nmedian per variant:")
    for variant in dict.fromkeys(c.variant for c in costs):
        mine = [c for c in costs if c.variant == variant]
        cpu = [c.cpu_per_s for c in mine]

        def med(field: str, runs: list[PageCost] = mine) -> float:
            return statistics.median(getattr(c, field) for c in runs)

        print(f"  {variant:>9}: {statistics.median(cpu):.3f} Chromium CPU-s/s ({min(cpu):.3f}-{max(cpu):.3f}); "
              f"per poll: {med('layouts_per_poll'):.1f} layouts, {med('style_recalcs_per_poll'):.1f} style recalcs, "
              f"script {med('script_ms_per_poll'):.1f} ms, tasks {med('task_ms_per_poll'):.1f} ms, layout "
              f"{med('layout_ms_per_poll'):.1f} ms, style {med('style_ms_per_poll'):.1f} ms")


def write(out: Path, costs: list[PageCost]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "dashboard_browser_cost.csv", [{**asdict(c), "cpu_per_s": c.cpu_per_s} for c in costs])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard_browser_cost",
                                     description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--baseline", help="a git revision whose dashboard page is measured beside this one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured per window (default 60)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after the page showed the graph")
    parser.add_argument("--rate", type=float, default=20_000.0, help="the job's records per second")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if chromium_missing():
        return 1
    from epochal.control.spark import create_session

    variants: dict[str, dict[str, bytes] | None] = {"this": None}
    if args.baseline:
        variants = {args.baseline: baseline_assets(args.baseline), **variants}
    work = isolated_home("epochal-dashboard-browser-")
    spark = create_session("local[2]", 2, app_name="epochal-dashboard-browser-cost")
    try:
        client = start_job(spark, args.rate, work)
        try:
            costs = measure(client.dashboard_url, variants, args.rounds, args.window, args.settle)
        finally:
            client.cancel(timeout=60)
    finally:
        spark.stop()
    write(args.out, costs)
    report(costs)
    print(f"wrote {args.out / 'dashboard_browser_cost.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
