"""What watching a job costs it: the peers' keyed job with its dashboard open in Chromium and its
Prometheus endpoint scraped every second, against the same job with both off.

The job is the ``keyed`` job of the peer benchmarks (:mod:`benchmarks.peers.run_epochal`: a
generator of ``--records`` lines -> parse -> (key, 1) -> key_by -> running count -> a discard
sink; 10,000 keys, exactly-once checkpoints every second; parallelism 2 on ``local[2]``), run
with ``env.execute``; the timed quantity is the wall time around it. Two configurations:

* ``off``: ``EngineConfig(rest_enabled=False)``: no REST server, no dashboard, no metrics;
* ``watched``: the REST server on; a watcher process (started and ready before the job) opens the
  job's dashboard page in a headless Chromium (Debian's, started with the page's URL on its
  command line, as a person's browser: nothing drives or observes it while the job runs; the
  page polls the API at its default refresh and redraws the graph, tables and charts) and
  scrapes ``/metrics`` every second. Once the job ended, the watcher attaches to the browser
  (Chrome DevTools Protocol) only to read how many requests the page made. With
  ``--automation`` the page is driven by Playwright instead, which also records the page's
  work per poll (CDP Performance metrics, every request event): Playwright's own traffic and
  process then take their share of the machine too;
* ``polled``: the same requests from a plain Python client instead of the browser (the page's
  :data:`PAGE_PATHS` and the scrape, every second): what the job pays when the browser runs on
  another machine, as it would, since a browser on the job's own machine takes CPU from it.

Rounds interleave the three in a rotating order, so drift of this shared machine hits all alike;
the load average is recorded beside every run. The watcher's own CPU time (browser included,
its start-up before the job not) is counted apart. All runs share one SparkSession after an
untimed warm-up.

    python -m benchmarks.dashboard_overhead                       # 2,000,000 records, 5 rounds
    python -m benchmarks.dashboard_overhead --records 300000 --rounds 1   # quick check

Writes ``dashboard_overhead.csv`` (one row per run) and ``dashboard_overhead.png`` into ``--out``
and prints the median throughput of each configuration and their ratios to ``off`` (goal: within
2 %).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common.isolation import isolated_home, rotate, wait_unregistered
from benchmarks.common.measure import slope, tree_cpu
from benchmarks.common.results import BLUE, GREY, ORANGE, RESULTS, error_bars, pyplot, save_figure, uptime, write_rows
from benchmarks.dashboard_browser_cost import ARGS, CHROMIUM, PageMeter, chromium_missing

CONFIGS = ("off", "watched", "polled")
#: What the dashboard's job page asks every second (``{id}``: the job), beside ``/plan`` once.
PAGE_PATHS = ("/jobs/{id}", "/jobs/{id}/vertices", "/jobs/{id}/checkpoints?history=60")
#: ... and once in this many polls (a dataflow job's kind shows no tables of its own: the page
#: asks again only now and then)
KIND_PATH, KIND_EVERY = "/jobs/{id}/kind", 10
GOAL = 0.02
#: What a ``watched`` run records of :class:`~benchmarks.dashboard_browser_cost.PageCost`.
PAGE_COST = ("chromium_cpu_s", "polls", "layouts_per_poll", "style_recalcs_per_poll", "script_ms_per_poll",
             "task_ms_per_poll")


@dataclass
class Run:
    config: str
    round: int
    records: int
    seconds: float
    load_1min: float
    #: what the watcher did during the run: metrics scrapes, API requests of the page
    scrapes: int = 0
    page_requests: int = 0
    #: CPU seconds of the watcher's process tree (Playwright, Chromium) while the job ran (its
    #: start-up, before the job, not counted)
    watcher_cpu_s: float = 0.0
    #: ``watched``: CPU seconds of Chromium's processes alone from the page's load to the job's
    #: end (what the page costs the browser, whatever the load), and the page's work per poll
    #: (CDP Performance metrics: layouts, style recalculations, script and task milliseconds)
    chromium_cpu_s: float = 0.0
    polls: int = 0
    layouts_per_poll: float = 0.0
    style_recalcs_per_poll: float = 0.0
    script_ms_per_poll: float = 0.0
    task_ms_per_poll: float = 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def keyed_job(spark: Any, records: int, rest: bool, work: Path) -> Any:
    """The peers' keyed job over ``records`` records (parallelism 2, exactly-once checkpoints every
    second into ``work``), the REST server on (``rest``) or off; its environment, to execute."""
    import epochal
    from benchmarks.peers import run_epochal, spec

    env = epochal.Environment(2, spark=spark, rest_enabled=rest, progress=False)
    env.enable_checkpointing(spec.CHECKPOINT_INTERVAL_S, "exactly_once", storage=str(work / "checkpoints"))
    run_epochal.build(env, "keyed", records, run_epochal.LatencySamplingDiscardSink(work))
    return env


def run_job(spark: Any, records: int, rest: bool, work: Path) -> float:
    """The peers' keyed job over ``records`` records; the wall time of ``execute``."""
    env = keyed_job(spark, records, rest, work)
    started = time.perf_counter()
    env.execute("dashboard-overhead", timeout=900)
    return time.perf_counter() - started


