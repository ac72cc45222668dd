"""A user function's traceback, taken on a worker and shown on the driver as a local one would be.

A worker keeps the user's frames of an exception (epochal's own frames are left out) as
:class:`UserFrame` values: file, line number, function and, where the worker can read the file,
its source line. The driver formats them (:meth:`UserTraceback.format`) and fills each source
line the worker could not read from its own ``linecache``: on a cluster the executors do not
have the user's script, the driver does; a notebook cell has no file at all, but IPython keeps
its source in the driver's ``linecache`` and the frame is named as IPython names it
(``Cell In[3], line 5``). Code shipped to the workers keeps its file names
(:func:`epochal.serialization.dumps_by_value`), which is what makes the frames point somewhere.
"""

from __future__ import annotations

import linecache
import os
import sys
import traceback
from dataclasses import dataclass

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True, slots=True)
class UserFrame:
    """One frame of a user function's traceback (``line`` is empty where the worker had no source)."""

    filename: str
    lineno: int
    name: str
    line: str = ""


@dataclass(frozen=True, slots=True)
class UserTraceback:
    """The user's frames of an exception, innermost last, and the exception's own lines."""

    frames: tuple[UserFrame, ...]
    exception: str

    @classmethod
    def of(cls, error: BaseException) -> UserTraceback:
        """``error``'s traceback without epochal's own frames (take it where ``error`` was caught)."""
        frames = tuple(UserFrame(f.filename, f.lineno or 0, f.name, (f.line or "").strip())
                       for f in traceback.extract_tb(error.__traceback__)
                       if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR))
        return cls(frames, "".join(traceback.format_exception_only(type(error), error)))

    def format(self) -> str:
        """The traceback as Python prints it: each frame's file (or notebook cell), line,
        function and source line (this process's source where the frame came without one)."""
        lines = ["Traceback (most recent call last):\n"] if self.frames else []
        for frame in self.frames:
            source = frame.line or linecache.getline(frame.filename, frame.lineno).strip()
            cell = _notebook_cell(frame.filename)
            where = f"{cell}, line {frame.lineno}" if cell else f'File "{frame.filename}", line {frame.lineno}'
            lines.append(f"  {where}, in {frame.name}\n")
            if source:
                lines.append(f"    {source}\n")
        lines.append(self.exception)
        return "".join(lines)


def _notebook_cell(filename: str) -> str | None:
    """``Cell In[n]`` for a file name IPython gave a cell of this process's notebook, else None."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        shell = ipython.get_ipython()
        count = shell.compile._filename_map.get(filename) if shell is not None else None
    except AttributeError:  # another IPython version: show the file name it gave the cell
        return None
    return f"Cell In[{count}]" if isinstance(count, int) else None
