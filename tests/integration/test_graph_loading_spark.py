"""Graphs from Spark DataFrames and results back to Spark (epochal.graph.loading, epochal.graph.output)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from epochal.graph.loading import graph_from_dataframes
from epochal.graph.local import GraphResult
from epochal.graph.model import GraphInputError
from epochal.graph.output import results_to_dataframe

pytestmark = pytest.mark.integration

BIG = 2**40


def test_graph_from_dataframes_with_properties_and_weights(spark):
    vertices = spark.createDataFrame([(BIG, "big", 0.5), (3, "three", 1.5), (1, "one", 2.5)],
                                     "id long, name string, score double")
    edges = spark.createDataFrame([(1, 3, 2.0, "x"), (3, BIG, 0.25, "y"), (BIG, 1, 1.0, "z")],
                                  "src long, dst long, w double, label string")
    graph = graph_from_dataframes(vertices, edges, directed=False, weight_column="w",
                                  property_columns=["name", "score"])
    assert graph.vertices.tolist() == [1, 3, BIG] and not graph.directed
    assert graph.properties["name"].tolist() == ["one", "three", "big"]
    assert graph.properties["score"].tolist() == [2.5, 1.5, 0.5]
    assert (graph.src.tolist(), graph.dst.tolist()) == ([1, 3, BIG], [3, BIG, 1])
    assert graph.weights.tolist() == [2.0, 0.25, 1.0]

    endpoints = graph_from_dataframes(None, edges.select("src", "dst"))
    assert endpoints.vertices.tolist() == [1, 3, BIG] and endpoints.weights is None


def test_dataframe_errors_name_the_frame_and_row(spark):
    vertices = spark.createDataFrame([(1,), (2,)], "id long")
    edges = spark.createDataFrame([(1, 2), (2, 9)], "src long, dst long")
    with pytest.raises(GraphInputError) as error:
        graph_from_dataframes(vertices, edges)
    assert str(error.value) == ("the edge DataFrame, row 1: edge 2 -> 9 names vertex 9, which is not in the vertices "
                                "(the vertex DataFrame); add the vertex or remove the edge")
    with pytest.raises(GraphInputError) as error:
        graph_from_dataframes(vertices.withColumnRenamed("id", "vertex"), edges)
    assert str(error.value) == ("the vertex DataFrame has no column 'id' (columns: vertex); "
                                "name a column of vertex ids 'id'")


def test_results_to_dataframe(spark):
    ids = np.array([1, BIG, 3], dtype=np.int64)
    floats = results_to_dataframe(GraphResult(ids, np.array([0.5, math.inf, 1 / 3]), 2, "done", 1.0), spark)
    assert floats.schema.simpleString() == "struct<id:bigint,value:double>"
    assert sorted(tuple(r) for r in floats.collect()) == [(1, 0.5), (3, 1 / 3), (BIG, math.inf)]
    longs = results_to_dataframe(GraphResult(ids, np.array([0, 2**63 - 1, 2]), 2, "done", 1.0), spark)
    assert longs.schema.simpleString() == "struct<id:bigint,value:bigint>"
    assert dict(longs.collect()) == {1: 0, BIG: 2**63 - 1, 3: 2}
    factors = results_to_dataframe(GraphResult(ids[:2], np.array([[1.0, 2.0], [3.0, 4.0]]), 2, "done", 1.0), spark)
    assert factors.schema.simpleString() == "struct<id:bigint,value:array<double>>"
    assert dict(factors.collect()) == {1: [1.0, 2.0], BIG: [3.0, 4.0]}
