"""User-facing function types and the context a running function sees.

Most operators take plain callables (``map(str.upper)``). :class:`ProcessFunction` is the
general one: it sees each record with a context (the current key on keyed streams, its subtask)
and may emit any number of records. Subclass it when a function needs set-up (``open``) or
tear-down (``close``), e.g. a connection to a lookup service.

Defined in :mod:`epochal.runtime.operators.functions` (workers run them and never import ``epochal.api``);
exported here and from ``epochal``.
"""

from __future__ import annotations

from epochal.runtime.operators.functions import ProcessContext, ProcessFunction, RuntimeContext, as_process_function

__all__ = ["ProcessContext", "ProcessFunction", "RuntimeContext", "as_process_function"]
