"""The checkpoint baseline's files (Imitator-CKPT, papers/003 §2.2-2.3): incremental vertex state.

At the global barrier of every k-th superstep each worker writes one file: the state of the
masters that changed since its last checkpoint (only what changed, no messages for vector
programs, whose replicas are rebuilt from the masters), or of all masters when the barrier asks
for a full one. A checkpoint of superstep *n* is complete when every worker wrote its file; its
metadata (``chk-n/_metadata`` in the job's checkpoint storage) lists, per worker, the *chain*:
the last full file and every delta after it, oldest first. Restoring applies a worker's chain in
order. Files are pickled dicts of numpy arrays, checksummed by the storage; the partition's
topology is not in them (the driver wrote each partition once, at load).
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from epochal.state.storage import CheckpointStorage

#: Metadata ``kind`` of a graph checkpoint.
KIND = "graph"


def file_name(worker: int) -> str:
    return f"worker-{worker}"


def encode(delta: dict[str, Any]) -> bytes:
    return pickle.dumps(delta, protocol=5)


def read_chain(storage: CheckpointStorage, chain: list[list[Any]]) -> list[dict[str, Any]]:
    """The files of one worker's chain (``[checkpoint id, handle]`` pairs), oldest first, each
    verified against its checksum."""
    return [pickle.loads(storage.read_file(int(cid), handle)) for cid, handle in chain]


def vector_state(files: list[dict[str, Any]], num_masters: int) -> tuple[np.ndarray, np.ndarray]:
    """A vector program's master values and last-changed flags after applying ``files`` in order."""
    first = files[0]
    values = np.zeros((num_masters, *np.asarray(first["values"]).shape[1:]), dtype=np.asarray(first["values"]).dtype)
    for delta in files:
        values[delta["slots"]] = delta["values"]
    return values, files[-1]["changed"]


def vertex_state(files: list[dict[str, Any]], num_masters: int) -> tuple[list[Any], np.ndarray, dict[int, Any]]:
    """A vertex program's values, halted flags and pending messages after applying ``files``."""
    values: list[Any] = [None] * num_masters
    for delta in files:
        for slot, value in zip(delta["slots"].tolist(), delta["values"], strict=True):
            values[slot] = value
    return values, files[-1]["halted"], files[-1]["inbox"]


def metadata(superstep: int, aggregates: dict[str, Any], chains: dict[int, list[list[Any]]],
             job_name: str) -> dict[str, Any]:
    """The metadata of the complete checkpoint of ``superstep`` (JSON: ids and handles only)."""
    plain = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in aggregates.items()}
    return {"kind": KIND, "job": job_name, "superstep": superstep, "aggregates": plain,
            "workers": {str(w): chain for w, chain in chains.items()}}
