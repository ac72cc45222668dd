"""Planning without Spark: chaining, edges, validation and submit-time errors."""

from __future__ import annotations

import threading

import pytest

import epochal
from epochal.connectors.memory import CollectionSource, DiscardSink
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
    assert [edge.partitioner.strategy for edge in job.edges] == ["hash"]


def test_different_parallelism_breaks_the_chain_with_rebalance():
    e = env(2)
    e.from_collection([1]).map(str).set_parallelism(3).collect()
    job = e.plan()
    assert len(job.vertices) == 3
    assert [edge.partitioner.strategy for edge in job.edges] == ["rebalance", "rebalance"]
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
    forward_edges = [edge for edge in job.edges if edge.partitioner.strategy == "forward"]
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


# ---------------------------------------------------------------- operator uids
def uids(e):
    """(kind, uid) of every operator of the planned job, in creation order."""
    job = e.plan()
    return [(n.operation, n.uid) for _, n in sorted(job.nodes.items())]


def keyed_sum_job(e, with_map=False, name=None):
    stream = e.from_generator(lambda i: (f"k{i % 4}", 1), count=10)
    if with_map:
        stream = stream.map(lambda kv: kv)
    total = stream.key_by(lambda kv: kv[0]).sum(lambda kv: kv[1])
    if name:
        total = total.name(name)
    total.discard()


def test_default_uids_are_stable_when_an_unrelated_operator_is_added():
    before, after = env(), env()
    keyed_sum_job(before)
    keyed_sum_job(after, with_map=True)
    assert uids(before) == [("source", "source-0"), ("sum", "sum-0"), ("sink", "sink-0")]
    assert uids(after) == [("source", "source-0"), ("map", "map-0"), ("sum", "sum-0"), ("sink", "sink-0")]


def test_ordinals_count_operators_of_the_same_kind_named_or_not():
    e = env()
    s = e.from_collection([1]).map(str).name("first").map(str).map(str).uid("third")
    s.map(str).print()
    s.print()
    assert uids(e) == [("source", "source-0"), ("map", "map:first"), ("map", "map-1"), ("map", "third"),
                       ("map", "map-3"), ("sink", "sink-0"), ("sink", "sink-1")]


def test_a_user_name_gives_the_uid_and_a_user_uid_wins():
    named, renamed, pinned = env(), env(), env()
    keyed_sum_job(named, name="totals")
    keyed_sum_job(renamed, name="totals per key")
    keyed_sum_job(pinned, name="totals per key")
    pinned.graph.nodes[-2].uid = "totals"  # the sum: .uid() on the stream does this
    assert ("sum", "sum:totals") in uids(named)
    assert ("sum", "sum:totals per key") in uids(renamed)
    assert ("sum", "totals") in uids(pinned)


def test_names_passed_to_sources_and_sinks_are_user_names_defaults_are_not():
    e = env()
    a = e.from_source(CollectionSource([1]), name="events")
    a.sink_to(DiscardSink(), name="out")
    a.collect()
    a.collect(name="audit")
    a.print()
    a.discard()
    job_uids = [uid for _, uid in uids(e)]
    assert job_uids == ["source:events", "sink:out", "sink-1", "sink:audit", "sink-3", "sink-4"]


def test_planning_twice_gives_the_same_uids_and_does_not_freeze_them():
    e = env()
    stream = e.from_collection([1]).map(str)
    stream.print()
    first = uids(e)
    assert uids(e) == first
    stream.name("renamed")  # a later name still counts: planning did not write uids back
    assert ("map", "map:renamed") in uids(e)


def test_repeated_names_of_one_kind_collide_with_a_clear_error():
    e = env()
    base = e.from_collection([1])
    base.map(str).name("parse").print()
    base.filter(bool).name("parse").print()  # another kind: its own uid
    assert [uid for kind, uid in uids(e) if kind != "sink"] == ["source-0", "map:parse", "filter:parse"]
    base.map(str).name("parse").print()
    with pytest.raises(PlanError, match=r"uid 'map:parse' is used by two operators: 'parse' \(map, uid from its "
                                        r"\.name\(\)\) and 'parse' \(map, uid from its \.name\(\)\).*distinct "
                                        r"\.name\(\) or \.uid\(\)"):
        e.plan()


def test_uid_collisions_fail_at_plan_time_saying_what_to_do():
    e = env()
    base = e.from_collection([1])
    base.map(str).name("parse").print()
    base.map(str).uid("map:parse").print()
    with pytest.raises(PlanError, match=r"uid 'map:parse' is used by two operators: 'parse' \(map, uid from its "
                                        r"\.name\(\)\) and 'Map' \(map, uid set with \.uid\(\)\).*distinct "
                                        r"\.name\(\) or \.uid\(\)"):
        e.plan()
    e = env()
    base = e.from_collection([1])
    base.map(str).print()
    base.map(str).uid("map-0").print()
    with pytest.raises(PlanError, match=r"uid 'map-0'.*by position: 1st map of the job.*set with \.uid\(\)"):
        e.plan()


def test_empty_names_and_uids_are_rejected():
    e = env()
    with pytest.raises(PlanError, match="uid"):
        e.from_collection([1]).uid("")
    with pytest.raises(PlanError, match="name"):
        e.from_collection([1]).name(None)


def test_loops_get_stable_uids_for_their_head_and_tail():
    e = env()
    loop = e.from_collection([3]).iterate()
    step = loop.map(lambda n: n - 1)
    loop.close_with(step.filter(lambda n: n > 0))
    step.filter(lambda n: n == 0).print()
    job_uids = dict((uid, kind) for kind, uid in uids(e))
    assert job_uids["iteration_head-0"] == "iteration_head"
    assert job_uids["iteration_tail-0"] == "iteration_tail"
