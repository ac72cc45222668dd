"""The REST API over real HTTP against real JobMasters, without Spark: each job's workers are
stood in for by control connections (socket pairs) whose messages are put in the JobMaster's
inbox as its server's readers would, so its machine, its savepoint requests and the views read
from it are the real ones; only no Spark job runs (the submit callback does nothing, cancelling
reports the Spark job ended)."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request

import pytest

from epochal.config import EngineConfig
from epochal.control.inbox import Received
from epochal.control.job_registry import HOME_ENV, Registry
from epochal.control.jobmaster import JobMaster, JobStatus
from epochal.messages import Heartbeat, Ready, Register
from epochal.rest import server as rest_server
from epochal.rest.client import RestClient, RestError
from tests.unit.served_jobs import OUTLINE, served_jobs


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    """``jobs(name, checkpoints=False)`` starts a served job of 2 workers that are not there yet."""
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    with served_jobs(tmp_path) as start:
        yield start


def client() -> RestClient:
    (entry, *_) = Registry().entries()
    return RestClient(entry.address, entry.token)


def run_workers(jm: JobMaster, metrics: dict[int, dict] | None = None) -> list[socket.socket]:
    """Register and ready both workers (their messages put in the inbox as the server's readers
    put them), then send each worker's heartbeat ``metrics``."""
    ends = []
    for worker in (0, 1):
        ours, theirs = socket.socketpair()
        ends += [ours, theirs]
        connection = jm.server.add(ours)
        jm.events.put(Received(worker, connection, Register(worker, 0, 0, os.getpid(), "127.0.0.1", 6000, "h")))
        jm.events.put(Received(worker, connection, Ready(worker)))
        jm.events.put(Received(worker, connection, Heartbeat((metrics or {}).get(worker, {}))))
    deadline = time.monotonic() + 10
    while not (jm.status is JobStatus.RUNNING and jm.all_running()):
        assert time.monotonic() < deadline, jm.status
        time.sleep(0.02)
    return ends


