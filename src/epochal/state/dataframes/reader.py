"""State as a Spark DataFrame: the ``epochal-state`` and ``epochal-state-metadata`` data sources.

Both are PySpark Python data sources (``pyspark.sql.datasource``), registered on a session by
:func:`register_state_sources` (``read_state`` and ``read_state_metadata`` register them)::

    epochal.register_state_sources(spark)
    df = (spark.read.format("epochal-state")
          .option("uid", "sum").option("stateName", "aggregate")
          .load("/data/savepoints/savepoint-1a2b-3"))      # or a .../chk-<n> directory
    spark.read.format("epochal-state-metadata").load(path).show()

Options of ``epochal-state`` (case-insensitive, as all Spark options):

- ``path`` (or ``load(path)``): what ``restore_from`` accepts: a savepoint directory (canonical
  or native), a ``chk-<n>`` checkpoint of any backend (heap, incremental heap chains, RocksDB),
  a run or a job directory (its latest completed checkpoint);
- ``uid``: the operator's uid; ``stateName``: the keyed state's name (``epochal-state-metadata``
  lists them); ``kind``: ``keyed`` (default), ``timers`` or ``operator`` (operator list state;
  ``stateName`` then picks one list, or all when left out);
- ``valueFormat`` / ``keyFormat``: ``auto`` (Spark types where the values are plain data) or
  ``pickle`` (binary pickles; :func:`~epochal.state.dataframes.values.decode_value`);
- ``partitions``: about how many input partitions (default: 8, and at least one per subtask
  that wrote the state); each is a key-group range inside one old subtask's range, so Spark
  reads them in parallel and each opens one subtask's files only.

The columns are :mod:`epochal.state.dataframes.rows`'. Planning (the schema, the partitions)
runs in a Python process Spark starts for the data source; the partitions are read in the
executors' Python workers, which must reach the checkpoint storage (as a restoring job's
workers do). Errors: :func:`read_state` checks the path, uid and state name in this process
first and raises :class:`~epochal.state.dataframes.snapshot_view.StateDataFrameError`; through
``spark.read.format(...)`` the same message is inside Spark's ``AnalysisException``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from epochal.state.dataframes import rows as R
from epochal.state.dataframes.snapshot_view import KINDS, TIMERS, ReadPlan, SnapshotView, StateDataFrameError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

STATE_FORMAT = "epochal-state"
METADATA_FORMAT = "epochal-state-metadata"
_FORMATS = ("auto", "pickle")


@dataclass(frozen=True)
class StateReadOptions:
    """The options of one ``epochal-state`` read, checked."""

    path: str
    uid: str | None
    kind: str
    state: str | None
    value_format: str
    key_format: str
    partitions: int | None

    @classmethod
    def parse(cls, options: Any) -> StateReadOptions:
        def get(name: str) -> str | None:
            value = options.get(name)
            if value is None:
                value = options.get(name.lower())
            return None if value in (None, "") else str(value)

        kind = (get("kind") or "keyed").lower()
        if kind not in KINDS:
            raise StateDataFrameError(f"option kind must be one of {', '.join(KINDS)}, not {kind!r}")
        formats = {}
        for name in ("valueFormat", "keyFormat"):
            formats[name] = (get(name) or "auto").lower()
            if formats[name] not in _FORMATS:
                raise StateDataFrameError(f"option {name} must be 'auto' or 'pickle', not {formats[name]!r}")
        partitions = get("partitions")
        count = None
        if partitions is not None:
            try:
                count = int(partitions)
            except ValueError:
                count = 0
            if count < 1:
                raise StateDataFrameError(f"option partitions must be a positive integer, not {partitions!r}")
        return cls(get("path") or "", get("uid"), kind, get("stateName"), formats["valueFormat"],
                   formats["keyFormat"], count)

    def plan(self) -> tuple[SnapshotView, ReadPlan]:
        view = SnapshotView(self.path)
        return view, view.plan(self.uid, self.kind, self.state)


class _Split(InputPartition):
    """One input partition: a key-group range (``start``, ``stop``), or an old subtask's index."""

    def __init__(self, start: int, stop: int | None = None) -> None:
        super().__init__((start, stop))
        self.start, self.stop = start, stop

    def split(self) -> range | int:
        return self.start if self.stop is None else range(self.start, self.stop)


def _splits(view: SnapshotView, plan: ReadPlan, partitions: int | None) -> list[range | int]:
    if plan.kind == "operator":
        return list(R.operator_splits(plan))
    return list(view.splits(plan.uid, partitions))


