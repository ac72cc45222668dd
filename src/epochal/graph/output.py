"""Writing a graph job's result: LDBC Graphalytics text output, Parquet, a Spark DataFrame.

This module owns the form results leave epochal in:

- :func:`write_results`: the Graphalytics output, a directory of plain-text part files
  (``part-00000``, ...) with one ``vertex-id value`` line per vertex, in id order. Integers print
  as integers (BFS's unreachable depth is 9223372036854775807); floats print with the shortest
  digits that read back to the same float64 (``float(text) == value``), and infinite values as
  ``infinity``/``-infinity`` (SSSP's unreachable distance); a 2-D result (ALS factors) prints
  each vertex's row as space-separated numbers after the id. The directory holds nothing else,
  as Graphalytics' validator reads every file in it.
- :func:`results_table` (Arrow), :func:`write_parquet` and :func:`results_to_dataframe` (Spark):
  columns ``id`` (int64) and ``value`` (int64, float64, a list of float64 per vertex for 2-D
  results, or strings for other Python values).

A rewrite is atomic on local filesystems: the parts go to a hidden staging directory next to the
output, which then replaces the old directory in two renames, so the directory never mixes two
runs' part files. On object stores (no directory renames), each part object is written whole
and the previous run's surplus parts are deleted afterwards.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, NamedTuple, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from epochal.errors import EpochalError
from epochal.filesystems import join, resolve

#: the name of part file ``i``
PART_NAME = "part-{:05d}"
_PART = re.compile(r"part-\d{5}")
_SPACE, _NEWLINE, _EMPTY = (pa.scalar(text, pa.large_string()) for text in (" ", "\n", ""))


class VertexValues(Protocol):
    """What this module reads of a result: every vertex id (ascending) and its value, in the
    same order; a :class:`~epochal.graph.local.GraphResult` has them."""

    @property
    def ids(self) -> np.ndarray: ...

    @property
    def values(self) -> Any: ...


class _Masters(NamedTuple):
    """One worker's own result: its masters' ids and values."""

    ids: np.ndarray
    values: Any


class GraphOutputError(EpochalError, ValueError):
    """The output location cannot take a graph result (a file, or a directory holding other files)."""


def result_values(result: VertexValues) -> np.ndarray:
    """The result's values as a numpy array (numbers, 2-D rows of numbers, or objects)."""
    values = result.values
    if isinstance(values, np.ndarray):
        return values
    try:
        array = np.asarray(values)
    except ValueError:  # ragged sequences
        array = np.empty(0, dtype=object)
    if array.dtype.kind in "biuf":
        return array
    return np.fromiter(values, dtype=object, count=len(values))


def _number_strings(values: np.ndarray) -> pa.Array:
    """Each number of 1-D ``values`` as text (see the module docstring for the format)."""
    if values.dtype.kind == "b":
        values = values.astype(np.int64)
    text = pc.cast(pa.array(values), pa.large_string())
    if values.dtype.kind == "f" and np.isinf(values).any():
        for sign, word in ((1, "infinity"), (-1, "-infinity")):
            text = pc.if_else(pa.array(values == sign * np.inf), pa.scalar(word, pa.large_string()), text)
    return text


def _python_text(value: Any) -> str:
    """A vertex value that is not a number array, as text (sequences space-separated)."""
    if isinstance(value, list | tuple | np.ndarray):
        return " ".join(_python_text(v) for v in value)
    if isinstance(value, float | np.floating):
        return "infinity" if value == np.inf else "-infinity" if value == -np.inf else repr(float(value))
    if isinstance(value, bool | np.bool_):
        return str(int(value))
    return str(value)


def _value_strings(values: np.ndarray) -> pa.Array:
    if values.dtype.kind == "O":
        return pa.array([_python_text(v) for v in values], pa.large_string())
    if values.ndim == 2:
        return pc.binary_join_element_wise(*[_number_strings(values[:, j]) for j in range(values.shape[1])], _SPACE)
    return _number_strings(values)


def format_lines(result: VertexValues) -> pa.Array:
    """Every vertex's output line ``"<id> <value>\\n"`` (Arrow large strings, in id order)."""
    ids = pc.cast(pa.array(np.asarray(result.ids, dtype=np.int64)), pa.large_string())
    lines = pc.binary_join_element_wise(ids, _value_strings(result_values(result)), _SPACE)
    return pc.binary_join_element_wise(lines, _EMPTY, _NEWLINE)


