"""How records, state and user code become bytes: pickle, with cloudpickle where pickle cannot.

Plain pickle is fast, but it pickles classes by reference: a record or state value whose class
was defined in the user's own script (shipped to the executors by value with the job) names a
class that the receiving process cannot look up, so pickle refuses it. cloudpickle writes such
classes (and lambdas) by value; its output is an ordinary pickle stream, so every reader keeps
using ``pickle.loads``. The fallback costs a second attempt only for what pickle refused.

Code travels with its file names. cloudpickle (3.1.3 on) writes every code object's
``co_filename`` as ``"<dynamic-code>"`` to make its payloads deterministic; a user function that
fails on a worker would then show a traceback that names no file. :func:`dumps_by_value`
writes code objects with :mod:`marshal` instead (the format of ``.pyc`` files, which keeps file
names, line tables and nested code), and everything else as cloudpickle does. Like
cloudpickle's own, the result loads only in the same Python minor version (Spark requires the
same on driver and executors).
"""

from __future__ import annotations

import io
import marshal
import pickle
import types
from collections import ChainMap
from typing import Any

import cloudpickle

PICKLE_PROTOCOL = 5

_CLOUDPICKLE_CODE_REDUCER = cloudpickle.Pickler.dispatch_table[types.CodeType]


def _reduce_code(code: types.CodeType) -> tuple[Any, ...]:
    """A code object as ``marshal.loads(bytes)``: file name, lines and nested code kept."""
    try:
        return marshal.loads, (marshal.dumps(code),)
    except ValueError:  # a constant marshal cannot write (only code built by hand has one)
        return _CLOUDPICKLE_CODE_REDUCER(code)


class _Pickler(cloudpickle.Pickler):
    dispatch_table = ChainMap({types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table)


def dumps_by_value(obj: Any) -> bytes:
    """``obj`` as cloudpickle writes it (functions and classes of the user's own code by value),
    except that code objects keep their file names, so tracebacks on the workers name the
    user's files and lines. ``pickle.loads`` reads it back. Raises what cloudpickle raises for
    an object it cannot serialise."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=PICKLE_PROTOCOL).dump(obj)
    return buffer.getvalue()


def dumps(obj: Any) -> bytes:
    """``obj`` as bytes ``pickle.loads`` reads back.

    Raises whatever cloudpickle raises for an object neither can serialise (a generator, a
    lock, an open file): the caller names the record or state in its error."""
    try:
        return pickle.dumps(obj, protocol=PICKLE_PROTOCOL)
    except Exception:
        return dumps_by_value(obj)


loads = pickle.loads
