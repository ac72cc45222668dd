"""What a graph job ships to its workers: the program, where the partitions are, the knobs.

The driver pickles one :class:`GraphDeployment` (cloudpickle: the program may be a class of the
user's script) into the JobMaster's ``Deploy`` message. Partitions are not in it: the driver
wrote one file per worker (:func:`write_partition`) under ``work_uri``, and each worker reads
only its own, at every attempt. Results go to ``output_uri`` the same way.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

from epochal.config import EngineConfig
from epochal.errors import PlanError
from epochal.filesystems import join, resolve
from epochal.graph.partition import Partition
from epochal.graph.program import VectorProgram, VertexProgram
from epochal.graph.recovery import ReplicationSettings
from epochal.plan.execution import ship_module_by_value
from epochal.runtime.host.hooks import WorkerHook
from epochal.serialization import dumps_by_value


@dataclass
class GraphDeployment:
    """Everything a graph worker needs besides its partition file."""

    job_name: str
    job_id: str
    program: VectorProgram | VertexProgram
    num_workers: int
    num_vertices: int
    #: directory holding ``partition-<w>`` files and receiving ``result-<w>`` files
    work_uri: str
    config: EngineConfig
    #: checkpoint storage root (None: no checkpoints)
    checkpoint_uri: str | None = None
    hook: WorkerHook | None = None
    #: after a restore, send every master's value to its replicas before resuming; off only in
    #: the test that shows the resync is necessary (replicas would keep their initial values)
    resync_replicas: bool = True
    #: replication fault tolerance (None: off): lost workers are recovered from replicas
    replication: ReplicationSettings | None = None
    directed: bool = True
    #: a graph loaded on the executors: workers write their results as Parquet here (and as
    #: Graphalytics text parts into ``text_dir``) instead of ``result-<w>`` for the driver
    result_dir: str | None = None
    text_dir: str | None = None


def serialize(deployment: GraphDeployment) -> bytes:
    """Pickle the deployment for the workers; a program from the user's own module (a script, a
    test) travels by value. Raises :class:`PlanError` naming the program if it cannot be pickled."""
    program = deployment.program
    ship_module_by_value(type(program))
    try:
        return dumps_by_value(deployment)
    except Exception as error:
        raise PlanError(f"the vertex program {type(program).__name__} cannot be shipped to the workers: "
                        f"{type(error).__name__}: {error}. Programs must be picklable by cloudpickle: create "
                        "clients, files and locks inside compute, not in the program's attributes") from error


def _write(uri: str, data: bytes) -> None:
    fs, path = resolve(uri)
    with fs.open_output_stream(path) as out:
        out.write(data)


def _read(uri: str) -> Any:
    fs, path = resolve(uri)
    with fs.open_input_stream(path) as source:
        return pickle.loads(source.read())


def partition_uri(work_uri: str, worker: int) -> str:
    return join(work_uri, f"partition-{worker}")


def result_uri(work_uri: str, worker: int) -> str:
    return join(work_uri, f"result-{worker}")


def write_partition(work_uri: str, part: Partition) -> None:
    _write(partition_uri(work_uri, part.worker), pickle.dumps(part, protocol=5))


def read_partition(work_uri: str, worker: int) -> Partition:
    part: Partition = _read(partition_uri(work_uri, worker))
    return part


def write_result(work_uri: str, worker: int, ids: Any, values: Any) -> None:
    """One worker's output, written under a temporary name and renamed (a retry replaces it)."""
    fs, path = resolve(result_uri(work_uri, worker))
    temporary = f"{path}.inprogress"
    with fs.open_output_stream(temporary) as out:
        out.write(pickle.dumps({"ids": ids, "values": values}, protocol=5))
    fs.move(temporary, path)


def read_result(work_uri: str, worker: int) -> dict[str, Any]:
    result: dict[str, Any] = _read(result_uri(work_uri, worker))
    return result
