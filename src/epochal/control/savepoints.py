"""The driver's side of savepoint requests: where a savepoint goes, whether it can go there, and
what became of it.

A request (``JobClient.trigger_savepoint``, ``stop_with_savepoint``, the REST API) gets a
:class:`SavepointStatus` at once: its id and the savepoint's own directory
(``<target dir>/savepoint-<job id>-<request id>``, under the job kind's default directory when
none is given). The directory is created and written to before the request goes to the JobMaster's
machine (:func:`check_writable`), so an unwritable target fails the request at once; otherwise
the status ends ``COMPLETED`` or ``FAILED`` when the machine's ``SavepointDone`` arrives. Statuses
are read from any thread (:meth:`SavepointStatus.wait`).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass, field

from epochal.filesystems import is_uri, join, resolve

IN_PROGRESS, COMPLETED, FAILED = "IN_PROGRESS", "COMPLETED", "FAILED"


@dataclass
class SavepointStatus:
    """One savepoint request: ``status`` is ``IN_PROGRESS``, ``COMPLETED`` (at ``location``) or
    ``FAILED`` (``error`` says why); ``stop``/``drain``: what was asked."""

    request_id: str
    location: str
    format: str
    stop: bool
    drain: bool
    status: str = IN_PROGRESS
    error: str | None = None
    requested_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    #: None until the job took the request up or refused it; then ``"target"`` (the directory is
    #: not writable: the caller's to fix), ``"job"`` (the job cannot take it now: another savepoint
    #: is in progress, the job is restarting or finishing, or its kind takes none) or ``""`` (taken)
    refused_by: str | None = None
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _decided: threading.Event = field(default_factory=threading.Event, repr=False)

    def end(self, location: str | None, error: str | None) -> None:
        """The request ended: completed at ``location`` or failed with ``error``."""
        self.status = FAILED if error is not None else COMPLETED
        self.error = error
        self.location = location or self.location
        self.ended_at = time.time()
        self._done.set()

    def decide(self, refused_by: str = "job") -> None:
        """The request was taken up (it is still in progress) or refused (it ended already):
        ``refused_by`` names who refused it in the second case."""
        if self.refused_by is None:
            self.refused_by = refused_by if self._done.is_set() else ""
        self._decided.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the request ended; False if ``timeout`` passed first."""
        return self._done.wait(timeout)

    def wait_decided(self, timeout: float | None = None) -> bool:
        """Wait until the job took the request up or refused it (``refused_by``); False if
        ``timeout`` passed first (it is still queued)."""
        return self._decided.wait(timeout)

    def as_dict(self) -> dict[str, object]:
        return {"request_id": self.request_id, "status": self.status, "location": self.location,
                "format": self.format, "stop": self.stop, "drain": self.drain, "error": self.error,
                "requested_at": self.requested_at, "ended_at": self.ended_at, "refused_by": self.refused_by}


def new_request(job_id: str, target_dir: str, format: str, stop: bool, drain: bool) -> SavepointStatus:
    """A request for a savepoint of job ``job_id`` in a directory of its own under ``target_dir``."""
    request_id = uuid.uuid4().hex[:12]
    if not is_uri(target_dir):  # the workers that write it have another working directory
        target_dir = os.path.abspath(target_dir)
    location = join(target_dir, f"savepoint-{job_id[:8]}-{request_id[:6]}")
    return SavepointStatus(request_id, location, format, stop, drain)


def check_writable(location: str) -> str | None:
    """Create the savepoint's directory and prove it writable; None, or what is wrong."""
    try:
        fs, path = resolve(location)
        if fs.get_file_info(path).type.name != "NotFound":
            return f"{location} exists already: a savepoint needs a directory of its own"
        fs.create_dir(path, recursive=True)
        probe = f"{path}/.writable"
        with fs.open_output_stream(probe) as out:
            out.write(b"ok")
        fs.delete_file(probe)
    except Exception as error:  # noqa: BLE001 - any storage error is the user's to fix
        return f"cannot write the savepoint to {location}: {type(error).__name__}: {error}"
    return None
