"""What the DataStream API checks and builds from user arguments: functions and fields.

``Field`` is how aggregations name a record's value: a function of the record, a field name
(dict key or attribute), a tuple index, or None for the record itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from epochal.errors import PlanError
from epochal.runtime.operators.aggregates import get_field


def check_callable(fn: Any, what: str) -> None:
    if not callable(fn):
        raise PlanError(f"{what}() takes a function, got {type(fn).__name__}: {fn!r}")


#: How aggregations name a record's value: a function of the record, a field name (dict key or
#: attribute), a tuple index, or None for the record itself.
Field = Callable[[Any], Any] | str | int | None


def check_field(field: Any, method: str) -> str | int:
    """A field name or tuple index for ``method``, or a :class:`PlanError` at plan time."""
    if isinstance(field, bool) or not isinstance(field, (str, int)):
        raise PlanError(f"{method}() takes a field name (str), a tuple index (int) or a function of the record, "
                        f"got {type(field).__name__}: {field!r}")
    return field


def field_getter(field: Any, method: str) -> Callable[[Any], Any]:
    if callable(field):
        return field
    return functools.partial(get_field, field=check_field(field, method))
