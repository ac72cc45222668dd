"""The job page of a graph job and of a CEC job in a real headless Chromium (as
tests/integration/test_dashboard_browser.py), against real jobs on Spark: the supersteps table
fills in while a graph job runs and, once it ended, holds every superstep with the active vertices
and messages of ``GraphResult.history``; a CEC job's workers table shows its window worker's
G_checks, extent and replay, a window worker SIGKILLed mid-input shows up as a single-worker
recovery with the extent its rebuild read back over and the tuples replayed to it, and at the end
every number on the page is that of ``JobResult.metrics``; a source that counts its progress in
bytes fills the page's progress bar. Screenshots are saved as test artifacts (with
``EPOCHAL_SCREENSHOTS=docs`` also as docs/images/dashboard-graph.png and dashboard-cec.png)."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from epochal.control.job_registry import Registry
from epochal.graph.job import run_graph
from epochal.graph.program import VertexProgram
from epochal.testing import Fault
from tests.integration.test_dashboard_browser import ROOT, artifacts, browser  # noqa: F401 (the fixture)

sys.path.insert(0, str(Path(__file__).parent.parent / "unit"))
from test_graph_engine import random_graph  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: supersteps of the graph job, and the seconds each vertex's compute sleeps: ~60 vertices per
#: worker, ~0.5 s a superstep, so that the page, which reads once a second, sees the table fill in
STEPS = 8
NAP_S = 0.008
#: the CEC job's window operator's worker (stage 0, the source, is worker 0)
WINDOW = 1


class Hops(VertexProgram):
    """Every vertex sends 1 to its out-neighbours for ``STEPS`` supersteps and sums what it gets."""

    combiner = "sum"

    def initial_value(self, vertex_id: int, properties: dict[str, Any]) -> Any:
        return 0

    def compute(self, vertex, messages) -> None:
        time.sleep(NAP_S)
        vertex.value += sum(messages)
        if vertex.superstep < STEPS:
            vertex.send_to_out_neighbours(1)
        else:
            vertex.vote_to_halt()


def kind_rows(page, title: str) -> list[list[str]]:
    """The rows of the job page's kind table ``title``, oldest first, as the page shows them."""
    return page.evaluate("""(title) => {
        const table = document.querySelector(`#kind .kind-table[data-title="${title}"] table`);
        if (!table) return [];
        return [...table.querySelectorAll('tbody tr')].reverse().map(
            tr => [...tr.querySelectorAll('td')].map(td => td.textContent));
    }""", title)


def kind_columns(page, title: str) -> list[str]:
    return page.evaluate("""(title) => [...document.querySelectorAll(
        `#kind .kind-table[data-title="${title}"] thead th`)].map(th => th.textContent)""", title)


def shown(text: str) -> int | None:
    """A count as the page writes it ("12,345"; "–" for none)."""
    return None if text == "–" else int(text.replace(",", ""))


