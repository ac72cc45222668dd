"""The REST API of a job running on Spark, over real HTTP: the token, the vertices and
checkpoints it reports, a schema-driven fuzz test (schemathesis) against the live server, and the
requests a job cannot take now (a second savepoint while one is in progress, an unwritable target,
a job that is restarting) answered at once with 400/409 while the job keeps running. One job is
shared by the tests of this module (the restarting one has its own)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest

import epochal
from epochal.control.job_registry import HOME_ENV, Registry, RegistryEntry
from epochal.control.restart import FixedDelayRestart
from epochal.rest.client import RestClient, RestError
from epochal.state.storage import METADATA
from epochal.testing import Fault
from tests.integration.test_savepoints import keyed_job, wait_for_output

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@dataclass
class Live:
    client: epochal.JobClient
    entry: RegistryEntry
    api: RestClient
    tmp: object


def entry_of(job_id: str, timeout: float = 30.0) -> RegistryEntry:
    deadline = time.monotonic() + timeout
    while True:
        for entry in Registry().entries():
            if entry.job_id == job_id:
                return entry
        assert time.monotonic() < deadline, f"job {job_id} not in the registry"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def live(spark, tmp_path_factory):
    """A keyed job with an exactly-once sink, checkpointing every 0.5 s, served over REST."""
    tmp = tmp_path_factory.mktemp("rest")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(HOME_ENV, str(tmp / "home"))
        env = epochal.Environment(2, spark=spark, registration_timeout=60.0)
        env.enable_checkpointing(0.5, storage=str(tmp / "checkpoints"), savepoint_dir=str(tmp / "savepoints"))
        keyed_job(env, tmp / "out", rate=1000)
        client = env.execute_async("rest-live")
        try:
            client.wait_until_running()
            entry = entry_of(client.job_id)
            yield Live(client, entry, RestClient(entry.address, entry.token), tmp)
        finally:
            client.cancel(timeout=60)


def test_every_request_needs_the_token_and_a_refusal_reveals_nothing(live):
    bodies = set()
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": live.entry.token}):
        request = urllib.request.Request(f"{live.entry.url}/jobs/rest-live", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
        bodies.add(refused.value.read())
    assert len(bodies) == 1 and b"rest-live" not in bodies.pop()
    with pytest.raises(RestError) as wrong:
        RestClient(live.entry.address, "x" * len(live.entry.token)).get("/jobs")
    assert wrong.value.status == 401


def test_the_job_its_vertices_and_checkpoints_as_the_api_reports_them(live):
    wait_for_output(live.tmp / "out", 200)
    api = live.api
    job = api.get("/jobs/rest-live")
    assert (job["id"], job["status"], job["attempt"], job["parallelism"], job["kind"]) == (
        live.client.job_id, "running", 0, 2, "dataflow")
    assert job["checkpoint_path"] == live.client.checkpoint_path and job["savepoint_directory"].endswith("savepoints")
    deadline = time.monotonic() + 60
    while True:
        vertices = api.get(f"/jobs/{live.client.job_id}/vertices")["vertices"]
        checkpoints = api.get("/jobs/rest-live/checkpoints", history=5)
        if checkpoints["counts"]["completed"] and all(v["records_in"] > 0 for v in vertices):
            break
        assert time.monotonic() < deadline, (vertices, checkpoints)
        time.sleep(0.5)
    uids = [o["uid"] for v in vertices for o in v["operators"]]
    assert {"source", "sum", "sink"} <= set(uids)
    summed = next(v for v in vertices if "sum" in [o["uid"] for o in v["operators"]])
    assert summed["parallelism"] == 2 and len(summed["subtasks"]) == 2
    assert summed["backpressure"]["level"] in ("ok", "low", "high")
    latest = checkpoints["latest_completed"]
    assert latest["bytes"] > 0 and latest["duration_s"] > 0 and latest["alignment_s_max"] is not None
    assert len(checkpoints["history"]) <= 5 and checkpoints["summary"]["duration_s"]["max"] >= latest["duration_s"]


def test_the_schema_fuzz_finds_no_server_error_and_no_response_outside_the_schema(live):
    """Every operation of /openapi.json, with data that fits the schema and data that does not
    (schemathesis; bounded: 15 examples per operation and mode). Reads go to the live job;
    writes (savepoint, stop, cancel) to a job id that does not exist, so that fuzzed targets
    create no directory and the shared job keeps running."""
    import schemathesis
    from schemathesis import GenerationMode

    headers = {"Authorization": f"Bearer {live.entry.token}"}
    schema = schemathesis.openapi.from_url(f"{live.entry.url}/openapi.json", headers=headers)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 12
    for operation in operations:
        reads = operation.method.upper() == "GET"
        path = {"job_id": live.client.job_id if reads else "no-such-job-0"} if "{job_id}" in operation.path else None
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            # negative cases may add query parameters the API ignores, as most do: no 5xx and
            # schema-conformant answers are asked of them; bodies it must reject: test_rest_api (unit)
            excluded = [schemathesis.checks.negative_data_rejection] if mode is GenerationMode.NEGATIVE else []
            fuzz(operation.as_strategy(mode, path_parameters=path), live.entry.url, headers, excluded)
    assert live.client.status is epochal.JobStatus.RUNNING


def fuzz(cases, url: str, headers: dict[str, str], excluded: list) -> None:
    """Call and validate up to 15 of ``cases`` (hypothesis shrinks a failing one)."""
    from hypothesis import HealthCheck, given, settings

    @given(case=cases)
    @settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def conforms(case):
        case.call_and_validate(base_url=url, headers=headers, excluded_checks=excluded)

    conforms()


def test_requests_the_job_cannot_take_now_are_answered_at_once_and_the_job_goes_on(live):
    api, target = live.api, str(live.tmp / "conflicts")
    blocked = live.tmp / "a-file"
    blocked.write_text("not a directory")
    started = time.monotonic()
    with pytest.raises(RestError) as unwritable:
        api.post("/jobs/rest-live/savepoints", {"target_directory": str(blocked)})
    assert unwritable.value.status == 400 and "cannot write the savepoint" in unwritable.value.detail
    conflicts = 0
    for _ in range(5):  # the first savepoint may complete before the second arrives: try again
        first = api.post("/jobs/rest-live/savepoints", {"target_directory": target})
        try:
            api.post("/jobs/rest-live/stop", {"target_directory": target})
        except RestError as error:
            assert error.status == 409 and "in progress" in error.detail, error.detail
            conflicts += 1
        deadline = time.monotonic() + 60
        while (report := api.get(f"/jobs/rest-live/savepoints/{first['request_id']}"))["status"] == "IN_PROGRESS":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert report["status"] == "COMPLETED", report
        assert os.path.isfile(os.path.join(report["location"], METADATA))
        if conflicts:
            break
    assert conflicts == 1 and time.monotonic() - started < 60
    assert api.get("/jobs/rest-live")["status"] == "running" and not live.client.status.is_terminal
    with pytest.raises(RestError) as unknown:
        api.get("/jobs/rest-live/savepoints/not-a-request")
    assert unknown.value.status == 404


def test_a_restarting_job_refuses_a_savepoint_with_409_then_takes_one_once_back(make_env, tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    env = make_env(1)
    env.enable_checkpointing(0.5, storage=str(tmp_path / "checkpoints"))
    env.set_restart_strategy(FixedDelayRestart(attempts=2, delay=4.0))
    keyed_job(env, tmp_path / "out", rate=500)
    client = env.execute_async("rest-restarting", faults=[Fault("time", worker=0, attempt=0, after=2.0)])
    try:
        entry = entry_of(client.job_id)
        api = RestClient(entry.address, entry.token)
        deadline = time.monotonic() + 90
        while api.get("/jobs/rest-restarting")["status"] not in ("failing", "restarting"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(RestError) as refused:
            api.post("/jobs/rest-restarting/savepoints", {"target_directory": str(tmp_path / "sp")})
        assert refused.value.status == 409 and "restarting" in refused.value.detail
        assert time.monotonic() - started < 5
        client.wait_until_running(timeout=120)
        while api.get("/jobs/rest-restarting")["attempt"] != 1 or not client.checkpoint_stats():
            assert time.monotonic() < deadline + 60
            time.sleep(0.1)
        accepted = api.post("/jobs/rest-restarting/savepoints", {"target_directory": str(tmp_path / "sp")})
        while (report := api.get(f"/jobs/rest-restarting/savepoints/{accepted['request_id']}"))["status"] == \
                "IN_PROGRESS":
            time.sleep(0.1)
        assert report["status"] == "COMPLETED", report
        details = api.get("/jobs/rest-restarting")
        assert details["restarts"] == 1 and details["restart_history"][0]["attempt"] == 0
        assert json.dumps(details)  # plain JSON throughout
    finally:
        client.cancel(timeout=60)
