"""A user exception's message names the record it raised on, cut to a readable length, in
every operator that runs a user function per record (the local runner composes the real
operators; on Spark the same text travels in the worker's report, checked here too)."""

from __future__ import annotations

import pytest

import epochal
from epochal import JobFailedError, ProcessFunction
from epochal.control.job_failures import failure_error
from epochal.errors import RECORD_TEXT_LIMIT, UserFunctionError, note_record, record_text
from epochal.plan.partitioners import CustomPartitioner, KeyGroupPartitioner
from epochal.runtime.host.reports import failure_report
from epochal.testing import run_locally


def bad(value):
    """Raises on the record whose value is 7."""
    number = value if isinstance(value, int) else value[1]
    if number == 7:
        raise ValueError("seven is not allowed")
    return value


class Explode(ProcessFunction):
    def process_element(self, value, ctx):
        yield bad(value)


JOBS = {
    "map": lambda s: s.map(bad),
    "filter": lambda s: s.filter(bad),
    "flat_map": lambda s: s.flat_map(lambda v: [bad(v)]),
    "key selector": lambda s: s.key_by(bad).count(),
    "keyed reduce": lambda s: s.key_by(lambda v: v[0]).reduce(lambda a, b: bad(b)),
    "keyed sum of a function": lambda s: s.key_by(lambda v: v[0]).sum(lambda v: bad(v)[1]),
    "process": lambda s: s.process(Explode()),
    "keyed process": lambda s: s.key_by(lambda v: v[0]).process(Explode()),
    "window timestamp": lambda s: s.key_by(lambda v: v[0]).window(10, timestamp=lambda v: bad(v)[1]).count(),
    "window reduce": lambda s: s.key_by(lambda v: v[0]).window(10, timestamp=lambda v: v[1])
                                .reduce(lambda a, b: bad(b)),
    "watermarks": lambda s: s.with_watermarks(lambda v: bad(v)[1]),
}


@pytest.mark.parametrize("name", list(JOBS))
def test_the_error_names_the_record_the_user_function_raised_on(name):
    env = epochal.Environment(1)
    JOBS[name](env.from_collection([("k", i) for i in range(12)])).collect()
    with pytest.raises(JobFailedError, match=r"raised ValueError: seven is not allowed on record \('k', 7\)\n"):
        run_locally(env)


def test_a_long_record_is_cut_to_a_readable_length():
    env = epochal.Environment(1)
    env.from_collection([("x" * 1000, 7)]).map(bad).collect()
    with pytest.raises(JobFailedError) as raised:
        run_locally(env)
    shown = str(raised.value).splitlines()[0].split(" on record ", 1)[1]
    assert len(shown) == RECORD_TEXT_LIMIT and shown.startswith("('xxx") and shown.endswith("...")


def test_a_bad_field_is_named_once_by_its_own_message():
    env = epochal.Environment(1)
    env.from_collection([{"user": "a"}]).key_by(lambda r: r["user"]).sum("amount").collect()
    with pytest.raises(JobFailedError) as raised:
        run_locally(env)
    first = str(raised.value).splitlines()[0]
    assert "record {'user': 'a'} has no field 'amount'" in first and " on record " not in first


def test_the_worker_report_carries_the_record_to_the_drivers_message():
    error = ValueError("seven is not allowed")
    note_record(error, ("k", 7))
    note_record(error, ("outer", 0))  # the innermost note stays
    report = failure_report(UserFunctionError("Map", error), worker=1)
    assert report.record == "('k', 7)"
    message = str(failure_error([report], "job", ""))
    assert message.startswith("job 'job' failed: operator 'Map' (worker 1) raised ValueError: seven is not allowed "
                              "on record ('k', 7)")


def test_record_text_survives_a_repr_that_raises():
    class Broken:
        def __repr__(self):
            raise RuntimeError("no")

    assert record_text(Broken()) == "<Broken whose repr() raised RuntimeError>"


@pytest.mark.parametrize("partitioner", [KeyGroupPartitioner(bad, 128), CustomPartitioner(lambda key, n: 0, bad)],
                         ids=["key_by across workers", "partition_custom"])
def test_a_partitioner_notes_the_record_its_key_selector_raised_on(partitioner):
    with pytest.raises(ValueError) as raised:
        partitioner.split([("k", i) for i in range(12)], 2)
    assert UserFunctionError("Count", raised.value).record == "('k', 7)"
