"""The dashboard's files and sign-in, the Prometheus endpoint and the rates of subtasks, over real
HTTP against real JobMasters without Spark (as tests/unit/test_rest_api.py): their workers are
stood in for by control connections whose heartbeats carry the metrics a worker sends."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from epochal.control.inbox import Received
from epochal.control.job_registry import HOME_ENV, Registry
from epochal.messages import Heartbeat
from epochal.rest.rates import MIN_SPAN_S, Rates, Reading
from tests.unit.served_jobs import served_jobs
from tests.unit.test_rest_api import run_workers


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    with served_jobs(tmp_path) as start:
        yield start


def request(path: str, method: str = "GET", headers: dict[str, str] | None = None,
            body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request to the registry's server, redirects not followed: status, headers, body."""
    (entry, *_) = Registry().entries()
    host, port = entry.address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def subtask(counts: dict[str, tuple[int, int]], watermark: float | None = None, busy: float | None = None,
            backpressured: bool = False) -> dict:
    return {"watermark": watermark, "backpressured": backpressured, "records_read": 0, "busy_s": busy,
            "operators": counts}


def heartbeat(jm, worker: int, metrics: dict) -> None:
    """Worker ``worker``'s heartbeat, as its control connection's reader hands it over."""
    connection = jm.machine.workers[worker].connection
    jm.events.put(Received(worker, connection, Heartbeat(metrics)))


def worker_metrics(worker: int, records: int, uptime: float, busy: float) -> dict:
    return {"pid": 1000 + worker, "uptime": uptime, "source_records": records, "rss_bytes": 5_000_000,
            "subtasks": {f"0/{worker}": subtask({"source": (records, records), "map-1": (records, records)},
                                                 busy=busy),
                         f"1/{worker}": subtask({"sum": (records, records), "sink": (records, 0)},
                                                watermark=1_700_000_000_000.0 + records, backpressured=worker == 1)}}


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_the_dashboard_needs_the_token_once_then_its_cookie(jobs):
    jobs("watched")
    (entry, *_) = Registry().entries()
    for path in ("/dashboard/", "/dashboard/dashboard.js", "/", "/metrics", "/dashboard?token=wrong",
                 "/dashboard/?token=" + entry.token[:-1]):
        status, _, body = request(path)
        assert status == 401 and b"watched" not in body and b"<html" not in body
    status, headers, _ = request(f"/dashboard?token={entry.token}")
    assert status == 303 and headers["location"] == "/dashboard/"
    cookie = headers["set-cookie"]
    port = entry.address.rsplit(":", 1)[1]
    assert cookie.startswith(f"epochal_token_{port}={entry.token};") and "HttpOnly" in cookie and \
        "SameSite=Strict" in cookie
    jar = {"Cookie": cookie.split(";")[0]}
    status, headers, page = request("/dashboard/", headers=jar)
    assert status == 200 and headers["content-type"].startswith("text/html") and b"dashboard.js" in page
    assert "script-src 'self'" in headers["content-security-policy"]
    for name in ("dashboard.js", "dashboard.css", "favicon.svg"):
        status, _, body = request(f"/dashboard/{name}", headers=jar)
        assert status == 200 and body
    assert b"http" not in request("/dashboard/dashboard.js", headers=jar)[2].replace(b"http://www.w3.org", b"")
    assert request("/dashboard/nothing.js", headers=jar)[0] == 404
    assert json.loads(request("/jobs/watched", headers=jar)[2])["name"] == "watched"
    # a cookie of another server (port), or a write the dashboard's scripts did not send: refused
    assert request("/jobs/watched", headers={"Cookie": f"epochal_token_1={entry.token}"})[0] == 401
    assert request("/jobs/watched?mode=cancel", method="PATCH", headers=jar)[0] == 401
    status, _, body = request("/jobs/watched?mode=cancel", method="PATCH", headers={**jar, "X-Epochal-Dashboard": "1"})
    assert status == 202, body