# ---------------------------------------------------------------------- the watcher (its own process)
def ready_then_jobs(directory: Path) -> list[Any]:
    """Say ``ready``, then wait for the job to appear in the registry (or ``stop``): its entries."""
    from epochal.control.job_registry import Registry

    (directory / "ready").touch()
    entries: list[Any] = []
    while not entries and not (directory / "stop").exists():
        time.sleep(0.02)
        entries = Registry().entries()
    return entries


def poll(directory: Path) -> None:
    """The ``polled`` watcher: say ``ready``; for the job that appears in the registry, ask what
    the dashboard's page asks (:data:`PAGE_PATHS`) and scrape ``/metrics`` once a second, over one
    kept-alive connection, until ``stop`` appears; write counts."""
    import http.client

    entries = ready_then_jobs(directory)
    scrapes = requests = 0
    if entries:
        entry = entries[0]
        host, port = entry.address.rsplit(":", 1)
        headers = {"Authorization": f"Bearer {entry.token}"}
        connection = http.client.HTTPConnection(host, int(port), timeout=5)
        paths = [f"/jobs/{entry.job_id}/plan"]
        next_at = time.monotonic()
        polls = 0
        while not (directory / "stop").exists():
            kind = [KIND_PATH] if polls % KIND_EVERY == 0 else []
            polls += 1
            for path in [*paths, *(p.format(id=entry.job_id) for p in (*PAGE_PATHS, *kind)), "/metrics"]:
                try:
                    connection.request("GET", path, headers=headers)
                    connection.getresponse().read()
                except OSError:
                    connection.close()  # the job ended and its server with it
                    continue
                if path == "/metrics":
                    scrapes += 1
                else:
                    requests += 1
            paths = []
            next_at = max(next_at + 1.0, time.monotonic())  # no burst to catch up after a pause (SIGSTOP)
            time.sleep(max(0.0, next_at - time.monotonic()))
    (directory / "counts.json").write_text(json.dumps({"scrapes": scrapes, "page_requests": requests}))


