"""State as Spark DataFrames (issue 37): read a checkpoint's or savepoint's state, write savepoints.

- :mod:`~epochal.state.dataframes.snapshot_view`: a checkpoint or savepoint opened as data (what
  it holds, the errors that list it, key-group splits);
- :mod:`~epochal.state.dataframes.values`: Python state values as Spark types and back;
- :mod:`~epochal.state.dataframes.rows`: the columns of each kind of state, Arrow batches;
- :mod:`~epochal.state.dataframes.reader`: the ``epochal-state`` and ``epochal-state-metadata``
  data sources, ``read_state``;
- :mod:`~epochal.state.dataframes.writer`: :class:`SavepointWriter` (bootstrap and modify).

Nothing here is imported by workers of a job: it needs PySpark's Python data source API.
See docs/state_dataframes.md.
"""