def test_prometheus_metrics_parse_and_carry_what_the_workers_and_checkpoints_report(jobs):
    job = jobs("scraped", checkpoints=True)
    ends = run_workers(job)
    for worker in (0, 1):
        heartbeat(job, worker, worker_metrics(worker, 100 * (worker + 1), uptime=5.0, busy=1.5))
    (entry, *_) = Registry().entries()
    bearer = {"Authorization": f"Bearer {entry.token}"}
    deadline = time.monotonic() + 10
    while True:
        status, headers, body = request("/metrics", headers=bearer)
        assert status == 200 and headers["content-type"].startswith("text/plain")
        found = families(body.decode())
        if found.get("epochal_operator_records_in"):
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    job_labels = {"job_id": job.job_id, "job_name": "scraped"}
    [source_records] = found["epochal_job_source_records"]
    assert source_records.value == 300 and source_records.labels == job_labels
    assert {s.labels["status"]: s.value for s in found["epochal_job_status"]}["running"] == 1
    assert sum(s.value for s in found["epochal_job_status"]) == 1
    records_in = {(s.labels["operator_uid"], s.labels["subtask"]): s.value for s in found["epochal_operator_records_in"]
                  if s.name.endswith("_total")}
    assert records_in == {("source", "0"): 100, ("map-1", "0"): 100, ("sum", "0"): 100, ("sink", "0"): 100,
                          ("source", "1"): 200, ("map-1", "1"): 200, ("sum", "1"): 200, ("sink", "1"): 200}
    sink_out = [s.value for s in found["epochal_operator_records_out"] if s.labels["operator_uid"] == "sink"]
    assert sink_out == [0, 0]
    backpressured = {s.labels["subtask"]: s.value for s in found["epochal_subtask_backpressured"]
                     if s.labels["vertex"] == "1"}
    assert backpressured == {"0": 0.0, "1": 1.0}
    assert {s.value for s in found["epochal_subtask_busy_seconds"] if s.name.endswith("_total")} == {1.5}
    lags = [s.value for s in found["epochal_subtask_watermark_lag_seconds"]]
    assert len(lags) == 2 and all(0 < lag < 10 * 365 * 86400 for lag in lags)  # millisecond watermarks of 2023
    assert [s.value for s in found["epochal_worker_rss_bytes"]] == [5_000_000, 5_000_000]
    assert [s.value for s in found["epochal_job_restarts"] if s.name.endswith("_total")] == [0]
    checkpoints = {s.labels["status"]: s.value for s in found["epochal_checkpoints"] if s.name.endswith("_total")}
    assert checkpoints == {"completed": 0, "aborted": 0}
    buckets = [s for s in found["epochal_checkpoint_duration_seconds"] if s.name.endswith("_bucket")]
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == 0
    assert request("/metrics", headers={"Authorization": "Bearer nope"})[0] == 401
    for end in ends:
        end.close()


def test_rates_come_from_the_workers_own_clock_and_start_afresh_in_a_new_process():
    rates = Rates()
    first = rates.observe("1/0", 7, Reading(10.0, 1000, 900, 2.0))
    assert first.records_in_per_s is None  # one reading: no rate yet
    assert rates.observe("1/0", 7, Reading(10.0 + MIN_SPAN_S / 2, 1100, 990, 2.1)).records_in_per_s is None
    rate = rates.observe("1/0", 7, Reading(12.0, 3000, 2900, 3.0))
    assert rate.records_in_per_s == pytest.approx(1000.0) and rate.records_out_per_s == pytest.approx(1000.0)
    assert rate.busy_ratio == pytest.approx(0.5)
    # the same heartbeat read twice changes nothing; later readings keep a window of WINDOW_S
    assert rates.observe("1/0", 7, Reading(12.0, 3000, 2900, 3.0)) == rate
    later = rates.observe("1/0", 7, Reading(20.0, 3800, 3700, 3.0))
    assert later.records_in_per_s is None  # 8 s later: no reading within the window but itself
    assert rates.observe("1/0", 7, Reading(21.0, 4300, 4200, 4.0)).records_in_per_s == pytest.approx(500.0)
    # another process (a restart): counts start again, and so does the rate
    assert rates.observe("1/0", 8, Reading(1.0, 10, 10, 0.0)).records_in_per_s is None
    assert rates.observe("1/0", 8, Reading(2.0, 110, 110, 0.9)).busy_ratio == pytest.approx(0.9)
    rates.forget(set())
    assert rates.observe("1/0", 8, Reading(3.0, 210, 210, 1.0)).records_in_per_s is None


def test_the_vertices_view_shows_rates_busy_time_and_the_plan_its_edges(jobs):
    job = jobs("rated")
    ends = run_workers(job)
    (entry, *_) = Registry().entries()
    bearer = {"Authorization": f"Bearer {entry.token}"}

    def vertices() -> list[dict]:
        return json.loads(request("/jobs/rated/vertices", headers=bearer)[2])["vertices"]

    for uptime, records in ((5.0, 100), (7.0, 2100)):
        for worker in (0, 1):
            heartbeat(job, worker, worker_metrics(worker, records, uptime=uptime, busy=uptime / 4))
        deadline = time.monotonic() + 10
        while vertices()[0]["records_in"] != 2 * records:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    source, summed = vertices()
    assert source["records_in_per_s"] == pytest.approx(2000.0) and summed["records_out_per_s"] == pytest.approx(0.0)
    assert [s["records_in_per_s"] for s in source["subtasks"]] == [pytest.approx(1000.0)] * 2
    assert source["busy_ratio_max"] == pytest.approx(0.25)
    plan = json.loads(request("/jobs/rated/plan", headers=bearer)[2])
    assert [v["id"] for v in plan["vertices"]] == [0, 1] and plan["kind"] == "dataflow"
    try:
        urllib.request.urlopen(f"http://{entry.address}/jobs/rated/plan", timeout=10)
        raise AssertionError("no token, yet an answer")
    except urllib.error.HTTPError as error:
        assert error.code == 401
    for end in ends:
        end.close()