def dashboard_of(job_name: str, timeout: float = 120) -> str:
    """The dashboard URL of this process's served job ``job_name``, from the registry."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Registry().entries():
            if entry.name == job_name and entry.pid == os.getpid() and entry.served:
                return f"{entry.url}/dashboard?token={entry.token}#/jobs/{entry.job_id}"
        time.sleep(0.05)
    raise AssertionError(f"job {job_name!r} never registered")


def test_a_graph_jobs_supersteps_fill_in_on_its_page(browser, make_env, tmp_path):  # noqa: F811
    page = browser
    graph, _ = random_graph(n=120, m=480, seed=4)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = run_graph(graph, Hops(), parallelism=2, environment=make_env(2), timeout=120,
                                          job_name="graph-on-the-page", work_dir=str(tmp_path / "work"))
        except BaseException as error:  # handed to the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    page.goto(dashboard_of("graph-on-the-page"))
    page.wait_for_function("() => document.querySelectorAll("
                           "'#kind .kind-table[data-title=\"Supersteps\"] tbody tr').length > 0", timeout=60_000)
    first = kind_rows(page, "Supersteps")
    assert page.locator("#job-status").text_content() == "running"
    # a graph job takes no savepoints: no buttons for them; cancel stays
    assert page.locator("#btn-savepoint").is_hidden() and page.locator("#btn-stop").is_hidden()
    assert page.locator("#btn-cancel").is_visible()
    # nor the dataflow's graph picture and vertex table, which a graph job has nothing for
    assert page.locator("#graph-section").is_hidden() and page.locator("#vertices-section").is_hidden()
    thread.join(120)
    assert not thread.is_alive() and "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert result.supersteps == STEPS and len(result.history) == STEPS + 1  # 0 .. STEPS, when all halt
    page.wait_for_function("(n) => document.querySelector('#job-status').textContent === 'finished' && "
                           "document.querySelectorAll('#kind .kind-table[data-title=\"Supersteps\"] tbody tr')"
                           ".length === n", arg=len(result.history), timeout=30_000)
    rows = kind_rows(page, "Supersteps")
    assert len(first) < len(rows), "the table did not fill in while the job ran"
    assert kind_columns(page, "Supersteps")[:3] == ["superstep", "active vertices", "messages sent"]
    assert [[shown(r[0]), shown(r[1]), shown(r[2])] for r in rows] == \
        [[step["superstep"], step["active"], step["sent"]] for step in result.history]
    assert result.history[0]["active"] == graph.num_vertices and result.history[0]["sent"] > 0
    assert all(float(r[3]) > 0 for r in rows)  # seconds per superstep
    screenshot(page, "dashboard-graph.png")


def test_a_cec_jobs_g_checks_extent_and_recovery_on_its_page(browser, make_env, tmp_path):  # noqa: F811
    page = browser
    env = make_env(1)
    env.enable_cec(q_target=50, interval=0.002, period=0.02, log_dir=str(tmp_path / "logs"), commit_interval=0.2)
    env.from_generator(lambda i: (i % 300, i % 7), count=40_000, rate=8_000).key_by(lambda r: r[0]) \
        .count_window(10).sum(lambda r: r[1]).discard()
    # the window operator's worker (stage 1: worker 1) SIGKILLs itself mid-input, after 20,000 records
    client = env.execute_async("cec-on-the-page", faults=[Fault("records", worker=WINDOW, after=20_000)])
    try:
        page.goto(client.dashboard_url)  # served from the start: the page sees the whole run
        client.wait_until_running()
        # the graph picture: the stages and the edge between them; the source stage's records per
        # second (from its worker's heartbeats), while it reads
        page.wait_for_function("() => Number(document.querySelector("
                               "'#graph .vertex[data-vertex-id=\"0\"]')?.dataset.recordsOutPerS) > 0", timeout=30_000)
        assert page.locator("#graph .vertex").count() == 2 and page.locator("#graph .edge").count() == 1
        assert "/s" in (page.locator('#graph .vertex[data-vertex-id="0"] .rates').text_content() or "")
        # the window worker's G_checks show
        page.wait_for_function("""() => {
            const table = document.querySelector('#kind .kind-table[data-title="Workers"] table');
            if (!table) return false;
            const column = [...table.querySelectorAll('thead th')].findIndex(th => th.textContent === 'G_checks');
            return [...table.querySelectorAll('tbody tr')].some(tr => {
                const text = tr.querySelectorAll('td')[column].textContent;
                return text !== '–' && Number(text.replace(/,/g, '')) > 0; });
        }""", timeout=60_000)
        assert int(page.locator("#chart-cec-g-checks").get_attribute("data-points") or 0) >= 1
        assert int(page.locator("#chart-cec-extent").get_attribute("data-points") or 0) >= 1
        # a CEC job takes no savepoints: no buttons for them; cancel stays
        assert page.locator("#btn-savepoint").is_hidden() and page.locator("#btn-stop").is_hidden()
        assert page.locator("#btn-cancel").is_visible()
        result = client.result(120)
    finally:
        client.cancel(timeout=60)
    window = WINDOW
    assert result.metrics[window]["window_g_check"] > 0 and len(client.kind.history) == 1
    recovery = client.kind.history[0]
    assert recovery["worker"] == window and "resumed" in recovery
    final = result.metrics[window]
    # the page catches up with the end: the numbers of JobResult
    page.wait_for_function("() => document.querySelector('#job-status').textContent === 'finished'", timeout=30_000)
    columns = kind_columns(page, "Workers")
    want = {w: [str(w), *(format_count(m.get(key)) for key in ("records_in", "records_out", "window_g_check",
                                                                 "window_g_open", "open_windows", "extent",
                                                                 "extent_input", "window_caught_up", "frames",
                                                                 "bytes_logged", "replayed_frames"))]
            for w, m in sorted(result.metrics.items())}
    assert columns == ["worker", "records in", "records out", "G_checks", "G_opens", "open windows", "extent",
                       "extent (input)", "replayed tuples", "frames logged", "bytes logged", "frames replayed"]
    page.wait_for_function("(want) => JSON.stringify([...document.querySelectorAll("
                           "'#kind .kind-table[data-title=\"Workers\"] tbody tr')].reverse().map(tr => "
                           "[...tr.querySelectorAll('td')].map(td => td.textContent))) === JSON.stringify(want)",
                           arg=list(want.values()), timeout=30_000)
    [row] = kind_rows(page, "Single-worker recoveries")
    context = (row, recovery, final)
    assert shown(row[0]) == window, context
    assert shown(row[3]) == int(recovery["phases"]["extent"]) > 0, context  # what its rebuild read back over
    assert shown(row[4]) == int(recovery["phases"]["windows"]), context
    assert shown(row[5]) == final["window_caught_up"] > 0, context  # the tuples replayed to the replacement
    assert int(page.locator("#chart-cec-replayed").get_attribute("data-points") or 0) >= 1
    screenshot(page, "dashboard-cec.png")


def screenshot(page, name: str) -> None:
    """The whole page as a test artifact; with ``EPOCHAL_SCREENSHOTS=docs`` also as
    ``docs/images/<name>``, which docs/operating.md shows."""
    path = artifacts() / name
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("EPOCHAL_SCREENSHOTS") == "docs":
        shutil.copyfile(path, ROOT / "docs" / "images" / name)


def format_count(value: Any) -> str:
    """A count as the page writes it."""
    return "–" if value is None else f"{int(value):,}"


def test_a_file_sources_progress_in_bytes_fills_the_pages_progress_bar(browser, tmp_path, monkeypatch):  # noqa: F811
    """A served job whose source vertex counts its progress in bytes (a real JobMaster and server;
    its workers stood in for by control connections whose heartbeats report ``source_progress``,
    as in the 20-vertex test): the page's bar shows the share of the bytes, and how many of how
    many."""
    from epochal.control.job_registry import HOME_ENV
    from epochal.rest.outline import EdgeOutline, JobOutline, OperatorOutline, VertexOutline
    from tests.unit.served_jobs import served_jobs
    from tests.unit.test_rest_api import run_workers

    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    outline = JobOutline("dataflow", 2, (
        VertexOutline(0, "Source: text", 2, (OperatorOutline("source", "Source: text"),), progress_unit="bytes"),
        VertexOutline(1, "Sink", 2, (OperatorOutline("sink", "Sink"),))), (EdgeOutline(0, 1, "hash"),))
    metrics = {w: {"pid": 100 + w, "uptime": 1.0, "subtasks": {f"0/{w}": {
        "watermark": None, "backpressured": False, "busy_s": 0.1, "records_read": 10,
        "operators": {"source": (10, 10)}, "source_progress": (done, 2 << 20)}}}
        for w, done in ((0, 1 << 20), (1, 2 << 20))}  # 1 MiB and 2 MiB read of 2 MiB each
    with served_jobs(tmp_path) as start:
        job = start("files", outline=outline)
        ends = run_workers(job, metrics)
        page = browser
        try:
            page.goto(job.dashboard_url)
            page.wait_for_selector("#job-progress")
            assert page.locator("#job-progress-text").text_content() == " 75%"
            assert page.locator("#job-progress").get_attribute("title") == "3.0 MiB of 4.0 MiB"
        finally:
            for end in ends:
                end.close()