class StateDataSource(DataSource):
    """``spark.read.format("epochal-state")``: one operator's keyed state, timers or operator
    state of a checkpoint or savepoint (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return STATE_FORMAT

    def schema(self) -> StructType:
        options = StateReadOptions.parse(self.options)
        view, plan = options.plan()
        sample = R.sample(plan, _splits(view, plan, options.partitions))
        return R.schema_of(plan, sample, options.value_format, options.key_format)

    def reader(self, schema: StructType) -> DataSourceReader:
        return StateReader(StateReadOptions.parse(self.options), schema)


class StateReader(DataSourceReader):
    """Reads the splits of one ``epochal-state`` read as Arrow record batches."""

    def __init__(self, options: StateReadOptions, schema: StructType) -> None:
        view, self.plan = options.plan()
        self.schema = _checked_schema(self.plan, schema, options)
        self._splits = _splits(view, self.plan, options.partitions)

    def partitions(self) -> Sequence[InputPartition]:
        return [_Split(s.start, s.stop) if isinstance(s, range) else _Split(s) for s in self._splits]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _Split)
        yield from R.batches(self.plan, partition.split(), self.schema)


def _checked_schema(plan: ReadPlan, schema: StructType, options: StateReadOptions) -> StructType:
    """The user's schema (or the inferred one), with the columns of ``plan``'s rows only."""
    names = R.column_names(plan)
    unknown = [n for n in schema.names if n not in names]
    if unknown:
        raise StateDataFrameError(f"the schema names column(s) {', '.join(unknown)} that {options.kind} state has "
                                  f"not: its columns are {', '.join(names)}")
    return schema


class StateMetadataDataSource(DataSource):
    """``spark.read.format("epochal-state-metadata").load(path)``: one row per operator and
    state of a checkpoint or savepoint (like Spark's ``state-metadata`` source), from its metadata
    alone (no state file is read)."""

    @classmethod
    def name(cls) -> str:
        return METADATA_FORMAT

    def schema(self) -> str:
        return METADATA_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return StateMetadataReader(str(self.options.get("path") or ""))


#: one row per (operator, state): keyed states, ``__timers__`` (kind ``timers``) and, once per
#: operator with operator state, kind ``operator`` (state name null)
METADATA_SCHEMA = ("uid string, operator_name string, operation string, parallelism int, kind string, "
                   "state_name string, state_type string, state_entries long, key_groups_with_state int, "
                   "operator_bytes long, "
                   "max_parallelism int, checkpoint_id long, snapshot_type string, path string")


def metadata_rows(path: str) -> list[tuple[Any, ...]]:
    """The rows of ``epochal-state-metadata`` for the snapshot at ``path``."""
    from epochal.state.inspect import savepoint_info

    view = SnapshotView(path)
    info = savepoint_info(view.location)
    rows: list[tuple[Any, ...]] = []
    for uid, operator in sorted(info["operators"].items()):
        common = (uid, operator["name"], operator["operation"], operator["parallelism"])
        tail = (int(operator["key_groups_with_state"]), int(operator["bytes"]), info["max_parallelism"],
                info["checkpoint_id"], info["type"], info["path"])
        for name, state_type in sorted(view.keyed_states(uid).items()):
            kind = "timers" if name == TIMERS else "keyed"
            rows.append((*common, kind, name, state_type, operator["entries"].get(name), *tail))
        if view.has_operator_state(uid):
            rows.append((*common, "operator", None, "list", None, *tail))
    return rows


class StateMetadataReader(DataSourceReader):
    def __init__(self, path: str) -> None:
        self.rows = metadata_rows(path)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        yield from self.rows


def register_state_sources(spark: SparkSession) -> None:
    """Register the ``epochal-state`` and ``epochal-state-metadata`` data sources on ``spark``
    (once per session is enough; again does no harm)."""
    spark.dataSource.register(StateDataSource)
    spark.dataSource.register(StateMetadataDataSource)


def read_state(spark: SparkSession, path: str, uid: str, state_name: str | None = None, *, kind: str = "keyed",
               schema: StructType | str | None = None, value_format: str = "auto", key_format: str = "auto",
               partitions: int | None = None) -> DataFrame:
    """Operator ``uid``'s ``kind`` state (keyed state ``state_name``, its timers, or its operator
    state) of the checkpoint or savepoint at ``path`` as a DataFrame (columns: see
    :mod:`epochal.state.dataframes.rows`).

    Checks ``path``, ``uid`` and ``state_name`` here first: a :class:`StateDataFrameError` that
    lists what the snapshot holds if they name nothing. A run or job directory is resolved here,
    once, to its latest completed checkpoint, so every partition reads the same one. ``schema``:
    the columns' types instead of inferring them from a sample."""
    options = {"path": path, "uid": uid, "stateName": state_name or "", "kind": kind,
               "valueFormat": value_format, "keyFormat": key_format,
               "partitions": "" if partitions is None else str(partitions)}
    view, _ = StateReadOptions.parse(options).plan()  # the errors, here, before Spark wraps them
    path = view.location  # pinned: a run or job directory's latest checkpoint may change meanwhile
    register_state_sources(spark)
    reader = spark.read.format(STATE_FORMAT)
    if schema is not None:
        reader = reader.schema(schema)
    for name, value in options.items():
        if value and name != "path":
            reader = reader.option(name, value)
    return reader.load(path)


def read_state_metadata(spark: SparkSession, path: str) -> DataFrame:
    """The operators and states of the checkpoint or savepoint at ``path`` as a DataFrame (the
    ``epochal-state-metadata`` source's rows); a :class:`StateDataFrameError` if there is none."""
    path = SnapshotView(path).location
    register_state_sources(spark)
    return spark.read.format(METADATA_FORMAT).load(path)


__all__ = ["METADATA_FORMAT", "STATE_FORMAT", "StateDataSource", "StateMetadataDataSource", "read_state",
           "read_state_metadata", "register_state_sources"]
