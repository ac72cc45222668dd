"""Graph input and output without Spark: the Graphalytics files (epochal.graph.loading), edge lists,
Parquet/CSV tables, repeated edges, the input checks of the Graph (epochal.graph.model), the
Graphalytics output directory (epochal.graph.output) and the command line (epochal.cli.graph,
run with --local)."""

from __future__ import annotations

import gzip
import logging
import os
import sys
import types

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from epochal.cli.graph import build_parser, main, run_from_args
from epochal.graph import model, output
from epochal.graph.algorithms import BFS, SSSP, WCC, PageRank
from epochal.graph.loading import (
    graph_from_dataframes,
    load_edge_list,
    load_graph,
    load_graph_csv,
    load_graph_located,
    load_graph_parquet,
)
from epochal.graph.local import GraphResult, run_graph_locally
from epochal.graph.model import Graph, GraphInputError
from epochal.graph.output import GraphOutputError, format_lines, results_table, write_parquet, write_results
from epochal.runtime.host.hooks import Fault

BIG = 2**40
REPEAT_REMEDY = ('list each edge once, or load with duplicates="drop" (command line: --drop-duplicate-edges) '
                 "to keep the first of each")


def write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.fixture
def files(tmp_path):
    """``files(vertices_text, edges_text)`` -> the two paths."""
    def make(vertices: str, edges: str) -> tuple[str, str]:
        return write(tmp_path / "G.v", vertices), write(tmp_path / "G.e", edges)
    return make


def first_line(error: pytest.ExceptionInfo) -> str:
    return str(error.value).splitlines()[0]


def result(ids, values) -> GraphResult:
    return GraphResult(np.asarray(ids, dtype=np.int64), values, 1, "done", 1.0)


def read_dir(directory) -> str:
    return "".join((directory / name).read_text() for name in sorted(os.listdir(directory)))


# -- Graphalytics files ---------------------------------------------------------------------------------------


def test_graphalytics_files_round_trip(files):
    vertices, edges = files("3\n1\n\n2\n4\n", "1 2\r\n2 3\r\n\r\n3 1\r\n")
    graph = load_graph(vertices, edges, directed=False)
    assert graph.vertices.tolist() == [1, 2, 3, 4]
    assert (graph.src.tolist(), graph.dst.tolist()) == ([1, 2, 3], [2, 3, 1])
    assert graph.directed is False and graph.weights is None


def test_weights_and_ids_beyond_32_bits(files):
    ids = [BIG, 2**31, -7, 2**63 - 1]
    vertices, edges = files("\n".join(map(str, ids)) + "\n",
                            f"{BIG} {2**63 - 1} 0.25\n{2**31} -7 1e-3\n-7 {BIG} 0\n")
    graph = load_graph(vertices, edges, weighted=True)
    assert graph.vertices.tolist() == sorted(ids)
    assert graph.src.tolist() == [BIG, 2**31, -7]
    assert graph.dst.tolist() == [2**63 - 1, -7, BIG]
    assert graph.weights.tolist() == [0.25, 0.001, 0.0]


def test_a_weight_column_is_ignored_unless_weighted(files):
    graph = load_graph(*files("1\n2\n", "1 2 0.5\n"))
    assert graph.weights is None and graph.num_edges == 1


def test_empty_files_give_an_empty_graph(files):
    graph = load_graph(*files("", ""))
    assert graph.num_vertices == 0 and graph.num_edges == 0
    graph = load_graph(*files("5\n", ""), weighted=True)
    assert graph.vertices.tolist() == [5] and graph.weights.size == 0


def test_compressed_files_are_read(tmp_path):
    with gzip.open(tmp_path / "G.v.gz", "wt") as f:
        f.write("1\n2\n")
    with gzip.open(tmp_path / "G.e.gz", "wt") as f:
        f.write("1 2\n")
    assert load_graph(str(tmp_path / "G.v.gz"), str(tmp_path / "G.e.gz")).num_edges == 1


