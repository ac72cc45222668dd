"""Where the benchmarks' results go and how they are written: the results directory, CSV files
with a header (written whole, written a row at a time, read back), the plots' matplotlib, colours
and saving, and the one-line descriptions of the machine printed beside the numbers.

Two ways to write a CSV, as the benchmarks always have: :func:`write_csv` formats every float
(6 decimals, tiny ones in e-notation, NaN as an empty cell), :func:`write_rows` writes the values
as Python's :mod:`csv` module does (``str`` of each).
"""

from __future__ import annotations

import csv
import os
import subprocess
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: The repository root.
ROOT = Path(__file__).resolve().parents[2]
#: The default results directory, relative to where a benchmark runs (the repository root).
RESULTS = Path("benchmarks/results")

#: The plots' colours (matplotlib's "deep" palette, which the plots have always used).
BLUE, ORANGE, GREEN, RED, GREY = "#4c72b0", "#dd8452", "#55a868", "#c44e52", "#999999"


# ---------------------------------------------------------------------------------------------- CSV
def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Rows (dicts) as CSV, columns in the order of first appearance (see :func:`_cell`)."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in row.items()})


def _cell(value: Any) -> Any:
    """A CSV cell: NaN empty, floats to 6 decimals (tiny ones such as relative errors in e-notation)."""
    if isinstance(value, float):
        if value != value:
            return ""
        return f"{value:.6f}" if value == 0 or abs(value) >= 1e-3 else f"{value:.3e}"
    return value


def write_rows(path: Path | str, rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, *,
               ignore_extra: bool = False) -> None:
    """Rows (dicts) as CSV, each value as Python's :mod:`csv` writes it; ``columns``: the header
    (default: every key, in the order of first appearance); ``ignore_extra``: keys not in
    ``columns`` are left out (else they are an error)."""
    if columns is None:
        columns = list({key: None for row in rows for key in row})
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore" if ignore_extra else "raise")
        writer.writeheader()
        writer.writerows(rows)


@contextmanager
def csv_lines(path: Path, header: Sequence[str]) -> Iterator[Callable[[Sequence[Any]], None]]:
    """Write a CSV a row at a time: ``with csv_lines(path, header) as write: write([...])``; each
    row is on disk as soon as it is written (a long benchmark's rows survive its interruption)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)

        def write(row: Sequence[Any]) -> None:
            writer.writerow(row)
            handle.flush()

        yield write


def read_csv(path: Path) -> list[dict[str, Any]]:
    """The rows of a CSV :func:`write_csv` wrote, numbers and booleans parsed back."""
    with path.open(newline="") as handle:
        return [{k: _parsed(v) for k, v in row.items()} for row in csv.DictReader(handle)]


def _parsed(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def number(value: float, digits: int = 0) -> str:
    """A number for a table: thousands separated, ``digits`` decimals; ``-`` for NaN."""
    return "-" if value != value else f"{value:,.{digits}f}"


# -------------------------------------------------------------------------------------------- plots
def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path | str, dpi: int = 120) -> None:
    """Lay the figure out tightly, write it to ``path`` (PNG) and close it."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)


def error_bars(summaries: Iterable[tuple[float, float, float]]) -> tuple[list[float], list[list[float]]]:
    """The bar heights and matplotlib's ``yerr`` of (median, min, max) triples: medians with
    min-max error bars."""
    triples = list(summaries)
    return ([m for m, _, _ in triples], [[m - low for m, low, _ in triples], [high - m for m, _, high in triples]])


# -------------------------------------------------------------------------------------- the machine
def machine() -> str:
    """One line describing this machine (CPUs, memory, Python)."""
    import platform

    import psutil

    return (f"{os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
            f"{platform.system()} {platform.release()}, {platform.python_implementation()} "
            f"{platform.python_version()}")


def uptime() -> str:
    """What ``uptime`` prints now (the load averages beside the time)."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def failure(error: BaseException) -> str:
    """A failed run's status: ``error: <type>: <first line of the message>``."""
    first = (str(error).strip().splitlines() or [""])[0][:200]
    return f"error: {type(error).__name__}: {first}"
