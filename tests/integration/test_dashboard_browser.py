"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright; no
browser is downloaded), against a keyed job with an exactly-once sink running on Spark: without
the token there is no page; with the URL the driver gives, the job page shows every vertex of the
graph, records and checkpoints that grow between two reads (shown by the same elements: the
page updates in place), a worker killed with SIGKILL as a
restart with its cause, and a savepoint taken with its button (its path appears, and it is a
savepoint on disk); cancelling through the page ends the job.

A screenshot of the job page is saved as a test artifact under ``test-artifacts/`` (the
directory ``EPOCHAL_TEST_ARTIFACTS`` names, if set); with ``EPOCHAL_SCREENSHOTS=docs`` it is also
written to ``docs/images/dashboard.png``, the README's picture.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import time
from urllib.parse import urlsplit

import pytest

from epochal.control.restart import FixedDelayRestart
from epochal.state.storage import METADATA
from tests.integration.test_savepoints import keyed_job, wait_for_output

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
#: How the browser is started: headless, no sandbox (CI runs as root), nothing fetched from the network.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ROOT = pathlib.Path(__file__).resolve().parents[2]


def artifacts() -> pathlib.Path:
    directory = pathlib.Path(os.environ.get("EPOCHAL_TEST_ARTIFACTS") or ROOT / "test-artifacts")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture
def browser(tmp_path):
    """A page of a fresh headless Chromium (its own user data directory)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: 'make test' installs it (apt-get install chromium chromium-driver); "
                    "the installation failed on this machine")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": 1400, "height": 1000})
        # the page's refresh choice (3 s by default): 1 s, so the tests see numbers change sooner
        context.add_init_script("localStorage.setItem('epochal.refresh_ms', '1000')")
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()


def read(page) -> dict[str, float]:
    """What the job page shows now: records into the graph's vertices, completed checkpoints,
    the source's records per second."""
    return page.evaluate("""() => {
        const vertices = [...document.querySelectorAll('#graph .vertex')];
        return {records: vertices.reduce((sum, v) => sum + Number(v.dataset.recordsIn), 0),
                rate: Math.max(0, ...vertices.map(v => Number(v.dataset.recordsOutPerS || 0))),
                checkpoints: Number(document.querySelector('#checkpoint-completed').textContent)};
    }""")


#: Marks elements of the job page (a property of the element object, which only that object has)
MARK = """() => {
    document.querySelector('#graph .vertex').epochalMark = true;
    document.querySelector('#vertices tbody tr').epochalMark = true;
    document.querySelector('#chart-duration').epochalMark = true;
    document.querySelector('#checkpoint-history tbody tr:last-child').epochalMark = true;
}"""
#: Whether the elements marked are still those on the page
MARKED = """() => ({vertex: Boolean(document.querySelector('#graph .vertex').epochalMark),
    row: Boolean(document.querySelector('#vertices tbody tr').epochalMark),
    chart: Boolean(document.querySelector('#chart-duration').epochalMark),
    checkpoint: [...document.querySelectorAll('#checkpoint-history tbody tr')].some(tr => tr.epochalMark)})"""