@pytest.mark.parametrize("vertices, edges, weighted, where, message", [
    ("1\n2\n3\n", "1 2\n2 3\n3 1 7\n", False, "G.e, line 3",
     "expected 2 fields separated by single spaces, found 3: '3 1 7'; every line needs the same fields (src dst)"),
    ("1\n2\n3\n", "1 2 0.5\n2 3\n", False, "G.e, line 2",
     "expected 3 fields separated by single spaces, found 2: '2 3'; every line needs the same fields "
     "(src dst and 1 more)"),
    ("1\n2\n", "1 2\n\n2 x\n", False, "G.e, line 3",
     "'x' is not a vertex id (ids are integers from -2^63 to 2^63-1) in '2 x'; fix or remove the line"),
    ("1\n2.5\n", "", False, "G.v, line 2",
     "'2.5' is not a vertex id (ids are integers from -2^63 to 2^63-1) in '2.5'; fix or remove the line"),
    ("1\n9223372036854775808\n", "", False, "G.v, line 2",
     "'9223372036854775808' is not a vertex id (ids are integers from -2^63 to 2^63-1) in "
     "'9223372036854775808'; fix or remove the line"),
    ("1\n2\n", "1 2 0.5\n2 1 heavy\n", True, "G.e, line 2",
     "weight 'heavy' is not a number in '2 1 heavy'; fix or remove the line"),
    ("1\n2\n", "1 2\n2 1\n", True, "G.e, line 1",
     "'1 2' has no weight; a weighted edge file needs 'src dst weight' on every line: add the weights or "
     "load the graph unweighted"),
    ("1\n2\n", "1 2 0.5\n2 1 inf\n", True, "G.e, line 2",
     "edge 2 -> 1 has weight inf; weights must be finite numbers"),
    ("1\n2\n", "1 2\n\n\n2 9\n", False, "G.e, line 4",
     "edge 2 -> 9 names vertex 9, which is not in the vertex file {v}; add the vertex or remove the edge"),
    ("1\n2\n3\n\n2\n", "", False, "G.v, line 5", "vertex 2 is listed twice (first on line 2); list each vertex once"),
    ("1\n2 3\n", "", False, "G.v, line 2",
     "expected 1 fields separated by single spaces, found 2: '2 3'; every line needs the same fields (vertex-id)"),
    ("1\n2\n", "1  2\n", False, "G.e, line 1",
     "'1  2' has an empty field (a doubled, leading or trailing separator); separate the fields by single spaces"),
    ("1\n2\n", "1 2\n2 1 \n", False, "G.e, line 2",
     "'2 1 ' has an empty field (a doubled, leading or trailing separator); separate the fields by single spaces"),
])
def test_bad_input_names_file_line_and_remedy(files, tmp_path, vertices, edges, weighted, where, message):
    v, e = files(vertices, edges)
    with pytest.raises(GraphInputError) as error:
        load_graph(v, e, weighted=weighted)
    assert first_line(error) == f"{tmp_path}/{where}: {message.format(v=v)}"


def test_missing_files_and_directories(files, tmp_path):
    v, e = files("1\n", "")
    with pytest.raises(GraphInputError) as error:
        load_graph(str(tmp_path / "nope.v"), e)
    assert first_line(error) == f"{tmp_path}/nope.v: the vertex file does not exist; check the path"
    with pytest.raises(GraphInputError) as error:
        load_graph(v, str(tmp_path))
    assert first_line(error) == f"{tmp_path}: the edge file is a directory; give the path of the file itself"


def test_file_uris_are_read(files):
    v, e = files("1\n2\n", "1 2\n")
    assert load_graph(f"file://{v}", f"file://{e}").num_edges == 1


# -- edge lists ------------------------------------------------------------------------------------------------


def test_edge_list_with_comments_and_tabs(tmp_path):
    path = write(tmp_path / "snap.txt", "# Directed graph\n# FromNodeId\tToNodeId\n\n0\t1\n1\t2\n# late\n2\t0\n")
    graph = load_edge_list(path)
    assert graph.vertices.tolist() == [0, 1, 2]
    assert (graph.src.tolist(), graph.dst.tolist()) == ([0, 1, 2], [1, 2, 0])


def test_edge_list_weighted_with_spaces(tmp_path):
    graph = load_edge_list(write(tmp_path / "w.txt", f"# weights\n{BIG} 5 2.5\n5 6 0.5\n"), weighted=True,
                           directed=False)
    assert graph.vertices.tolist() == [5, 6, BIG]
    assert graph.weights.tolist() == [2.5, 0.5] and not graph.directed


