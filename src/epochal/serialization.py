"""How records and state become bytes: pickle, with cloudpickle where pickle cannot.

Plain pickle is fast, but it pickles classes by reference: a record or state value whose class
was defined in the user's own script (shipped to the executors by value with the job) names a
class that the receiving process cannot look up, so pickle refuses it. cloudpickle writes such
classes (and lambdas) by value; its output is an ordinary pickle stream, so every reader keeps
using ``pickle.loads``. The fallback costs a second attempt only for what pickle refused.
"""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

PICKLE_PROTOCOL = 5


def dumps(obj: Any) -> bytes:
    """``obj`` as bytes ``pickle.loads`` reads back.

    Raises whatever cloudpickle raises for an object neither can serialise (a generator, a
    lock, an open file): the caller names the record or state in its error."""
    try:
        return pickle.dumps(obj, protocol=PICKLE_PROTOCOL)
    except Exception:
        return cloudpickle.dumps(obj, protocol=PICKLE_PROTOCOL)


loads = pickle.loads
