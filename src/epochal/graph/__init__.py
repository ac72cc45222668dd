"""Vertex-centric graph processing on Spark: a Pregel engine with checkpoint fault tolerance.

A graph job is a job kind of its own (``graph``, :mod:`epochal.runtime.host.entry`): the graph is
loaded and partitioned on the driver (:mod:`~epochal.graph.placement`,
:mod:`~epochal.graph.partition`), each Spark task runs one partition's superstep engine
(:mod:`~epochal.graph.engine`), and the JobMaster holds the global barrier
(:mod:`~epochal.graph.supersteps`). Programs are written per vertex or per partition
(:mod:`~epochal.graph.program`); :func:`~epochal.graph.local.run_graph_locally` runs them in one process
for tests.
"""