def test_the_dashboard_shows_a_running_job_and_steers_it(browser, make_env, tmp_path):
    page = browser
    env = make_env(2)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"), savepoint_dir=str(tmp_path / "savepoints"))
    env.set_restart_strategy(FixedDelayRestart(attempts=3, delay=0.5))
    keyed_job(env, tmp_path / "out", rate=1000)
    client = env.execute_async("dashboard-job")
    try:
        client.wait_until_running()
        url = client.dashboard_url
        assert url and "token=" in url
        base = "{0.scheme}://{0.netloc}".format(urlsplit(url))

        # no token: no page (the same 401 as the API's), whatever the path
        for path in ("/dashboard/", "/dashboard/dashboard.js", f"/dashboard?token=not-{client.job_id}"):
            response = page.goto(base + path)
            assert response is not None and response.status == 401
            assert "Job graph" not in page.content() and "dashboard-job" not in page.content()

        # the URL the driver gives: the token once, then the cookie; the token leaves the address bar
        started = time.monotonic()
        page.goto(url)
        page.wait_for_selector("#graph .vertex")
        assert "token=" not in page.url and page.url.endswith(f"/dashboard/#/jobs/{client.job_id}")
        assert time.monotonic() - started < 5
        # the refresh: as chosen (the fixture's 1 s), 3 s when nothing or something unknown is chosen
        assert page.locator("#refresh").input_value() == "1000"
        assert page.evaluate("() => { localStorage.setItem('epochal.refresh_ms', '7'); return refreshMs(); }") == 3000
        assert page.evaluate("() => { localStorage.removeItem('epochal.refresh_ms'); return refreshMs(); }") == 3000
        page.evaluate("() => localStorage.setItem('epochal.refresh_ms', '1000')")
        plan = env.plan()
        shown = page.eval_on_selector_all("#graph .vertex", "vs => vs.map(v => Number(v.dataset.vertexId))")
        assert sorted(shown) == sorted(v.id for v in plan.vertices)
        for vertex in plan.vertices:
            assert page.locator(f'#graph .vertex[data-vertex-id="{vertex.id}"] .parallelism').text_content() == \
                f"×{vertex.parallelism}"
        assert page.locator("#graph .edge").count() == len(plan.edges)

        # records and checkpoints grow between two reads; records per second are shown
        wait_for_output(tmp_path / "out", 100)
        page.wait_for_function("() => Number(document.querySelector('#checkpoint-completed').textContent) > 0")
        first = read(page)
        page.evaluate(MARK)
        time.sleep(3.0)
        page.wait_for_function("() => [...document.querySelectorAll('#graph .vertex')].some("
                               "v => Number(v.dataset.recordsOutPerS) > 0)")
        second = read(page)
        assert second["records"] > first["records"] and second["checkpoints"] > first["checkpoints"], (first, second)
        assert second["rate"] > 0
        assert int(page.locator("#chart-duration").get_attribute("data-points") or 0) > 0
        # the polls in between updated the page in place: the same elements show the new numbers
        assert page.evaluate(MARKED) == {"vertex": True, "row": True, "chart": True, "checkpoint": True}
        assert page.locator("#btn-savepoint").is_visible() and page.locator("#btn-stop").is_visible()

        # a worker killed: a restart with its cause
        pid = client.workers()[0]["pid"]
        os.kill(pid, signal.SIGKILL)
        restart = page.locator('#restarts .restart[data-attempt="0"]')
        restart.wait_for(timeout=60_000)
        cause = restart.locator(".cause").text_content() or ""
        assert "worker" in cause and "lost" in cause, cause
        page.wait_for_function("() => document.querySelector('#job-attempt').textContent === '1' && "
                               "document.querySelector('#job-status').textContent === 'running'", timeout=90_000)

        # the savepoint button (confirmation asked) takes a savepoint; its path appears
        page.click("#btn-savepoint")
        assert page.locator("#confirm").is_visible()
        page.click("#confirm-ok")
        done = page.locator("#savepoints li.savepoint.completed .savepoint-path").first
        done.wait_for(timeout=60_000)
        path = done.inner_text()
        assert path.startswith(str(tmp_path / "savepoints")) and os.path.isfile(os.path.join(path, METADATA))
        assert any(c.get("savepoint") == path for c in client.checkpoint_stats())

        # the restarted attempt's rates are measured again (its workers are new processes)
        page.wait_for_function("() => [...document.querySelectorAll('#graph .vertex')].every("
                               "v => Number(v.dataset.recordsInPerS) > 0)", timeout=30_000)
        screenshot = artifacts() / "dashboard.png"
        page.screenshot(path=str(screenshot), full_page=True)
        if os.environ.get("EPOCHAL_SCREENSHOTS") == "docs":
            shutil.copyfile(screenshot, ROOT / "docs" / "images" / "dashboard.png")

        # cancel, confirmed on the page: the job ends as cancelled
        page.click("#btn-cancel")
        page.click("#confirm-ok")
        page.wait_for_function("() => document.querySelector('#job-status').textContent === 'cancelled'",
                               timeout=60_000)
        assert client.status.value == "cancelled"
    finally:
        client.cancel(timeout=60)