def test_edge_list_bad_line(tmp_path):
    path = write(tmp_path / "bad.txt", "# c\n0\t1\n1\t2\t3\n")
    with pytest.raises(GraphInputError) as error:
        load_edge_list(path)
    assert first_line(error) == (f"{path}, line 3: expected 2 fields separated by tabs, found 3: '1\\t2\\t3'; "
                                 "every line needs the same fields (src dst)")


# -- Parquet and CSV tables ------------------------------------------------------------------------------------


def test_parquet_tables_with_properties_and_weights(tmp_path):
    pq.write_table(pa.table({"id": [3, BIG, 1], "name": ["c", "big", "a"], "score": [0.3, 0.9, 0.1]}),
                   tmp_path / "v.parquet")
    pq.write_table(pa.table({"src": [1, 3], "dst": [BIG, 1], "w": [2.0, 3.5], "extra": [0, 0]}),
                   tmp_path / "e.parquet")
    graph = load_graph_parquet(str(tmp_path / "v.parquet"), str(tmp_path / "e.parquet"), weight_column="w",
                               property_columns=["name", "score"])
    assert graph.vertices.tolist() == [1, 3, BIG]
    assert graph.properties["name"].tolist() == ["a", "c", "big"]
    assert graph.properties["score"].tolist() == [0.1, 0.3, 0.9]
    assert graph.weights.tolist() == [2.0, 3.5]
    endpoints_only = load_graph_parquet(None, str(tmp_path / "e.parquet"))
    assert endpoints_only.vertices.tolist() == [1, 3, BIG] and endpoints_only.weights is None


def test_csv_tables_and_their_errors(tmp_path):
    vertices = write(tmp_path / "v.csv", "id,label\n1,a\n2,b\n")
    edges = write(tmp_path / "e.csv", "src,dst\n1,2\n2,7\n")
    with pytest.raises(GraphInputError) as error:
        load_graph_csv(vertices, edges)
    assert first_line(error) == (f"{edges}, row 1: edge 2 -> 7 names vertex 7, which is not in the vertices "
                                 f"({vertices}); add the vertex or remove the edge")
    no_src = write(tmp_path / "bad.csv", "from,dst\n1,2\n")
    with pytest.raises(GraphInputError) as error:
        load_graph_csv(vertices, no_src)
    assert first_line(error) == (f"{no_src} has no column 'src' (columns: from, dst); "
                                 "name a column of vertex ids 'src'")
    twice = write(tmp_path / "twice.csv", "id\n4\n5\n4\n")
    with pytest.raises(GraphInputError) as error:
        load_graph_csv(twice, write(tmp_path / "none.csv", "src,dst\n"))
    assert first_line(error) == f"{twice}, row 2: vertex 4 is listed twice (first on row 0); list each vertex once"
    graph = load_graph_csv(write(tmp_path / "v2.csv", "id;label\n2;b\n1;a\n"),
                           write(tmp_path / "ok.csv", "src;dst\n1;2\n"), delimiter=";", property_columns=["label"])
    assert graph.properties["label"].tolist() == ["a", "b"]


def test_null_ids_and_missing_tables(tmp_path):
    pq.write_table(pa.table({"src": pa.array([1, None], pa.int64()), "dst": [2, 1]}), tmp_path / "e.parquet")
    with pytest.raises(GraphInputError) as error:
        load_graph_parquet(None, str(tmp_path / "e.parquet"))
    assert first_line(error) == f"{tmp_path}/e.parquet, row 1: 'src' is null; every edge needs a 'src'"
    with pytest.raises(GraphInputError) as error:
        load_graph_parquet(None, str(tmp_path / "missing"))
    assert first_line(error) == f"{tmp_path}/missing: the edge table does not exist; check the path"


# -- repeated edges ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("edges, directed, where, message", [
    ("1 2\n2 3\n\n1 2\n", True, "G.e, line 4", "edge 1 -> 2 is listed twice (first on line 1)"),
    ("1 2\n2 3\n3 2\n", False, "G.e, line 3",
     "edge 3 -> 2 is listed twice (first on line 2 as 2 -> 3, the same edge in an undirected graph)"),
    ("3 3\n1 2\n3 3\n", False, "G.e, line 3", "edge 3 -> 3 is listed twice (first on line 1)"),
])
def test_repeated_edges_are_refused_naming_both_lines(files, tmp_path, edges, directed, where, message):
    with pytest.raises(GraphInputError) as error:
        load_graph(*files("1\n2\n3\n", edges), directed=directed)
    assert first_line(error) == f"{tmp_path}/{where}: {message}; {REPEAT_REMEDY}"


