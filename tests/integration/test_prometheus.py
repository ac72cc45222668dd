"""The Prometheus endpoint of a bounded job on Spark, read after it finished (its driver's server
keeps serving ended jobs a while): the text parses with prometheus_client's parser, and its
counters are the job's ``JobResult``: records read, records into each operator, checkpoints,
restarts (a worker is crashed once, so there is one), the final status."""

from __future__ import annotations

import collections
import urllib.request
from urllib.parse import parse_qs, urlsplit

import pytest
from prometheus_client.parser import text_string_to_metric_families

from epochal.control.restart import FixedDelayRestart
from epochal.testing import Fault

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECORDS = 6_000


def scrape(dashboard_url: str) -> dict[str, list]:
    """``/metrics`` of the server of ``dashboard_url`` (its token as a bearer token), parsed."""
    parts = urlsplit(dashboard_url)
    token = parse_qs(parts.query)["token"][0]
    request = urllib.request.Request(f"{parts.scheme}://{parts.netloc}/metrics",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def total(samples: list, job_id: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.labels.get("job_id") == job_id and not s.name.endswith("_created")
               and all(s.labels.get(k) == v for k, v in labels.items()))


def test_prometheus_counters_match_the_job_result_of_a_bounded_job(make_env, tmp_path):
    env = make_env(2)
    env.enable_checkpointing(0.3, storage=str(tmp_path / "checkpoints"))
    env.set_restart_strategy(FixedDelayRestart(attempts=2, delay=0.2))
    (env.from_generator(lambda i: (f"k{i % 50}", i), count=RECORDS, rate=1500).uid("source")
     .map(lambda kv: (kv[0], kv[1] % 7)).uid("mod")
     .key_by(lambda kv: kv[0]).sum(lambda kv: kv[1]).uid("sum").discard())
    result = env.execute("scraped", timeout=240, faults=[Fault("time", worker=1, attempt=0, after=1.5)])
    client = env.last_client
    assert client is not None and len(result.restarts) == 1 and result.completed_checkpoints > 0
    found = scrape(client.dashboard_url)
    job = result.job_id

    assert total(found["epochal_job_source_records"], job) == result.records_processed == RECORDS
    assert total(found["epochal_job_source_records_expected"], job) == RECORDS
    by_name: dict[str, float] = collections.defaultdict(float)
    for sample in found["epochal_operator_records_in"]:
        if sample.labels["job_id"] == job and sample.name.endswith("_total"):
            by_name[sample.labels["operator_name"]] += sample.value
    assert dict(by_name) == {name: float(count) for name, count in result.operator_records().items()}
    assert by_name and all(count > 0 for count in by_name.values())
    assert total(found["epochal_checkpoints"], job, status="completed") == result.completed_checkpoints
    assert total(found["epochal_checkpoints"], job, status="aborted") == \
        len(result.checkpoints) - result.completed_checkpoints
    durations = [s for s in found["epochal_checkpoint_duration_seconds"] if s.labels["job_id"] == job]
    assert [s.value for s in durations if s.name.endswith("_count")] == [result.completed_checkpoints]
    assert total(found["epochal_job_restarts"], job) == len(result.restarts) == 1
    assert total(found["epochal_job_attempt"], job) == 1
    assert total(found["epochal_job_status"], job, status="finished") == 1
    assert total(found["epochal_job_status"], job) == 1
    last = max(c["checkpoint_id"] for c in result.checkpoints if c["status"] == "completed")
    assert total(found["epochal_last_checkpoint_id"], job) == last
    assert total(found["epochal_operator_state_bytes"], job, operator_uid="sum") > 0