def test_a_cec_jobs_g_checks_extent_and_replay_reach_the_job_detail_and_prometheus(jobs):
    """A CEC job's own numbers (its coordinator's ``kind_metrics``, from the workers' heartbeats)
    in ``GET /jobs/{id}`` and on ``/metrics`` under the same names, and in its kind tables."""
    from epochal.cec.coordination import CecCoordination
    from epochal.rest.outline import JobOutline, VertexOutline

    outline = JobOutline("cec", 1, (VertexOutline(0, "Source", 1), VertexOutline(1, "Window sum", 1)))
    job = jobs("cec-scraped", outline=outline, kind=CecCoordination(2))
    window = {"pid": 1001, "uptime": 2.0, "records_in": 500, "window_g_check": 17, "window_g_open": 60,
              "open_windows": 44, "extent": 120, "extent_input": 90, "window_caught_up": 0, "frames": 9}
    ends = run_workers(job, {0: {"pid": 1000, "uptime": 2.0, "source_records": 500, "replayed_frames": 3},
                             1: window})
    (entry, *_) = Registry().entries()
    bearer = {"Authorization": f"Bearer {entry.token}"}
    deadline = time.monotonic() + 10
    while True:
        detail = json.loads(request(f"/jobs/{job.job_id}", headers=bearer)[2])
        shown = {(m["name"], m["labels"]["worker"]): m["value"] for m in detail["kind_metrics"]}
        if ("epochal_cec_g_checks", "1") in shown:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert shown[("epochal_cec_g_checks", "1")] == 17 and shown[("epochal_cec_extent_tuples", "1")] == 120
    assert shown[("epochal_cec_extent_input_tuples", "1")] == 90 and shown[("epochal_cec_replayed_frames", "0")] == 3
    found = families(request("/metrics", headers=bearer)[2].decode())
    labels = {"job_id": job.job_id, "job_name": "cec-scraped", "worker": "1"}
    assert [(s.name, s.labels, s.value) for s in found["epochal_cec_g_checks"] if s.name.endswith("_total")] == \
        [("epochal_cec_g_checks_total", labels, 17)]
    assert [(s.labels, s.value) for s in found["epochal_cec_extent_tuples"]] == [(labels, 120)]
    tables = json.loads(request(f"/jobs/{job.job_id}/kind", headers=bearer)[2])["tables"]
    workers = next(t for t in tables if t["title"] == "Workers")
    assert dict(zip(workers["columns"], workers["rows"][1], strict=True))["G_checks"] == 17
    for end in ends:
        end.close()


def test_a_file_sources_progress_in_bytes_reaches_the_vertices_view(jobs):
    """A source vertex whose source counts its progress in bytes: the vertices view sums its
    subtasks' ``source_progress`` once both reported (what the page's progress bar reads)."""
    from epochal.rest.outline import EdgeOutline, JobOutline, OperatorOutline, VertexOutline

    outline = JobOutline("dataflow", 2, (
        VertexOutline(0, "Source: text", 2, (OperatorOutline("source", "Source: text"),), progress_unit="bytes"),
        VertexOutline(1, "Sink", 2, (OperatorOutline("sink", "Sink"),))), (EdgeOutline(0, 1, "hash"),))
    job = jobs("files", outline=outline)
    ends = run_workers(job)
    (entry, *_) = Registry().entries()
    bearer = {"Authorization": f"Bearer {entry.token}"}

    def source_progress() -> dict | None:
        return json.loads(request("/jobs/files/vertices", headers=bearer)[2])["vertices"][0]["source_progress"]

    def report(worker: int, done: int) -> dict:
        return {"pid": 1000 + worker, "uptime": 1.0, "subtasks": {f"0/{worker}": {
            **subtask({"source": (done, done)}), "source_progress": (done, 1000)}}}

    heartbeat(job, 0, report(0, 250))
    deadline = time.monotonic() + 10
    while json.loads(request("/jobs/files/vertices", headers=bearer)[2])["vertices"][0]["records_in"] != 250:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert source_progress() is None  # subtask 1 has not said yet
    heartbeat(job, 1, report(1, 750))
    while source_progress() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert source_progress() == {"unit": "bytes", "done": 1000, "total": 2000, "share": 0.5}
    for end in ends:
        end.close()