def test_both_orders_are_two_edges_of_a_directed_graph(files):
    assert load_graph(*files("1\n2\n", "1 2\n2 1\n")).num_edges == 2


def test_repeated_edges_can_be_dropped_keeping_the_first(files, caplog):
    v, e = files("1\n2\n3\n", "1 2 0.5\n2 3 1.0\n2 1 9.0\n1 2 7.0\n3 1 2.0\n")
    with caplog.at_level(logging.WARNING, logger="epochal.graph.loading"):
        graph, located = load_graph_located(v, e, directed=False, weighted=True, duplicates="drop")
    assert (graph.src.tolist(), graph.dst.tolist(), graph.weights.tolist()) == ([1, 2, 3], [2, 3, 1], [0.5, 1.0, 2.0])
    assert [record.getMessage() for record in caplog.records] == [
        f"{e}: dropped 2 repeated edge(s) and kept the first of each; the first dropped is edge 2 -> 1 (input edge 2, "
        "counted from 0), which repeats input edge 0 (1 -> 2)"]
    assert [located.where(i) for i in range(3)] == [f"{e}, line 1", f"{e}, line 2", f"{e}, line 5"]


def test_edge_lists_drop_the_second_order_of_undirected_edges_by_default(tmp_path, caplog):
    path = write(tmp_path / "ca.txt", "# Undirected graph\n0\t1\n1\t0\n# late\n1\t2\n2\t1\n")
    with caplog.at_level(logging.WARNING, logger="epochal.graph.loading"):
        graph = load_edge_list(path, directed=False)
    assert (graph.src.tolist(), graph.dst.tolist()) == ([0, 1], [1, 2])
    assert len(caplog.records) == 1 and caplog.records[0].getMessage().startswith(f"{path}: dropped 2 repeated edge(s)")
    assert load_edge_list(path).num_edges == 4
    with pytest.raises(GraphInputError) as error:
        load_edge_list(path, directed=False, duplicates="error")
    assert first_line(error) == (f"{path}, line 3: edge 1 -> 0 is listed twice (first on line 2 as 0 -> 1, the same "
                                 f"edge in an undirected graph); {REPEAT_REMEDY}")


def test_tables_refuse_or_drop_repeated_edges(tmp_path):
    edges = write(tmp_path / "e.csv", "src,dst,w\n1,2,0.5\n2,3,1.5\n1,2,2.5\n")
    with pytest.raises(GraphInputError) as error:
        load_graph_csv(None, edges)
    assert first_line(error) == f"{edges}, row 2: edge 1 -> 2 is listed twice (first on row 0); {REPEAT_REMEDY}"
    assert load_graph_csv(None, edges, weight_column="w", duplicates="drop").weights.tolist() == [0.5, 1.5]
    pq.write_table(pa.table({"src": [5, 6], "dst": [6, 5]}), tmp_path / "e.parquet")
    with pytest.raises(GraphInputError) as error:
        load_graph_parquet(None, str(tmp_path / "e.parquet"), directed=False)
    assert first_line(error) == (f"{tmp_path}/e.parquet, row 1: edge 6 -> 5 is listed twice (first on row 0 as "
                                 f"5 -> 6, the same edge in an undirected graph); {REPEAT_REMEDY}")
    assert load_graph_parquet(None, str(tmp_path / "e.parquet")).num_edges == 2


class FakeDataFrame:
    """What graph_from_dataframes uses of a Spark DataFrame: columns, select and toArrow."""

    def __init__(self, table: pa.Table) -> None:
        self.table, self.columns = table, table.column_names

    def select(self, *names: str) -> FakeDataFrame:
        return FakeDataFrame(self.table.select(list(names)))

    def toArrow(self) -> pa.Table:  # noqa: N802 (Spark's name)
        return self.table


def test_dataframes_refuse_or_drop_repeated_edges():
    edges = FakeDataFrame(pa.table({"src": [1, 2, 1], "dst": [2, 1, 2]}))
    with pytest.raises(GraphInputError) as error:
        graph_from_dataframes(None, edges)
    assert first_line(error) == (f"the edge DataFrame, row 2: edge 1 -> 2 is listed twice (first on row 0); "
                                 f"{REPEAT_REMEDY}")
    assert graph_from_dataframes(None, edges, directed=False, duplicates="drop").num_edges == 1


