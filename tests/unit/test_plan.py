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


def loop_job(e, parallelism=None, keyed=True):
    it = e.from_collection([3, 4]).iterate()
    if parallelism:
        it.set_parallelism(parallelism)
    body = it.key_by(lambda n: n).map(lambda n: n - 1)
    it.close_with(body.filter(lambda n: n > 0), key_by=(lambda n: n) if keyed else None)
    body.filter(lambda n: n == 0).collect()
    return e.plan()


def test_a_loop_has_one_back_edge_found_by_dfs_and_a_co_located_tail():
    job = loop_job(env(2), parallelism=3)
    (loop,) = job.loops
    back = [edge for edge in job.edges if edge.back_edge]
    assert len(back) == 1 and back[0].source_vertex == loop.tail_vertex and back[0].target_vertex == loop.head_vertex
    assert back[0].partitioner.is_forward
    head, tail = job.vertices[loop.head_vertex], job.vertices[loop.tail_vertex]
    assert head.parallelism == tail.parallelism == loop.parallelism == 3  # the tail follows its head
    inside = {edge.id for edge in job.edges if edge.loop == loop.id}
    assert back[0].id in inside and len(inside) == 3  # head -> body -> tail -> head
    outside = [edge for edge in job.edges if edge.loop is None]
    assert {job.vertices[e.target_vertex].name for e in outside} >= {"Iteration head 0"}  # the loop's input
    assert "back-edge" in job.describe()


def test_the_tail_is_never_chained_into_the_head():
    e = env(2)
    it = e.from_collection([5]).iterate()
    halves = it.map(lambda n: n // 2)  # chained to the head
    it.close_with(halves.filter(bool))  # forward, same parallelism: still a channel
    halves.filter(lambda n: not n).collect()
    job = e.plan()
    assert any(edge.back_edge for edge in job.edges)
    assert [v.name for v in job.vertices if "Iteration tail" in v.name] == ["Iteration tail 0"]


def test_loop_plan_errors_are_clear():
    e = env()
    it = e.from_collection([1]).iterate()
    it.map(str).collect()
    with pytest.raises(PlanError, match="never closed"):
        e.plan()
    e = env()
    it = e.from_collection([1]).iterate()
    it.close_with(it.map(abs))
    with pytest.raises(PlanError, match="already closed"):
        it.close_with(it.map(abs))
    e = env()
    outer = e.from_collection([1]).iterate()
    inner = outer.map(abs).iterate()
    inner_body = inner.map(abs)
    inner.close_with(inner_body.filter(bool))
    outer.close_with(inner_body.filter(bool))
    inner_body.collect()
    with pytest.raises(PlanError, match="nested or overlapping"):
        e.plan()