def watch_plain(directory: Path) -> None:
    """The ``watched`` watcher without automation: start Chromium on a blank page, say ``ready``;
    for the job that appears in the registry, open its dashboard in a new tab (one request to
    Chromium's DevTools HTTP endpoint; nothing stays attached) and scrape ``/metrics`` once a
    second until ``stop`` appears; then attach over CDP once to read how many requests the page
    made, and write counts and Chromium's CPU while the job ran."""
    import shutil

    profile = Path(tempfile.mkdtemp(prefix="epochal-dashboard-chromium-"))
    browser = subprocess.Popen([CHROMIUM, *ARGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                "--window-size=1400,1000", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (profile / "DevToolsActivePort").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    devtools = f"http://127.0.0.1:{(profile / 'DevToolsActivePort').read_text().split()[0]}"
    entries = ready_then_jobs(directory)
    scrapes = requests = 0
    chromium_cpu = 0.0
    if entries:
        entry = entries[0]
        before = tree_cpu(browser.pid)
        blank = json.loads(urllib.request.urlopen(f"{devtools}/json/list", timeout=10).read())
        url = f"http://{entry.address}/dashboard?token={entry.token}#/jobs/{entry.job_id}"
        # (quoted: a '#' would end the DevTools request's own URL, and the page open the job list)
        opened = urllib.request.Request(f"{devtools}/json/new?{urllib.parse.quote(url, safe=':/?=&')}", method="PUT")
        urllib.request.urlopen(opened, timeout=10).read()
        for tab in blank:  # the blank page goes: one page open, as a person's tab
            urllib.request.urlopen(f"{devtools}/json/close/{tab['id']}", timeout=10).read()
        request = urllib.request.Request(f"http://{entry.address}/metrics",
                                         headers={"Authorization": f"Bearer {entry.token}"})
        next_at = time.monotonic()
        while not (directory / "stop").exists():
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    response.read()
                scrapes += 1
            except OSError:
                pass  # the job ended and its server with it
            next_at = max(next_at + 1.0, time.monotonic())  # no burst to catch up after a pause (SIGSTOP)
            while not (directory / "stop").exists() and time.monotonic() < next_at:
                time.sleep(0.1)
        chromium_cpu = tree_cpu(browser.pid) - before
        try:  # what the page fetched, from its own record, read once the job ended
            from playwright.sync_api import sync_playwright

            with sync_playwright() as playwright:
                attached = playwright.chromium.connect_over_cdp(devtools)
                page = next(p for c in attached.contexts for p in c.pages if "/dashboard" in p.url)
                requests = page.evaluate("performance.getEntriesByType('resource').length")
        except Exception:  # noqa: BLE001 - the count is a check of the run, not its result
            requests = -1
    browser.terminate()
    try:
        browser.wait(10)
    except subprocess.TimeoutExpired:
        browser.kill()
    shutil.rmtree(profile, ignore_errors=True)
    (directory / "counts.json").write_text(json.dumps({"scrapes": scrapes, "page_requests": requests,
                                                        "chromium_cpu_s": chromium_cpu}))


def watch(directory: Path) -> None:
    """The ``watched`` watcher with ``--automation``: launch Chromium under Playwright, say ``ready``;
    for the job that appears in the registry, open its dashboard page and scrape ``/metrics`` once
    a second until ``stop`` appears; write counts."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        entries = ready_then_jobs(directory)
        scrapes = [0]
        page_cost: dict[str, Any] = {}
        if entries:
            entry = entries[0]
            done = threading.Event()

            def scrape() -> None:
                request = urllib.request.Request(f"http://{entry.address}/metrics",
                                                 headers={"Authorization": f"Bearer {entry.token}"})
                next_at = time.monotonic()
                while not done.is_set():
                    try:
                        with urllib.request.urlopen(request, timeout=5) as response:
                            response.read()
                        scrapes[0] += 1
                    except OSError:
                        pass  # the job ended and its server with it
                    next_at += 1.0
                    done.wait(max(0.0, next_at - time.monotonic()))

            scraper = threading.Thread(target=scrape, daemon=True)
            scraper.start()
            meter = None
            try:
                meter = PageMeter(page.context, page)  # counts every request of the page, too
                meter.start()
                page.goto(f"http://{entry.address}/dashboard?token={entry.token}#/jobs/{entry.job_id}")
            except Exception:  # noqa: BLE001 - the job may have ended already
                pass
            while not (directory / "stop").exists():
                time.sleep(0.1)  # the page polls by itself; Playwright is not asked anything meanwhile
            done.set()
            scraper.join(5)
            try:
                if meter is not None:
                    cost = meter.stop("watched", 0)
                    page_cost = {name: value for name, value in asdict(cost).items() if name in PAGE_COST}
            except Exception:  # noqa: BLE001 - the page may have gone
                pass
        requests = 0
        try:  # what the page fetched, from its own record (nothing listened while the job ran)
            requests = page.evaluate("performance.getEntriesByType('resource').length")
        except Exception:  # noqa: BLE001 - the page may have gone
            pass
        browser.close()
    (directory / "counts.json").write_text(json.dumps({"scrapes": scrapes[0], "page_requests": requests,
                                                        **page_cost}))


def run_steady(spark: Any, rest: bool, work: Path, settle: float, window: float,
               cpu: Any = lambda: 0.0) -> tuple[int, float, float]:
    """The peers' keyed job without an end: after ``settle`` seconds of running (start-up, and a
    watcher's page loaded), the records its sources read during ``window`` seconds, from the
    :func:`slope`; then the job is cancelled. Returns (records, seconds, ``cpu()``'s growth
    over the window: the watcher's CPU while it was measured)."""
    client = keyed_job(spark, 10**12, rest, work).execute_async("dashboard-overhead")
    try:
        client.wait_until_running(120)
        time.sleep(settle)
        cpu_before = cpu()
        rate = slope(client, window)
        cpu_used = cpu() - cpu_before
    finally:
        client.cancel(timeout=120)
    return int(rate * window), window, cpu_used


def start_watcher(config: str, directory: Path, automation: bool = False) -> subprocess.Popen[bytes]:
    """A ``watched`` or ``polled`` watcher (this module in a process of its own) on ``directory``,
    created here; returns once it is ready (at most 60 s)."""
    directory.mkdir()
    how = ["--automation"] if automation else []
    watcher = subprocess.Popen([sys.executable, "-m", "benchmarks.dashboard_overhead", f"--{config}", str(directory),
                                *how], env=os.environ.copy())
    deadline = time.monotonic() + 60
    while not (directory / "ready").exists():
        if watcher.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the {config} watcher did not start")
        time.sleep(0.05)
    return watcher


def measure(records: int, rounds: int, automation: bool = False, window: float = 0.0,
            settle: float = 10.0) -> list[Run]:
    from epochal.control.spark import create_session

    work = isolated_home("epochal-dashboard-bench-")  # the watcher finds the job here (and only it)
    spark = create_session("local[2]", 2, app_name="epochal-dashboard-overhead")
    runs: list[Run] = []
    try:
        print("warm-up ...", flush=True)
        if window:
            run_steady(spark, True, work, 3.0, 3.0)
        else:
            run_job(spark, max(records // 10, 10_000), True, work)
        for round_ in range(rounds):
            for config in rotate(CONFIGS, round_):
                wait_unregistered()  # the previous run's job left the registry: the watcher finds this one
                watcher, directory = None, work
                if config != "off":
                    directory = work / f"{config}-{round_}"
                    watcher = start_watcher(config, directory, automation)
                load = os.getloadavg()[0]
                before = tree_cpu(watcher.pid) if watcher is not None else 0.0
                if window:
                    watcher_cpu = (lambda pid=watcher.pid: tree_cpu(pid)) if watcher is not None else (lambda: 0.0)
                    done, seconds, cpu_used = run_steady(spark, config != "off", work, settle, window, watcher_cpu)
                    run = Run(config, round_, done, seconds, load)
                else:
                    seconds = run_job(spark, records, config != "off", work)
                    run = Run(config, round_, records, seconds, load)
                if watcher is not None:
                    run.watcher_cpu_s = cpu_used if window else tree_cpu(watcher.pid) - before
                    (directory / "stop").touch()
                    watcher.wait(60)
                    counts = json.loads((directory / "counts.json").read_text())
                    run.scrapes, run.page_requests = counts.pop("scrapes"), counts.pop("page_requests")
                    for name, value in counts.items():  # the watched page's own cost
                        setattr(run, name, value)
                    if window:  # (counted from the page's first load: the window's is watcher_cpu_s)
                        run.chromium_cpu_s = 0.0
                runs.append(run)
                watched = (f", {run.scrapes} scrapes, {run.page_requests} page requests, watcher CPU "
                           f"{run.watcher_cpu_s:.1f} s") if watcher is not None else ""
                if run.polls:
                    watched += (f", Chromium {run.chromium_cpu_s / seconds:.3f} CPU-s/s, per poll "
                                f"{run.layouts_per_poll:.1f} layouts, script {run.script_ms_per_poll:.1f} ms, "
                                f"tasks {run.task_ms_per_poll:.1f} ms")
                print(f"[{round_}] {config:>7}: {seconds:6.2f} s, {run.records_per_s:>9,.0f} records/s "
                      f"(load {load:.1f}){watched}", flush=True)
    finally:
        spark.stop()
    return runs


def summarise(runs: list[Run]) -> dict[str, Any]:
    speed = {c: [r.records_per_s for r in runs if r.config == c] for c in CONFIGS}
    median = {c: statistics.median(v) for c, v in speed.items()}
    # each round's own ratios: the runs of a round ran back to back
    ratios = {c: [w.records_per_s / o.records_per_s for o in runs if o.config == "off"
                  for w in runs if w.config == c and w.round == o.round] for c in CONFIGS[1:]}
    return {"median": median, "min": {c: min(v) for c, v in speed.items()},
            "watcher_cpu": {c: statistics.median(r.watcher_cpu_s / r.seconds for r in runs if r.config == c)
                            for c in CONFIGS[1:]},
            "chromium_cpu": statistics.median(r.chromium_cpu_s / r.seconds for r in runs if r.config == "watched"),
            "max": {c: max(v) for c, v in speed.items()},
            "ratio": {c: median[c] / median["off"] for c in CONFIGS[1:]}, "round_ratios": ratios,
            "spread": max((max(v) - min(v)) / statistics.median(v) for v in speed.values())}


def report(summary: dict[str, Any]) -> None:
    print(f"\nthroughput, median of rounds (records/s); run-to-run spread of one configuration up to "
          f"{summary['spread']:.1%}:")
    for config in CONFIGS:
        print(f"  {config:>7}: {summary['median'][config]:>10,.0f}  (min {summary['min'][config]:,.0f}, "
              f"max {summary['max'][config]:,.0f})")
    cores = os.cpu_count() or 1
    for config in CONFIGS[1:]:
        ratio = summary["ratio"][config]
        rounds = ", ".join(f"{r:.3f}" for r in summary["round_ratios"][config])
        print(f"  {config} / off: x{ratio:.3f} ({ratio - 1:+.1%}; goal within {GOAL:.0%}: "
              f"{'met' if abs(ratio - 1) <= GOAL else 'not met'}); per round: {rounds}")
        cpu = summary["watcher_cpu"][config]
        print(f"    its watcher used {cpu:.3f} CPU-s per second of job (median) = {cpu / cores:.1%} of the machine's "
              f"{cores} cores")
        if config == "watched" and summary["chromium_cpu"]:
            print(f"    of which Chromium's own processes {summary['chromium_cpu']:.3f} CPU-s/s (median)")


def write(out: Path, runs: list[Run], summary: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_rows(out / "dashboard_overhead.csv", [{**asdict(run), "records_per_s": f"{run.records_per_s:.1f}"}
                                                for run in runs])
    plt = pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    medians, errors = error_bars((summary["median"][c], summary["min"][c], summary["max"][c]) for c in CONFIGS)
    labels = ["both off", "Chromium on the page\n+ /metrics every 1 s", "the page's requests\n+ /metrics every 1 s"]
    bars = left.bar(labels, medians, yerr=errors, capsize=6, color=[GREY, BLUE, ORANGE])
    left.bar_label(bars, labels=[f"{m:,.0f}" for m in medians], padding=3)
    left.set_ylabel("records / s (median, min-max)")
    loads = [r.load_1min for r in runs]
    what = (f"{runs[0].records:,} records" if len({r.records for r in runs}) == 1
            else f"steady state over {runs[0].seconds:.0f} s")
    left.set_title(f"peers' keyed job, {what}, {max(r.round for r in runs) + 1} rounds\n"
                   f"watched/off x{summary['ratio']['watched']:.3f}, polled/off x{summary['ratio']['polled']:.3f}; "
                   f"load {min(loads):.0f}-{max(loads):.0f} on "
                   f"{os.cpu_count()} cores")
    left.margins(y=0.15)
    rounds = sorted({r.round for r in runs})
    for config, marker in zip(CONFIGS, "os^", strict=True):
        right.plot(rounds, [next(r.records_per_s for r in runs if r.round == n and r.config == config) for n in rounds],
                   marker=marker, label=config)
    right.set_xticks(rounds)
    right.set_xlabel("round")
    right.set_ylabel("records / s")
    right.set_title("every run, in the order of rounds")
    right.legend()
    save_figure(fig, out / "dashboard_overhead.png")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard_overhead",
                                     description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=2_000_000, help="records per run (default 2,000,000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of off/watched/polled (default 5)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--window", type=float, default=0.0,
                        help="steady state: run the job without an end and measure its records per second over "
                             "this many seconds after --settle seconds (the page's first load, start-up); the "
                             "watcher's CPU is then that of the window (default 0: bounded runs of --records, "
                             "timed whole)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds before the --window starts (default 10)")
    parser.add_argument("--automation", action="store_true",
                        help="drive the watched page with Playwright and record its work per poll (Playwright's "
                             "own traffic then weighs on the job too)")
    parser.add_argument("--watched", type=Path, help=argparse.SUPPRESS)  # the watchers' own processes
    parser.add_argument("--polled", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.watched is not None:
        (watch if args.automation else watch_plain)(args.watched)
        return 0
    if args.polled is not None:
        poll(args.polled)
        return 0
    if chromium_missing():
        return 1
    print(f"epochal dashboard overhead: {args.records:,} records x {args.rounds} rounds, {os.cpu_count()} CPUs, "
          f"browser {'driven by Playwright' if args.automation else 'on its own'}; "
          f"uptime: {uptime()}", flush=True)
    runs = measure(args.records, args.rounds, args.automation, args.window, args.settle)
    summary = summarise(runs)
    write(args.out, runs, summary)
    report(summary)
    print(f"wrote {args.out / 'dashboard_overhead.csv'} and dashboard_overhead.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