def test_an_unknown_duplicates_option_is_refused(files):
    with pytest.raises(GraphInputError) as error:
        load_graph(*files("1\n", ""), duplicates="keep")
    assert first_line(error) == ("duplicates='keep' is not an option; use \"error\" (refuse repeated edges) or "
                                 "\"drop\" (keep the first of each)")


# -- the Graph's own checks ----------------------------------------------------------------------------------


def brute_repeats(src, dst, directed) -> list[int]:
    seen, repeats = set(), []
    for i, (s, d) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        key = (s, d) if directed else (min(s, d), max(s, d))
        if key in seen:
            repeats.append(i)
        seen.add(key)
    return repeats


@pytest.mark.parametrize("spread", [50, 2**62], ids=["exact keys", "hashed keys"])
@pytest.mark.parametrize("directed", [True, False])
def test_repeated_edges_match_a_brute_force_count(spread, directed):
    rng = np.random.default_rng(3)
    ids = np.unique(rng.integers(-spread, spread, 30))
    src, dst = rng.choice(ids, 200), rng.choice(ids, 200)
    graph = Graph(ids, src, dst, directed)
    expected = brute_repeats(src, dst, directed)
    assert expected and graph.repeated_edges().tolist() == expected
    assert all(graph.first_occurrence(j) < j for j in expected)
    assert Graph(ids, src[:1], dst[:1], directed).repeated_edges().tolist() == []


def test_colliding_hash_keys_are_told_apart(monkeypatch):
    monkeypatch.setattr(model, "_MIX", np.uint64(0))  # every key is the destination alone
    src, dst = np.array([2**62, 5, 2**62, -(2**62), 5]), np.array([7, 7, 7, 7, 7])
    graph = Graph(np.array([-(2**62), 5, 7, 2**62]), src, dst)
    assert graph.repeated_edges().tolist() == [2, 4] == brute_repeats(src, dst, True)


@pytest.mark.parametrize("ids, missing", [(np.delete(np.arange(1, 40), 19), 20),
                                         (np.array([-(2**63), 1, 3, 2**40, 2**63 - 1]), 2)], ids=["table", "sorted"])
def test_validate_names_the_first_unknown_source_then_destination(ids, missing):
    with pytest.raises(GraphInputError) as error:
        Graph(ids, np.array([1, 1, missing]), np.array([1, 2**50, 1])).validate()
    assert first_line(error) == (f"edge 2 ({missing} -> 1) names source vertex {missing}, which is not in the vertex "
                                 "list; add it to the vertices or drop the edge")
    with pytest.raises(GraphInputError) as error:
        Graph(ids, np.array([1, 1]), np.array([1, -5])).validate()
    assert first_line(error) == ("edge 1 (1 -> -5) names destination vertex -5, which is not in the vertex list; "
                                 "add it to the vertices or drop the edge")
    assert error.value.edge == 1 and error.value.vertex == -5 and error.value.end == "destination"


def test_validate_agrees_with_a_membership_test():
    rng = np.random.default_rng(5)
    for spread in (100, 2**62):
        for _ in range(20):
            ids = np.unique(rng.integers(-spread, spread, 40))
            pool = np.concatenate([ids, rng.integers(-spread, spread, 3)])
            graph = Graph(ids, rng.choice(pool, 60), rng.choice(pool, 60))
            known = set(ids.tolist())
            bad = [(i, end) for end in ("source", "destination")
                   for i, v in enumerate((graph.src if end == "source" else graph.dst).tolist()) if v not in known]
            if not bad:
                graph.validate()
                continue
            with pytest.raises(model.UnknownVertexError) as error:
                graph.validate()
            assert (error.value.edge, error.value.end) == bad[0]
    with pytest.raises(model.UnknownVertexError, match=r"^edge 0 \(1 -> 2\) names source vertex 1"):
        Graph(np.array([], dtype=np.int64), np.array([1]), np.array([2])).validate()


# -- output ----------------------------------------------------------------------------------------------------


def lines_of(res: GraphResult) -> list[str]:
    return format_lines(res).to_pylist()