def raw(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_every_request_needs_the_token_and_a_refusal_reveals_nothing(jobs):
    job = jobs("secret-job")
    entry = Registry().entries()[0]
    answers = set()
    for path in ("/jobs", f"/jobs/{job.job_id}", "/openapi.json", "/no/such/path", "/jobs/secret-job/vertices"):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {entry.token}"},
                        {"Authorization": f"Bearer {entry.token}x"}, {"Authorization": entry.token}):
            status, body = raw(f"http://{entry.address}{path}", headers)
            assert status == 401
            answers.add(body)
    assert len(answers) == 1 and b"secret-job" not in answers.pop()
    status, body = raw(f"http://{entry.address}/jobs", {"Authorization": f"bearer {entry.token}"})
    assert status == 200 and json.loads(body)["jobs"][0]["id"] == job.job_id
    request = urllib.request.Request(f"http://{entry.address}/jobs", headers={"Authorization": f"Bearer {entry.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:  # the time spent in the server, in ms
        assert float(response.headers["server-timing"].split("app;dur=")[1]) >= 0


def test_a_job_is_registered_served_by_id_name_or_prefix_and_unregistered_when_it_ends(jobs):
    job = jobs("counts")
    (entry,) = Registry().entries()
    assert (entry.job_id, entry.name, entry.kind, entry.pid) == (job.job_id, "counts", "dataflow", os.getpid())
    api = client()
    for reference in (job.job_id, "counts", job.job_id[:5]):
        details = api.get(f"/jobs/{reference}")
        assert (details["id"], details["name"], details["status"], details["workers"]) == (
            job.job_id, "counts", "deploying", 2)
    assert api.get("/jobs") == {"jobs": [{"id": job.job_id, "status": "deploying"}]}
    with pytest.raises(RestError) as missing:
        api.get("/jobs/nothing-like-it")
    assert missing.value.status == 404 and "no job with id or name 'nothing-like-it'" in missing.value.detail
    assert api.patch(f"/jobs/{job.job_id}", mode="cancel")["id"] == job.job_id
    assert job.done.wait(10) and job.status is JobStatus.CANCELLED
    deadline = time.monotonic() + 10
    while Registry().entries() or rest_server.running_servers():  # the last job ended: all goes
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(RestError) as gone:
        api.get("/jobs")
    assert gone.value.unreachable


def test_two_jobs_of_one_process_share_a_server_and_a_shared_name_is_ambiguous(jobs):
    first, second = jobs("twin"), jobs("twin")
    entries = Registry().entries()
    assert len(entries) == 2 and entries[0].address == entries[1].address
    api = client()
    with pytest.raises(RestError) as ambiguous:
        api.get("/jobs/twin")
    assert ambiguous.value.status == 409
    assert sorted(ambiguous.value.candidates) == sorted(f"{j.job_id} (twin, running)" for j in (first, second))
    assert api.get(f"/jobs/{second.job_id}")["id"] == second.job_id
    first.cancel()
    assert first.done.wait(10)
    assert api.get("/jobs/twin")["id"] == second.job_id  # the one still running
    assert {j["id"]: j["status"] for j in api.get("/jobs/overview")["jobs"]} == {
        first.job_id: "cancelled", second.job_id: "deploying"}


def test_savepoint_requests_a_job_cannot_take_are_answered_at_once(jobs, tmp_path):
    job = jobs("not-running")
    api = client()
    started = time.monotonic()
    with pytest.raises(RestError) as conflict:
        api.post("/jobs/not-running/savepoints", {"target_directory": str(tmp_path / "sp")})
    assert conflict.value.status == 409 and "is deploying" in conflict.value.detail
    blocked = tmp_path / "a-file"
    blocked.write_text("x")
    with pytest.raises(RestError) as unwritable:
        api.post("/jobs/not-running/stop", {"target_directory": str(blocked)})
    assert unwritable.value.status == 400 and "cannot write the savepoint" in unwritable.value.detail
    with pytest.raises(RestError) as no_default:
        api.post("/jobs/not-running/savepoints", {})
    assert no_default.value.status == 400 and "no default savepoint directory" in no_default.value.detail
    for body in ({"format": "weird"}, {"target_directory": 5}, {"drain": True}):
        with pytest.raises(RestError) as malformed:
            api.post("/jobs/not-running/savepoints", body)
        assert malformed.value.status == 422
    with pytest.raises(RestError) as unknown:
        api.get("/jobs/not-running/savepoints/feedface")
    assert unknown.value.status == 404
    assert time.monotonic() - started < 5 and job.status is JobStatus.DEPLOYING


def test_a_second_savepoint_while_one_is_in_progress_is_refused_and_the_first_is_polled(jobs, tmp_path):
    job = jobs("saving", checkpoints=True)
    ends = run_workers(job)
    api = client()
    accepted = api.post("/jobs/saving/savepoints", {"target_directory": str(tmp_path / "sp")})
    assert accepted["location"].startswith(str(tmp_path / "sp" / "savepoint-"))
    with pytest.raises(RestError) as conflict:
        api.post("/jobs/saving/savepoints", {"target_directory": str(tmp_path / "sp")})
    assert conflict.value.status == 409 and "in progress" in conflict.value.detail
    report = api.get(f"/jobs/saving/savepoints/{accepted['request_id']}")
    assert (report["status"], report["location"], report["stop"]) == ("IN_PROGRESS", accepted["location"], False)
    assert job.status is JobStatus.RUNNING  # the refusal changed nothing
    api.patch("/jobs/saving", mode="cancel")
    assert job.done.wait(10)
    report = api.get(f"/jobs/saving/savepoints/{accepted['request_id']}")  # read: the server need not linger
    assert report["status"] == "FAILED" and "the job ended (cancelled)" in report["error"]
    for end in ends:
        end.close()


def test_vertices_show_what_the_workers_report(jobs):
    def subtask(watermark, backpressured, counts):
        return {"watermark": watermark, "backpressured": backpressured, "records_read": 0, "operators": counts}

    metrics = {w: {"source_records": 100 * (w + 1), "subtasks": {
        f"0/{w}": subtask(None, w == 1, {"source": (100 * (w + 1), 100 * (w + 1)), "map-1": (100 * (w + 1), 90)}),
        f"1/{w}": subtask(float(10 + w), False, {"sum": (80, 80), "sink": (80, 0)})}} for w in (0, 1)}
    job = jobs("watched")
    ends = run_workers(job, metrics)
    deadline = time.monotonic() + 10
    api = client()
    while not (vertices := api.get("/jobs/watched/vertices")["vertices"])[0]["subtasks"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    source, summed = vertices
    assert (source["records_in"], source["records_out"], source["watermark"]) == (300, 180, None)
    assert source["backpressure"] == {"level": "low", "ratio": 0.5}
    assert [(o["uid"], o["records_in"], o["records_out"]) for o in source["operators"]] == [
        ("source", 300, 300), ("map-1", 300, 180)]
    assert (summed["records_in"], summed["records_out"], summed["watermark"]) == (160, 0, 10.0)
    assert summed["backpressure"]["level"] == "ok"
    assert [(s["index"], s["worker"], s["watermark"]) for s in summed["subtasks"]] == [(0, 0, 10.0), (1, 1, 11.0)]
    assert api.get("/jobs/watched")["records_read"] == 300
    checkpoints = api.get("/jobs/watched/checkpoints")
    assert checkpoints["counts"] == {"total": 0, "completed": 0, "failed": 0, "savepoints": 0}
    for end in ends:
        end.close()


def test_a_stage_without_operators_reports_its_own_records_and_its_kind_takes_no_savepoints(jobs):
    """A CEC job's vertex (a stage) names no operators: its subtasks' ``records`` are its counts
    (their rates are taken as a dataflow subtask's), and backpressure, which a stage does not sample, is
    unknown; the job's kind refuses savepoints, which its details say."""
    from epochal.cec.coordination import CecCoordination
    from epochal.rest.outline import EdgeOutline, JobOutline, VertexOutline

    outline = JobOutline("cec", 2, (VertexOutline(0, "source", 1), VertexOutline(1, "window", 1)),
                         (EdgeOutline(0, 1, "hash"),))
    job = jobs("staged", outline=outline, kind=CecCoordination(2))
    ends = run_workers(job, {w: {"pid": 10 + w, "uptime": 1.0, "subtasks": {f"{w}/0": {"records": (50 * w, 40 + w)}}}
                             for w in (0, 1)})
    api = client()
    deadline = time.monotonic() + 10
    while not (vertices := api.get("/jobs/staged/vertices")["vertices"])[1]["subtasks"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    source, window = vertices
    assert (source["records_in"], source["records_out"], window["records_in"], window["records_out"]) == (0, 40, 50, 41)
    assert source["backpressure"] == window["backpressure"] == {"level": "unknown", "ratio": None}
    assert window["subtasks"][0]["worker"] == 1
    details = api.get("/jobs/staged")
    assert details["takes_savepoints"] is False and details["kind"] == "cec"
    for end in ends:
        end.close()


def test_the_openapi_description_names_every_endpoint(jobs):
    jobs("described")
    paths = client().get("/openapi.json")["paths"]
    assert {(path, method) for path, item in paths.items() for method in item} == {
        ("/jobs", "get"), ("/jobs/overview", "get"), ("/jobs/{job_id}", "get"), ("/jobs/{job_id}", "patch"),
        ("/jobs/{job_id}/plan", "get"), ("/jobs/{job_id}/kind", "get"), ("/jobs/{job_id}/vertices", "get"),
        ("/jobs/{job_id}/checkpoints", "get"),
        ("/jobs/{job_id}/savepoints", "post"), ("/jobs/{job_id}/savepoints/{request_id}", "get"),
        ("/jobs/{job_id}/stop", "post"), ("/jobs/{job_id}/queryable", "get")}


def test_a_port_in_use_fails_before_the_job_starts(jobs, tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    started = []
    config = EngineConfig(rest_port=taken.getsockname()[1])
    from epochal.errors import EnvironmentSetupError

    with pytest.raises(EnvironmentSetupError, match="cannot listen on 127.0.0.1:.*rest_port"):
        rest_server.serve(config, OUTLINE, lambda: started.append(1))  # type: ignore[arg-type,return-value]
    assert not started
    taken.close()


def test_rest_settings_come_from_the_environment_unless_given(monkeypatch):
    monkeypatch.setenv("EPOCHAL_REST", "off")
    monkeypatch.setenv("EPOCHAL_REST_PORT", "8089")
    monkeypatch.setenv("EPOCHAL_REST_HOST", "0.0.0.0")
    assert (EngineConfig().rest_enabled, EngineConfig().rest_port, EngineConfig().rest_host) == (False, 8089, "0.0.0.0")
    assert EngineConfig(rest_port=0, rest_enabled=True).rest_port == 0
    monkeypatch.setenv("EPOCHAL_REST_PORT", "eighty")
    from epochal.errors import PlanError

    with pytest.raises(PlanError, match="EPOCHAL_REST_PORT='eighty' is not an integer"):
        EngineConfig()


def test_queryable_routes_name_each_state_s_workers_and_the_query_token(jobs):
    job = jobs("routed")
    api = client()
    routes = api.get("/jobs/routed/queryable")
    assert routes["serving"] is False and routes["states"] == {} and routes["max_parallelism"] is None
    assert routes["token"] == job.query_token.hex() and bytes.fromhex(routes["token"]) != b"\0" * 32
    queryable = {0: {"port": 7000, "max_parallelism": 128, "states": {"counts": [0, 2]}},
                 1: {"port": 7001, "max_parallelism": 128, "states": {"counts": [1, 2]}}}
    ends = run_workers(job, {w: {"queryable": q} for w, q in queryable.items()})
    deadline = time.monotonic() + 10
    while not (routes := api.get("/jobs/routed/queryable"))["serving"]:
        assert time.monotonic() < deadline, routes
        time.sleep(0.02)
    assert routes["attempt"] == 0 and routes["max_parallelism"] == 128
    assert routes["states"] == {"counts": {"parallelism": 2,
                                           "workers": {"0": "127.0.0.1:7000", "1": "127.0.0.1:7001"}}}
    for end in ends:
        end.close()
