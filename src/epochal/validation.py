"""Checks of the numbers users pass to epochal: one readable :class:`PlanError` at the call.

Every numeric option goes through :func:`check_number`, so NaN, infinities, booleans, strings
and out-of-range values are refused where they are given, not found later by a misbehaving job
(``enable_checkpointing(float("nan"))`` used to trigger a checkpoint on every loop turn).
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

from epochal.errors import PlanError


def check_number(value: Any, name: str, *, minimum: float | None = 0, strict: bool = True,
                 integer: bool = False, optional: bool = False) -> None:
    """Raise :class:`PlanError` unless ``value`` is a usable number for option ``name``.

    Args:
        value: what the user passed.
        name: the option as the user knows it (``"checkpoint interval"``, ``"rate"``).
        minimum: the lower bound (``None`` for none).
        strict: the bound is exclusive (``> minimum``) when true, inclusive (``>= minimum``) otherwise.
        integer: only whole numbers (``int``, numpy integers) are accepted.
        optional: ``None`` is accepted (meaning "not set").

    Promises: on return, ``value`` is ``None`` (if ``optional``) or a finite real number (an
    integral one if ``integer``) within the bound; ``bool`` is never accepted as a number.
    """
    if value is None and optional:
        return
    kind = "a whole number" if integer else "a number"
    bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum:g}"
    wanted = f"{name} must be {kind}{bound}"
    if isinstance(value, bool) or not isinstance(value, Integral if integer else Real):
        raise PlanError(f"{wanted}, got {type(value).__name__} {value!r}")
    if not integer and not math.isfinite(value):
        raise PlanError(f"{wanted}, got {value!r} (NaN and infinity are not allowed)")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        raise PlanError(f"{wanted}, got {value!r}")
