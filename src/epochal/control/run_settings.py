"""Settings a job script takes from its environment when it does not set them itself.

``epochal run SCRIPT.py --restore PATH --parallelism N --master URL`` (Flink's ``flink run -s
PATH -p N``) runs an unchanged script with these environment variables set; the script's own
choices win:

- ``EPOCHAL_PARALLELISM``: the default parallelism of an ``Environment()`` created without one;
- ``EPOCHAL_MASTER``: the Spark master of an ``Environment`` given neither ``spark`` nor ``master``;
- ``EPOCHAL_RESTORE_FROM``: the savepoint or checkpoint every ``execute``/``execute_async``
  called without ``restore_from`` restores (dataflow jobs; a CEC job ignores it);
- ``EPOCHAL_ALLOW_NON_RESTORED_STATE`` (``1``): with ``EPOCHAL_RESTORE_FROM``, skip state no
  operator claims instead of failing.
"""

from __future__ import annotations

import os

from epochal.config import env_flag, env_int

PARALLELISM_ENV = "EPOCHAL_PARALLELISM"
MASTER_ENV = "EPOCHAL_MASTER"
RESTORE_FROM_ENV = "EPOCHAL_RESTORE_FROM"
ALLOW_NON_RESTORED_STATE_ENV = "EPOCHAL_ALLOW_NON_RESTORED_STATE"
#: The parallelism of an ``Environment()`` when neither the script nor the environment gives one.
DEFAULT_PARALLELISM = 2


def parallelism() -> int:
    """``EPOCHAL_PARALLELISM``, else :data:`DEFAULT_PARALLELISM`."""
    return env_int(PARALLELISM_ENV, DEFAULT_PARALLELISM)


def master() -> str | None:
    return os.environ.get(MASTER_ENV) or None


def restore(restore_from: str | None, allow_non_restored_state: bool) -> tuple[str | None, bool]:
    """The restore a job call asked for, else the one of the environment (with its own
    ``EPOCHAL_ALLOW_NON_RESTORED_STATE``)."""
    if restore_from is not None:
        return restore_from, allow_non_restored_state
    given = os.environ.get(RESTORE_FROM_ENV) or None
    if given is None:
        return None, allow_non_restored_state
    return given, allow_non_restored_state or env_flag(ALLOW_NON_RESTORED_STATE_ENV, False)