def test_the_job_page_of_a_job_of_20_vertices_loads_within_a_second(browser, tmp_path, monkeypatch):
    """A served job of 20 vertices (real JobMaster and server, its workers stood in for by control
    connections whose heartbeats report every subtask, as tests/unit/test_rest_api.py does): the
    page, opened with the token, has drawn all 20 vertices with their numbers within 1 s of the
    navigation (the fastest of three loads: this machine is shared); the job list shows the job,
    its row kept while its duration goes on."""
    from epochal.control.job_registry import HOME_ENV
    from epochal.rest.outline import EdgeOutline, JobOutline, OperatorOutline, VertexOutline
    from tests.unit.served_jobs import served_jobs
    from tests.unit.test_rest_api import run_workers

    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    vertices = tuple(VertexOutline(v, f"Vertex {v}", 2, (OperatorOutline(f"op-{v}", f"Map {v}"),
                                                         OperatorOutline(f"op-{v}b", f"Filter {v}")))
                     for v in range(20))
    edges = tuple(EdgeOutline(v, v + 1 + (v % 3 == 0), "hash") for v in range(18)) + (EdgeOutline(18, 19, "forward"),)
    outline = JobOutline("dataflow", 2, vertices, edges)
    metrics = {w: {"pid": 100 + w, "uptime": 1.0, "source_records": 10, "subtasks": {
        f"{v}/{w}": {"watermark": 1000.0 + v, "backpressured": v % 5 == 0, "busy_s": 0.5, "records_read": 0,
                     "operators": {f"op-{v}": (10 * v, 10 * v), f"op-{v}b": (10 * v, 5 * v)}} for v in range(20)}}
        for w in (0, 1)}
    with served_jobs(tmp_path) as start:
        job = start("twenty", outline=outline)
        ends = run_workers(job, metrics)
        page = browser
        try:
            took = []
            for _ in range(3):
                page.goto("about:blank")
                page.goto(job.dashboard_url)
                page.wait_for_function("() => document.querySelectorAll('#graph .vertex').length === 20 && "
                                       "document.querySelector('#vertices tbody tr') !== null")
                took.append(page.evaluate("performance.now() / 1000"))
            print(f"the job page of 20 vertices drawn {[round(t, 3) for t in took]} s after the navigation")
            assert min(took) < 1.0, took
            assert page.locator("#graph .edge").count() == len(edges)
            assert page.locator('#graph .vertex[data-vertex-id="5"]').get_attribute("class") == "vertex high"
            page.screenshot(path=str(artifacts() / "dashboard-20-vertices.png"), full_page=True)
            # the job list: a row per job, kept across polls while its duration goes on
            page.evaluate("location.hash = '#/'")
            row = page.locator(f'#jobs tr.job-row[data-job-id="{job.job_id}"]')
            row.wait_for()
            assert row.locator("a").text_content() == "twenty" and row.locator(".status").text_content() == "running"
            the_row = "document.querySelector(`#jobs tr[data-job-id='${id}']`)"
            page.evaluate(f"(id) => {{ const row = {the_row}; row.epochalMark = row.cells[7].textContent; }}",
                          job.job_id)
            page.wait_for_function(f"(id) => {{ const row = {the_row}; return row.epochalMark !== undefined "
                                   "&& row.epochalMark !== row.cells[7].textContent; }", arg=job.job_id, timeout=10_000)
        finally:
            for end in ends:
                end.close()
