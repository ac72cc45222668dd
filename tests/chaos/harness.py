"""The run every chaos test shares: checkpoints every 0.2 s, one restart per planned fault,
an exactly-once file sink, and the committed lines read back as a multiset."""

from __future__ import annotations

import collections
from collections.abc import Callable

from epochal.connectors.files import read_committed_lines
from epochal.control.restart import FixedDelayRestart


def run_with_faults(make_env, tmp_path, parallelism: int, faults: list, build: Callable[..., None],
                    name: str, mode: str = "exactly_once", **config):
    """``build(env, out_dir)`` adds the job; returns the JobResult and the committed lines."""
    env = make_env(parallelism, **config)
    env.enable_checkpointing(0.2, mode=mode, storage=str(tmp_path / "checkpoints"))
    env.set_restart_strategy(FixedDelayRestart(attempts=len(faults) + 1, delay=0.2))
    out = tmp_path / "out"
    build(env, out)
    result = env.execute(name, timeout=400, faults=faults)
    return result, collections.Counter(read_committed_lines(str(out)))
