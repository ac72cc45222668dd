"""Where a CEC worker's time goes: cProfile inside one worker of a running job.

:class:`ProfileHook` is a :class:`~epochal.runtime.host.hooks.WorkerHook` (the deployment's hook,
normally the fault injector): it asks worker ``worker`` for the ``records`` point, which the
worker reaches on its processing thread after every input batch; the first time, it starts a
``cProfile.Profile`` on that thread, and after ``seconds`` it stops. The statistics so far are
written to ``path`` (pstats format) every half second and at the stop, so a job shorter than
``seconds`` leaves its profile too. The worker's processing thread is what is profiled (its
input, the window aggregate, pickling of frames, the own sink); the log writer thread is not.
:func:`profiled` installs the hook for the jobs started inside a ``with`` block (in place of
the fault injector: no faults are injected meanwhile). Instrumentation only: nothing in
``src/`` changes.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ProfileHook:
    worker: int
    path: str
    seconds: float = 8.0
    _state: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def points(self, worker: int, job_attempt: int, incarnation: int = 0) -> frozenset[str]:
        return frozenset({"records"}) if worker == self.worker and incarnation == 0 else frozenset()

    def reached(self, at: Any) -> None:
        state = self._state
        if state.get("done"):
            return
        now = time.monotonic()
        if "profile" not in state:
            state["profile"] = cProfile.Profile()
            state["until"] = now + self.seconds
            state["dumped"] = now
            state["profile"].enable()
        elif now >= state["until"] or now >= state["dumped"] + 0.5:
            profile = state["profile"]
            profile.disable()
            profile.dump_stats(self.path)
            state["dumped"] = now
            if now >= state["until"]:
                state["done"] = True
            else:
                profile.enable()


@contextmanager
def profiled(worker: int, path: str, seconds: float) -> Iterator[ProfileHook]:
    """Jobs of the ``cec`` kind started in this block profile worker ``worker`` (see the module
    docstring)."""
    import sys

    import cloudpickle

    from epochal.cec import job

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    hook = ProfileHook(worker, path, seconds)
    original = job.FaultInjector
    job.FaultInjector = type("_Hooked", (), {"of": staticmethod(lambda faults: hook)})
    try:
        yield hook
    finally:
        job.FaultInjector = original


def top(path: str, lines: int = 25, sort: str = "tottime") -> str:
    """The ``lines`` costliest functions of a profile, as pstats prints them."""
    out = io.StringIO()
    pstats.Stats(path, stream=out).sort_stats(sort).print_stats(lines)
    return out.getvalue()
