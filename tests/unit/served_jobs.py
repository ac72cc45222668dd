"""Jobs served over REST without Spark, for the REST API's and the command line's unit tests:
real JobMasters whose Spark job is not submitted (cancelling reports it ended), served by the real
server of epochal.rest.server, registered in a registry under the test's own EPOCHAL_HOME."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator

from epochal.config import CheckpointConfig, EngineConfig
from epochal.control.jobmaster import JobMaster
from epochal.control.kinds import KindCoordinator
from epochal.dataflow.checkpointing.coordinator import CheckpointCoordinator
from epochal.dataflow.coordination import DataflowCoordination
from epochal.rest import server as rest_server
from epochal.rest.outline import JobOutline, OperatorOutline, VertexOutline
from epochal.state.storage import CheckpointStorage

OUTLINE = JobOutline("dataflow", 2, (
    VertexOutline(0, "Source: generator -> Map", 2, (OperatorOutline("source", "Source: generator"),
                                                     OperatorOutline("map-1", "Map"))),
    VertexOutline(1, "Sum -> Sink", 2, (OperatorOutline("sum", "Sum"), OperatorOutline("sink", "Sink")))))


@contextlib.contextmanager
def served_jobs(tmp_path) -> Iterator[Callable[..., JobMaster]]:
    """Yields ``start(name, checkpoints=False, outline=OUTLINE, kind=None)``: a served job of 2 workers (of
    ``kind``'s coordination; None: a dataflow job's) that are not there
    yet (the caller sets EPOCHAL_HOME). Every job is cancelled at the end, and the server waited
    for until it stopped."""
    started: list[JobMaster] = []
    idle, rest_server.IDLE_S = rest_server.IDLE_S, 0.0  # the server stops as its last job ends

    def start(name: str, checkpoints: bool = False, outline: JobOutline = OUTLINE,
              kind: KindCoordinator | None = None) -> JobMaster:
        coordinator = None
        if checkpoints:
            config = CheckpointConfig(interval=3600.0, storage=str(tmp_path / "chk"), savepoint_dir="")
            coordinator = CheckpointCoordinator(config, CheckpointStorage(str(tmp_path / "chk" / name)), name,
                                                {(0, 0): "v", (0, 1): "v"}, {0: 2}, 128)
        jm = JobMaster(name, uuid.uuid4().hex[:12], b"deployment", 2, EngineConfig(cancel_timeout=0.5), b"\0" * 32,
                       "127.0.0.1", kind or DataflowCoordination(2, coordinator), submit_spark_job=lambda jm: None,
                       cancel_spark_job=lambda: jm.spark_finished(None, None))
        started.append(jm)

        def launch() -> JobMaster:
            jm.start()
            return jm

        return rest_server.serve(jm.config, outline, launch)

    yield start
    for jm in started:
        jm.cancel()
        assert jm.done.wait(10)
    deadline = time.monotonic() + 10
    try:
        while rest_server.running_servers():  # no job left: the server stops (the next test starts its own)
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        rest_server.IDLE_S = idle
