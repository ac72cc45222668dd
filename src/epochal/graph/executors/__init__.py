"""Graphs beyond the driver: loading and partitioning on the executors (issue 40).

A :class:`~epochal.graph.executors.sources.GraphSource` names a graph's input (Graphalytics
files, a SNAP edge list, Parquet or CSV tables, Spark DataFrames) without reading it. Handed to
:func:`~epochal.graph.job.run_graph`, it is read, validated and partitioned by Spark tasks, and
each worker's :class:`~epochal.graph.partition.Partition` is written to the job's work directory
by a task on the executors; the driver holds only sizes and statistics
(:class:`~epochal.graph.executors.stages.LoadStatistics`). The modules:

- :mod:`~epochal.graph.executors.sources` (both sides): the source descriptions, their *splits*
  (byte ranges of text files, Parquet row groups, CSV files, DataFrame partitions) and how one
  split is read; every row carries its *position* (split, row), which names its file and line
  (or table and row) in errors and orders edges exactly as the driver's loaders do.
- :mod:`~epochal.graph.executors.buckets` (worker): stage 1, one Spark task per split: parse,
  check weights, send each vertex to its *home* worker (the hash of its id) and each edge to the
  homes of both endpoints, as files in the staging directory.
- :mod:`~epochal.graph.executors.build` (worker): stage 2, one barrier task per worker: the
  exact checks (repeated vertices, unknown endpoints, repeated edges), the placement (hash or
  streaming Fennel), masters with their edges, replicas, Imitator's FT replicas and mirrors,
  and the partition assembled by :func:`~epochal.graph.records.assemble`.
- :mod:`~epochal.graph.executors.fennel`: the streaming Fennel each worker runs on its home
  vertices.
- :mod:`~epochal.graph.executors.stages` (driver): runs both stages on Spark and turns what the
  tasks report into one :class:`~epochal.graph.model.GraphInputError` naming file and line.
"""
