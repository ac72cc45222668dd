"""A user's mistake ends in one readable error that names the code at fault, with only the
user's frames; field-form aggregations; counters that count each record once (issue 10)."""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import subprocess
import sys
import traceback

import pytest

import epochal

#: Paths of epochal's own modules in a traceback: none may reach the user.
INTERNAL_FRAME = re.compile(r'File "[^"]*/epochal/(runtime|control|plan|state|connectors)/')


def failure_of(env, name: str) -> epochal.JobFailedError:
    with pytest.raises(epochal.JobFailedError) as info:
        env.execute(name, timeout=120)
    return info.value


def assert_user_facing(error: BaseException) -> str:
    """The message and the driver-side traceback hold no frame of epochal's internals."""
    message = str(error)
    assert not INTERNAL_FRAME.search(message), message
    shown = "".join(traceback.format_exception(error))
    assert not INTERNAL_FRAME.search(shown), shown
    assert "py4j" not in shown.lower() and "org.apache" not in shown
    return message.splitlines()[0]


def record_id(record):
    return record["id"]


@pytest.mark.parametrize("parallelism", [1, 2])
def test_failing_key_selector_names_the_key_by(make_env, parallelism):
    env = make_env(parallelism)
    records = [{"id": i % 3} for i in range(50)] + [{"name": "no id"}]
    env.from_collection(records).key_by(record_id).count().name("per-id").collect()
    error = failure_of(env, "key-error")
    first = assert_user_facing(error)
    assert re.fullmatch(r"job 'key-error' failed: the key selector of key_by \(into 'per-id'\) \(worker \d\) "
                        r"raised KeyError: 'id' on record \{'name': 'no id'\}", first), first
    message = str(error)
    assert "record_id" in message and "test_user_errors.py" in message  # the user's frame is shown
    assert error.operator == "per-id" and error.category == "user"


@pytest.mark.parametrize("parallelism", [1, 2])
def test_unhashable_key_says_keys_must_be_hashable(make_env, parallelism):
    env = make_env(parallelism)
    env.from_collection([(1, 2), (3, 4)]).key_by(lambda pair: [pair[0]]).count().collect()
    first = assert_user_facing(failure_of(env, "unhashable"))
    assert "the key selector of key_by (into 'Count')" in first
    assert "is a list, which is unhashable" in first and "return a tuple" in first


def test_failing_custom_partitioner_names_the_edge(make_env):
    env = make_env(2)
    env.from_sequence(0, 100).map(lambda i: i).name("numbers") \
        .partition_custom(lambda key, n: 1 // (key - 42) % n).map(str).name("text").collect()
    first = assert_user_facing(failure_of(env, "partitioner"))
    assert "the custom partitioner of the edge 'numbers' -> 'text'" in first
    assert "ZeroDivisionError" in first


def test_failing_timestamp_extractor_names_its_operator(make_env):
    env = make_env(2)
    env.from_collection([{"t": 1}, {"t": 2}, {}]).with_watermarks(lambda r: r["t"]).name("stamps").collect()
    first = assert_user_facing(failure_of(env, "timestamps"))
    assert "operator 'stamps'" in first and "KeyError: 't'" in first


def test_unpicklable_record_names_operator_and_edge(make_env):
    env = make_env(2)
    env.from_sequence(0, 100).map(lambda i: (x for x in range(i))).name("lazy").rebalance() \
        .map(lambda g: sum(g)).name("total").collect()
    error = failure_of(env, "unpicklable")
    first = assert_user_facing(error)
    assert "operator 'lazy'" in first
    assert "records sent to another worker must be picklable" in first
    assert "the edge 'lazy' -> 'total'" in first and "generator" in first
    assert error.operator == "lazy"


# ------------------------------------------------------------------------- field aggregations
@dataclasses.dataclass
class Sale:
    shop: str
    v: int


def last_per_key(records, key):
    last = {}
    for record in records:
        last[key(record)] = record
    return last


def test_sum_min_max_by_field_name_index_and_attribute(make_env):
    env = make_env(2)
    rows = [{"k": f"k{i % 3}", "v": i} for i in range(30)]
    by_name = env.from_collection(rows).key_by(lambda r: r["k"]).sum("v").collect()
    tuples = env.from_collection([(r["k"], r["v"]) for r in rows]).key_by(lambda t: t[0]).max(1).collect()
    objects = env.from_collection([Sale(r["k"], r["v"]) for r in rows]).key_by(lambda s: s.shop).min("v").collect()
    lowest = env.from_collection(rows).key_by(lambda r: r["k"]).min_by("v").collect()
    env.execute("fields", timeout=120)
    sums = collections.defaultdict(int)
    for r in rows:
        sums[r["k"]] += r["v"]
    assert {k: r["v"] for k, r in last_per_key(by_name.get(), lambda r: r["k"]).items()} == sums
    assert all(set(r) == {"k", "v"} for r in by_name.get())  # the record's shape is kept, as in Flink
    assert last_per_key(tuples.get(), lambda t: t[0]) == {f"k{j}": (f"k{j}", 27 + j) for j in range(3)}
    assert {k: s.v for k, s in last_per_key(objects.get(), lambda s: s.shop).items()} == {"k0": 0, "k1": 1, "k2": 2}
    assert {k: r["v"] for k, r in last_per_key(lowest.get(), lambda r: r["k"]).items()} == {"k0": 0, "k1": 1, "k2": 2}


def test_missing_field_fails_naming_the_field(make_env):
    env = make_env(1)
    env.from_collection([{"v": 1}, {"w": 2}]).key_by(lambda r: 0).sum("v").name("total").collect()
    first = assert_user_facing(failure_of(env, "missing-field"))
    assert "operator 'total'" in first and "has no field 'v'" in first


# ------------------------------------------------------------------------- counters
def test_records_processed_counts_each_source_record_once(make_env):
    env = make_env(2)
    (env.from_generator(lambda i: i, count=20_000).map(lambda i: i).disable_chaining()
     .filter(lambda i: True).key_by(lambda i: i % 7).count().discard())
    result = env.execute("counting", timeout=120)
    assert result.records_processed == 20_000  # not once per chain (there are three)


def late_event(i: int) -> tuple[int, str]:
    """Event times 0..99 in order, then three of window [0, 10), long after it fired."""
    return (i, "k") if i < 100 else (i - 99, "k")


def test_late_records_dropped_are_counted(make_env):
    env = make_env(1)
    out = (env.from_generator(late_event, count=103, rate=100).with_watermarks(lambda e: e[0])
           .key_by(lambda e: e[1]).window(10, timestamp=lambda e: e[0]).count().collect())
    result = env.execute("late", timeout=120)
    windows = {(key, start): n for key, start, n in out.get()}
    assert windows[("k", 0)] == 10
    assert result.late_records_dropped == 3


# ------------------------------------------------------------------------- the demo
@pytest.mark.slow
def test_demo_is_exact_and_leaves_no_temp_folder(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "examples/wordcount.py"], env=env, capture_output=True, text=True,
                         timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "equals the oracle exactly" in run.stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("epochal-demo-")] == []

