"""Planning without Spark: chaining, edges, validation and submit-time errors."""

from __future__ import annotations

import threading

import pytest

import epochal
from epochal.errors import PlanError
from epochal.plan.execution import Deployment, build_execution_graph, serialize_deployment


def env(parallelism=2):
    return epochal.Environment(parallelism)  # no Spark is started until execute()


def test_forward_operators_are_chained_and_shuffles_split_vertices():
    e = env()
    e.from_collection([1, 2]).map(str).filter(bool).key_by(len).count().print()
    job = e.plan()
    assert [v.name for v in job.vertices] == [
        "Source: collection -> Map -> Filter", "Count -> Sink: print"]
    assert [edge.partitioner.kind for edge in job.edges] == ["hash"]


def test_different_parallelism_breaks_the_chain_with_rebalance():
    e = env(2)
    e.from_collection([1]).map(str).set_parallelism(3).collect()
    job = e.plan()
    assert len(job.vertices) == 3
    assert [edge.partitioner.kind for edge in job.edges] == ["rebalance", "rebalance"]
    graph = build_execution_graph(job)
    assert graph.num_workers == 3
    # all-to-all channels: 2x3 from the source, 3x2 into the sink
    assert len(graph.channels) == 12


def test_forward_with_unequal_parallelism_is_rejected():
    e = env(2)
    e.from_collection([1]).forward().map(str).set_parallelism(3).collect()
    with pytest.raises(PlanError, match="forward.*equal parallelism"):
        e.plan()


def test_disable_chaining_and_union():
    e = env(2)
    a = e.from_collection([1]).map(str).disable_chaining()
    b = e.from_collection([2])
    a.union(b).collect()
    job = e.plan()
    names = [v.name for v in job.vertices]
    assert "Map" in names and "Union -> Sink: collect" in names
    forward_edges = [edge for edge in job.edges if edge.partitioner.kind == "forward"]
    graph = build_execution_graph(job)
    for edge in forward_edges:  # forward edges connect subtask i to subtask i only
        assert all(graph.channels[c].consumer == p for p in range(2) for c in graph.outputs[(edge.id, p)])


def test_job_without_sink_is_rejected():
    e = env()
    e.from_collection([1]).map(str)
    with pytest.raises(PlanError, match="no sink"):
        e.plan()


def test_duplicate_uids_are_rejected():
    e = env()
    s = e.from_collection([1]).map(str).uid("same")
    s.map(str).uid("same").collect()
    with pytest.raises(PlanError, match="uid 'same'"):
        e.plan()


def test_bad_arguments_fail_at_build_time():
    e = env()
    with pytest.raises(PlanError, match="map"):
        e.from_collection([1]).map(42)
    with pytest.raises(PlanError, match="parallelism"):
        e.from_collection([1]).map(str).set_parallelism(0)
    with pytest.raises(PlanError, match="parallelism"):
        epochal.Environment(0)
    with pytest.raises(PlanError, match="unknown Environment option"):
        epochal.Environment(2, no_such_option=1)


def test_unpicklable_function_is_reported_with_its_operator_name():
    lock = threading.Lock()
    e = env()
    e.from_collection([1]).map(lambda x: (lock, x)).name("uses-a-lock").collect()
    job = e.plan()
    deployment = Deployment("job", "id", build_execution_graph(job), e.config)
    functions = {n.name: n.functions for n in e.graph.nodes}
    with pytest.raises(PlanError, match="operator 'uses-a-lock' cannot be shipped"):
        serialize_deployment(deployment, functions)


def test_plan_describe_lists_vertices():
    e = env()
    e.from_sequence(0, 10).key_by(lambda x: x % 2).sum().print()
    text = e.plan().describe()
    assert "#1 Sum -> Sink: print (parallelism 2) <- hash from #0" in text