def test_integers_print_as_integers():
    assert lines_of(result([1, BIG, 2**63 - 1], np.array([0, 2**63 - 1, -3]))) == [
        "1 0\n", f"{BIG} 9223372036854775807\n", "9223372036854775807 -3\n"]
    assert lines_of(result([1, 2], np.array([True, False]))) == ["1 1\n", "2 0\n"]


def test_floats_read_back_exactly():
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.random(500), rng.standard_normal(500) * 1e-300, rng.standard_normal(500) * 1e300,
                             [0.0, -0.0, 5e-324, 1 / 3, 0.1, 2.476533217845853e-08, 1e16, 123456789.125]])
    lines = lines_of(result(np.arange(values.size), values))
    parsed = np.array([float(line.split(" ")[1]) for line in lines])
    assert np.array_equal(parsed, values) and all(line.endswith("\n") and line.count(" ") == 1 for line in lines)


def test_infinity_and_2d_values():
    assert lines_of(result([1, 2, 3], np.array([0.5, np.inf, -np.inf]))) == [
        "1 0.5\n", "2 infinity\n", "3 -infinity\n"]
    lines = lines_of(result([7, 8], np.array([[0.25, -1.5, np.inf], [1e-20, 0.0, 3.0]])))
    assert lines[0] == "7 0.25 -1.5 infinity\n"
    assert [float(x) for x in lines[1].split()[1:]] == [1e-20, 0.0, 3.0]


def test_python_values_print_as_text():
    assert lines_of(result([1, 2, 3], [(1, 2.5), "x", [float("inf"), True]])) == [
        "1 1 2.5\n", "2 x\n", "3 infinity 1\n"]


def test_results_written_in_parts_in_id_order(tmp_path):
    res = result(np.arange(10) * BIG, np.arange(10) / 4)
    paths = write_results(res, str(tmp_path / "out"), parts=3)
    assert paths == [f"{tmp_path}/out/part-0000{i}" for i in range(3)]
    assert read_dir(tmp_path / "out") == "".join(lines_of(res))
    assert [len((tmp_path / "out" / f"part-0000{i}").read_text().splitlines()) for i in range(3)] == [3, 3, 4]
    write_results(result([], np.array([], dtype=np.float64)), str(tmp_path / "empty"), parts=2)
    assert sorted(os.listdir(tmp_path / "empty")) == ["part-00000", "part-00001"] and read_dir(tmp_path / "empty") == ""


def test_rewrite_replaces_all_previous_parts_atomically(tmp_path, monkeypatch):
    out = tmp_path / "out"
    write_results(result(range(6), np.arange(6)), str(out), parts=4)
    write_results(result([1], np.array([2.5])), str(out))
    assert sorted(os.listdir(out)) == ["part-00000"] and read_dir(out) == "1 2.5\n"
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no staging or retired directory left behind

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(output, "_write_parts", fail)
    with pytest.raises(OSError, match="disk full"):
        write_results(result([1, 2], np.array([0, 0])), str(out), parts=2)
    assert read_dir(out) == "1 2.5\n" and sorted(os.listdir(tmp_path)) == ["out"]


