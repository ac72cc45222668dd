"""Bad numbers and misplaced calls fail where they are written, with one readable PlanError."""

from __future__ import annotations

import math

import pytest

import epochal
from epochal.config import CheckpointConfig, EngineConfig
from epochal.control.restart import ExponentialBackoffRestart, FailureRateRestart, FixedDelayRestart
from epochal.errors import PlanError
from epochal.validation import check_number

BAD_SECONDS = [float("nan"), math.inf, -math.inf, -1.0, 0, True, "1", None]


@pytest.mark.parametrize("interval", BAD_SECONDS)
def test_checkpoint_interval_must_be_a_finite_positive_number(interval):
    env = epochal.Environment(1)
    with pytest.raises(PlanError, match=r"^checkpoint interval \(seconds\) must be a number > 0, got"):
        env.enable_checkpointing(interval)


@pytest.mark.parametrize("option,value", [("timeout", float("nan")), ("timeout", 0), ("min_pause", -1),
                                          ("min_pause", math.inf), ("max_concurrent", 0), ("max_concurrent", 1.5),
                                          ("retained", 0), ("tolerable_failures", -1)])
def test_every_checkpoint_option_is_checked(option, value):
    with pytest.raises(PlanError, match="must be"):
        CheckpointConfig(interval=1.0, **{option: value})


@pytest.mark.parametrize("option,value", [("batch_size", 0), ("batch_size", 2.5), ("channel_credits", float("nan")),
                                          ("buffer_timeout", float("nan")), ("heartbeat_timeout", math.inf),
                                          ("registration_timeout", -3), ("alignment_memory_bytes", -1),
                                          ("max_parallelism", 0), ("max_parallelism", 40000)])
def test_every_engine_option_is_checked(option, value):
    with pytest.raises(PlanError, match="must be"):
        EngineConfig(**{option: value})
    with pytest.raises(PlanError, match="must be"):
        epochal.Environment(1, **{option: value})


@pytest.mark.parametrize("make", [lambda: FixedDelayRestart(attempts=-1), lambda: FixedDelayRestart(delay=math.nan),
                                  lambda: ExponentialBackoffRestart(multiplier=0.5),
                                  lambda: FailureRateRestart(interval=0)])
def test_restart_strategies_check_their_numbers(make):
    with pytest.raises(PlanError, match="must be"):
        make()


def test_sources_and_windows_check_their_numbers():
    env = epochal.Environment(1)
    with pytest.raises(PlanError, match=r"rate \(records per second\) must be a number > 0, got nan"):
        env.from_sequence(0, 10, rate=float("nan"))
    with pytest.raises(PlanError, match="from_generator count must be a whole number >= 0"):
        env.from_generator(lambda i: i, count=-5)
    with pytest.raises(PlanError, match="from_sequence end must be a whole number"):
        env.from_sequence(0, 10.5)
    keyed = env.from_collection([1]).key_by(lambda x: x)
    with pytest.raises(PlanError, match="window size must be a number > 0"):
        keyed.window(float("nan"), timestamp=int)
    with pytest.raises(PlanError, match="max_out_of_orderness must be a number >= 0"):
        env.from_collection([1]).with_watermarks(int, max_out_of_orderness=math.inf)


def test_check_number_accepts_what_it_promises():
    check_number(0.5, "x")
    check_number(0, "x", strict=False)
    check_number(None, "x", optional=True)
    check_number(-7, "x", minimum=None, integer=True)
    import numpy as np

    check_number(np.int64(3), "x", integer=True)
    check_number(np.float32(0.25), "x")


def test_keyed_only_calls_on_a_plain_stream_say_call_key_by_first():
    stream = epochal.Environment(1).from_collection([1, 2])
    for call in (lambda: stream.count(), lambda: stream.sum(), lambda: stream.sum("v"),
                 lambda: stream.window(10, timestamp=int), lambda: stream.reduce(max), lambda: stream.max_by(0),
                 lambda: stream.min(), lambda: stream.max(), lambda: stream.min_by("v")):
        with pytest.raises(PlanError, match=r"^\w+\(\) works per key, and this stream is not keyed: call key_by"):
            call()


def test_aggregation_field_must_be_a_name_an_index_or_a_function():
    keyed = epochal.Environment(1).from_collection([1]).key_by(lambda x: x)
    for bad in (1.5, True, ["v"]):
        with pytest.raises(PlanError, match=r"sum\(\) takes a field name \(str\), a tuple index \(int\) or a function"):
            keyed.sum(bad)
    keyed.sum("v")
    keyed.max(0)
    keyed.min(lambda r: r)