def _text_of(lines: pa.Array) -> pa.Buffer:
    """The concatenated text of ``lines`` (a large-string array without nulls), without copying."""
    if not len(lines):
        return pa.py_buffer(b"")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)
    start, stop = int(offsets[lines.offset]), int(offsets[lines.offset + len(lines)])
    return lines.buffers()[2][start:stop]


def _write_parts(fs: pafs.FileSystem, directory: str, lines: pa.Array, parts: int) -> list[str]:
    """Write ``lines`` split into ``parts`` consecutive part files in ``directory``; their names."""
    bounds = np.linspace(0, len(lines), parts + 1).astype(np.int64)
    names = []
    for i in range(parts):
        name = PART_NAME.format(i)
        with fs.open_output_stream(join(directory, name), compression=None) as out:
            out.write(_text_of(lines.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i]))))
        names.append(name)
    return names


def _existing_parts(fs: pafs.FileSystem, path: str, location: str) -> list[str]:
    """The part files already at output ``path`` (none if absent); anything else there raises."""
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        return []
    if info.type != pafs.FileType.Directory:
        raise GraphOutputError(f"{location}: the output path is a file; give a directory (it will hold part files)")
    entries = fs.get_file_info(pafs.FileSelector(path))
    others = [e.base_name for e in entries if not _PART.fullmatch(e.base_name)]
    if others:
        raise GraphOutputError(f"{location}: the output directory holds files other than part files "
                               f"({', '.join(sorted(others)[:3])}); give a new or empty directory")
    return [e.base_name for e in entries]


def check_output_dir(output_dir: str) -> None:
    """Raise :class:`GraphOutputError` now if :func:`write_results` could not write to ``output_dir``."""
    fs, path = resolve(output_dir)
    _existing_parts(fs, path, output_dir)


def write_results(result: VertexValues, output_dir: str, *, parts: int = 1) -> list[str]:
    """Write ``result`` as Graphalytics output: ``parts`` part files in ``output_dir`` (local or a URI).

    Replaces the part files of a previous run (the directory may hold nothing else). Returns the
    paths written.
    """
    if parts < 1:
        raise GraphOutputError(f"parts must be at least 1, not {parts}")
    fs, path = resolve(output_dir)
    old = _existing_parts(fs, path, output_dir)
    lines = format_lines(result)
    if fs.type_name == "local":
        _replace_directory(fs, path, old, lines, parts)
        names = [PART_NAME.format(i) for i in range(parts)]
    else:
        fs.create_dir(path, recursive=True)
        names = _write_parts(fs, path, lines, parts)
        for name in sorted(set(old) - set(names)):
            fs.delete_file(join(path, name))
    return [join(output_dir, name) for name in names]


def _replace_directory(fs: pafs.FileSystem, path: str, old: list[str], lines: pa.Array, parts: int) -> None:
    """Write the parts into a staging directory beside ``path``, then put it in place of ``path``."""
    parent, _, name = path.rstrip("/").rpartition("/")
    token = uuid.uuid4().hex[:12]
    staging, retired = join(parent, f".{name}.staging-{token}"), join(parent, f".{name}.old-{token}")
    fs.create_dir(staging, recursive=True)
    try:
        _write_parts(fs, staging, lines, parts)
        if old or fs.get_file_info(path).type == pafs.FileType.Directory:
            fs.move(path, retired)
        try:
            fs.move(staging, path)
        except BaseException:
            if _is_dir(fs, retired):
                fs.move(retired, path)
            raise
        if _is_dir(fs, retired):
            fs.delete_dir(retired)
    finally:
        if _is_dir(fs, staging):
            fs.delete_dir(staging)


def _is_dir(fs: pafs.FileSystem, path: str) -> bool:
    return bool(fs.get_file_info(path).type == pafs.FileType.Directory)


def results_table(result: VertexValues) -> pa.Table:
    """The result as an Arrow table ``(id int64, value)``; see the module docstring for value types."""
    values = result_values(result)
    if values.dtype.kind == "O":
        column = pa.array([_python_text(v) for v in values], pa.string())
    elif values.ndim == 2:
        flat = pa.array(np.ascontiguousarray(values, dtype=np.float64).reshape(-1))
        column = pa.FixedSizeListArray.from_arrays(flat, values.shape[1]).cast(pa.list_(pa.float64()))
    else:
        column = pa.array(values.astype(np.int64) if values.dtype.kind == "b" else values)
    return pa.table({"id": pa.array(np.asarray(result.ids, dtype=np.int64)), "value": column})