def test_output_locations_that_are_refused(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(GraphOutputError) as error:
        write_results(result([1], np.array([1])), str(tmp_path / "mine"))
    assert first_line(error) == (f"{tmp_path}/mine: the output directory holds files other than part files "
                                 "(notes.txt); give a new or empty directory")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    with pytest.raises(GraphOutputError) as error:
        write_results(result([1], np.array([1])), str(tmp_path / "mine" / "notes.txt"))
    assert first_line(error) == (f"{tmp_path}/mine/notes.txt: the output path is a file; give a directory "
                                 "(it will hold part files)")


def test_object_stores_get_whole_parts_and_lose_stale_ones(monkeypatch):
    fs = pafs._MockFileSystem()
    monkeypatch.setattr(output, "resolve", lambda location: (fs, "bucket/out"))
    write_results(result(range(4), np.arange(4)), "mock://bucket/out", parts=3)
    write_results(result([9], np.array([1.5])), "mock://bucket/out")
    names = [info.base_name for info in fs.get_file_info(pafs.FileSelector("bucket/out"))]
    assert names == ["part-00000"]
    with fs.open_input_stream("bucket/out/part-00000") as f:
        assert f.read() == b"9 1.5\n"


def test_parquet_and_arrow_results(tmp_path):
    write_parquet(result([2, 1], np.array([0.5, np.inf])), str(tmp_path / "r.parquet"))
    assert pq.read_table(tmp_path / "r.parquet").to_pydict() == {"id": [2, 1], "value": [0.5, np.inf]}
    table = results_table(result([1, 2], np.array([[1.0, 2.0], [3.0, 4.0]])))
    assert table.schema.field("value").type == pa.list_(pa.float64())
    assert table.column("value").to_pylist() == [[1.0, 2.0], [3.0, 4.0]]
    assert results_table(result([1], np.array([7]))).schema.field("value").type == pa.int64()


# -- the command line -------------------------------------------------------------------------------------------


@pytest.fixture
def graph_files(tmp_path):
    vertices = write(tmp_path / "G.v", "".join(f"{i}\n" for i in (1, 2, 3, 4, BIG)))
    edges = write(tmp_path / "G.e", f"1 2 0.5\n2 3 1.5\n1 3 3.0\n3 3 2.0\n4 {BIG} 1.0\n")
    return vertices, edges


def cli(algorithm, vertices, edges, out, *extra):
    return main(["run", algorithm, "--vertices", vertices, "--edges", edges, "--output", str(out), "--local",
                 "--parallelism", "2", *extra])


def parsed_output(directory) -> dict[int, float]:
    return {int(line.split()[0]): float(line.split()[1]) for line in read_dir(directory).splitlines()}


@pytest.mark.parametrize("algorithm, extra, program", [
    ("bfs", ["--source-vertex", "1"], BFS(1)),
    ("pr", ["--max-iterations", "5", "--damping-factor", "0.8"], PageRank(5, 0.8)),
    ("wcc", ["--undirected"], WCC()),
    ("sssp", ["--source-vertex", "1", "--weighted"], SSSP(1)),
])
def test_cli_runs_each_algorithm_locally(graph_files, tmp_path, capsys, algorithm, extra, program):
    assert cli(algorithm, *graph_files, tmp_path / "out", *extra) == 0
    graph = load_graph(*graph_files, directed="--undirected" not in extra, weighted="--weighted" in extra)
    expected = run_graph_locally(graph, program, 2)
    assert parsed_output(tmp_path / "out") == {k: float(v) for k, v in expected.as_dict().items()}
    assert sorted(os.listdir(tmp_path / "out")) == ["part-00000", "part-00001"]
    summary = capsys.readouterr().out.splitlines()
    assert len(summary) == 1 and summary[0].startswith(f"{algorithm}: 5 vertices, 5 edges, ")
    assert "replication factor" in summary[0] and summary[0].endswith(f"output {tmp_path / 'out'}")


def test_cli_output_format_for_unreachable_vertices(graph_files, tmp_path):
    assert cli("bfs", *graph_files, tmp_path / "bfs", "--source-vertex", "1") == 0
    assert f"{BIG} 9223372036854775807\n" in read_dir(tmp_path / "bfs")
    assert cli("sssp", *graph_files, tmp_path / "sssp", "--source-vertex", "1", "--weighted") == 0
    assert read_dir(tmp_path / "sssp").splitlines()[:4] == ["1 0", "2 0.5", "3 2", "4 infinity"]


def test_cli_passes_options_to_the_spark_run(graph_files, tmp_path, monkeypatch):
    calls = []

    def run_graph(graph, program, **options):
        calls.append((program, options))
        return run_graph_locally(graph, program, options["parallelism"], options["partitioner"])

    monkeypatch.setitem(sys.modules, "epochal.graph.job", types.SimpleNamespace(run_graph=run_graph))
    args = build_parser().parse_args([
        "run", "cdlp", "--vertices", graph_files[0], "--edges", graph_files[1], "--output", str(tmp_path / "o"),
        "--max-iterations", "3", "--parallelism", "3", "--partitioner", "fennel", "--fault-tolerance",
        "checkpoint", "--checkpoint-interval", "2", "--kill-worker", "1", "--kill-at-superstep", "2",
        "--work-dir", str(tmp_path / "work")])
    assert run_from_args(args).ids.size == 5
    program, options = calls[0]
    assert program.iterations == 3
    assert options == {"parallelism": 3, "partitioner": "fennel", "fault_tolerance": "checkpoint",
                       "checkpoint_interval": 2, "work_dir": str(tmp_path / "work"),
                       "faults": [Fault("superstep", worker=1, superstep=2)]}


@pytest.mark.parametrize("extra, message", [
    (["bfs"], "bfs needs --source-vertex ID, the vertex it starts from"),
    (["sssp", "--source-vertex", "1"], "sssp needs edge weights; pass --weighted (the edge file's third field)"),
    (["bfs", "--source-vertex", "99"],
     "source vertex 99 is not in the graph; pick one of its vertices with --source-vertex"),
    (["pr", "--replicas", "1"], "--recovery, --replicas and --no-selfish need --fault-tolerance replication"),
    (["pr", "--fault-tolerance", "replication", "--replicas", "2"],
     "--replicas 2 needs more workers: --parallelism at least 3"),
    (["pr", "--kill-worker", "0"], "--kill-worker and --kill-at-superstep go together; give both or neither"),
    (["pr", "--checkpoint-interval", "3"], "--checkpoint-interval needs --fault-tolerance checkpoint"),
    (["pr", "--fault-tolerance", "checkpoint"], "--local runs without fault tolerance; drop --fault-tolerance and "
                                                "--kill-worker or run on Spark (without --local)"),
    (["pr", "--kill-worker", "2", "--kill-at-superstep", "1"],
     "--kill-worker 2 is not a worker; workers are numbered 0 to 1 (--parallelism 2)"),
    (["pr", "--damping-factor", "1.5"], "argument --damping-factor: 1.5 must be between 0.0 and 1.0"),
    (["pr", "--max-iterations", "0"], "argument --max-iterations: 0 must be at least 1"),
    (["apsp"], "argument algorithm: invalid choice: 'apsp' (choose from 'bfs', 'pr', 'wcc', 'cdlp', 'lcc', 'sssp')"),
])
def test_cli_errors_exit_2_with_one_line(graph_files, tmp_path, capsys, extra, message):
    assert cli(extra[0], *graph_files, tmp_path / "out", *extra[1:]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"epochal graph: error: {message}\n" and captured.out == ""
    assert not (tmp_path / "out").exists()


def test_cli_input_and_output_errors_exit_2(graph_files, tmp_path, capsys):
    bad = write(tmp_path / "bad.e", "1 2\n2 77\n")
    assert cli("wcc", graph_files[0], bad, tmp_path / "out") == 2
    assert capsys.readouterr().err == (f"epochal graph: error: {bad}, line 2: edge 2 -> 77 names vertex "
                                       f"77, which is not in the vertex file {graph_files[0]}; add the vertex or "
                                       "remove the edge\n")
    assert cli("wcc", *graph_files, tmp_path) == 2  # the directory holds G.v and G.e
    assert capsys.readouterr().err.startswith(f"epochal graph: error: {tmp_path}: the output directory "
                                              "holds files other than part files")
    assert main([]) == 2
    assert capsys.readouterr().err == "epochal graph: error: the following arguments are required: command\n"


def test_cli_refuses_or_drops_repeated_edges(graph_files, tmp_path, capsys):
    edges = write(tmp_path / "dup.e", "1 2\n2 3\n2 1\n")
    assert cli("wcc", graph_files[0], edges, tmp_path / "out", "--undirected") == 2
    assert capsys.readouterr().err == (f"epochal graph: error: {edges}, line 3: edge 2 -> 1 is listed twice "
                                       "(first on line 1 as 1 -> 2, the same edge in an undirected graph); "
                                       f"{REPEAT_REMEDY}\n")
    assert cli("wcc", graph_files[0], edges, tmp_path / "out", "--undirected", "--drop-duplicate-edges") == 0
    assert capsys.readouterr().out.startswith("wcc: 5 vertices, 2 edges, ")


def test_cli_names_the_line_of_a_negative_weight(graph_files, tmp_path, capsys):
    edges = write(tmp_path / "neg.e", "1 2 0.5\n\n2 3 1.5\n1 2 0.25\n3 1 -2.0\n")
    assert cli("sssp", graph_files[0], edges, tmp_path / "out", "--weighted", "--source-vertex", "1",
               "--drop-duplicate-edges") == 2
    assert capsys.readouterr().err == (f"epochal graph: error: {edges}, line 5: edge 3 -> 1 has negative "
                                       "weight -2.0; SSSP needs weights of 0 or more\n")