def write_parquet(result: VertexValues, path: str) -> None:
    """Write the result as one Parquet file ``(id, value)`` at ``path`` (local or a URI)."""
    fs, inner = resolve(path)
    pq.write_table(results_table(result), inner, filesystem=fs)


def results_to_dataframe(result: VertexValues, spark: Any) -> Any:
    """The result as a Spark DataFrame ``(id long, value ...)`` on session ``spark``."""
    return spark.createDataFrame(results_table(result))


# -- results written by the workers (graphs loaded on the executors) ---------------------------------
#: the name of worker ``w``'s Parquet result file
WORKER_PARQUET = "part-{:05d}.parquet"


def _write_then_move(fs: pafs.FileSystem, path: str, write: Any) -> None:
    temporary = f"{path}.inprogress"
    with fs.open_output_stream(temporary, compression=None) as out:
        write(out)
    fs.move(temporary, path)


def write_worker_result(result_dir: str, text_dir: str | None, worker: int, ids: np.ndarray, values: Any) -> None:
    """A worker's own result (its masters, in id order): ``part-<w>.parquet`` in ``result_dir``
    and, with ``text_dir``, the Graphalytics part file ``part-<w>`` there; each written under a
    temporary name and renamed, so a retry replaces it whole."""
    result = _Masters(np.asarray(ids, dtype=np.int64), values)
    fs, path = resolve(result_dir)
    fs.create_dir(path, recursive=True)
    table = results_table(result)
    _write_then_move(fs, join(path, WORKER_PARQUET.format(worker)), lambda out: pq.write_table(table, out))
    if text_dir is not None:
        text_fs, text_path = resolve(text_dir)
        text_fs.create_dir(text_path, recursive=True)
        lines = format_lines(result)
        _write_then_move(text_fs, join(text_path, PART_NAME.format(worker)), lambda out: out.write(_text_of(lines)))


def publish_worker_parts(staged_dir: str, output_dir: str, workers: list[int], *, parquet: bool) -> None:
    """Put the part files of ``workers`` (the job's live workers) from ``staged_dir`` into
    ``output_dir``, replacing a previous run's parts as :func:`write_results` does (the driver
    only renames; the files were written by the workers). Parts of workers the job retired, or
    of attempts that did not finish, are left behind."""
    names = [(WORKER_PARQUET if parquet else PART_NAME).format(w) for w in workers]
    fs, path = resolve(output_dir)
    staged_fs, staged = resolve(staged_dir)
    old = [] if parquet else _existing_parts(fs, path, output_dir)
    chosen = join(staged, ".chosen")
    staged_fs.create_dir(chosen, recursive=True)
    for name in names:
        source = join(staged, name)
        if staged_fs.get_file_info(source).type == pafs.FileType.File:
            staged_fs.move(source, join(chosen, name))
    if fs.type_name == "local":
        parent = path.rstrip("/").rpartition("/")[0]
        fs.create_dir(parent, recursive=True)
        retired = join(parent, f".{path.rstrip('/').rpartition('/')[2]}.old-{uuid.uuid4().hex[:12]}")
        if old or _is_dir(fs, path):
            fs.move(path, retired)
        fs.move(chosen, path)
        if _is_dir(fs, retired):
            fs.delete_dir(retired)
        return
    fs.create_dir(path, recursive=True)
    for name in names:
        source = join(chosen, name)
        if staged_fs.get_file_info(source).type == pafs.FileType.File:
            staged_fs.move(source, join(path, name))
    for name in sorted(set(old) - set(names)):
        fs.delete_file(join(path, name))


def read_result_dir(result_dir: str) -> tuple[np.ndarray, Any]:
    """``(ids, values)`` of the Parquet result files in ``result_dir``, in id order (for small graphs)."""
    import pyarrow.dataset as pads

    fs, path = resolve(result_dir)
    table = pads.dataset(path, filesystem=fs, format="parquet").to_table()
    order = np.argsort(table.column("id").to_numpy())
    ids = table.column("id").to_numpy()[order]
    column = table.column("value")
    if pa.types.is_list(column.type):
        values: Any = np.array(column.to_pylist(), dtype=np.float64)[order]
    elif pa.types.is_string(column.type):
        values = [column.to_pylist()[i] for i in order.tolist()]
    else:
        values = column.to_numpy()[order]
    return ids, values
