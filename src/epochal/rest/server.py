"""One REST server per driver process, in a thread of its own, serving every job of the process.

:func:`serve` is how a job kind's ``job`` module starts a job served over HTTP: it makes sure a
server runs for the job's ``EngineConfig.rest_host``/``rest_port`` (binding the port before the
job starts, so a port in use fails the job at once and not after it started), starts the job,
adds it to the server's :class:`~epochal.rest.directory.JobDirectory` and writes its entry in the
per-user registry (:mod:`epochal.control.job_registry`). Every job asking for the same host and port
shares one server, and its token (32 random bytes from :mod:`secrets`).

The server is uvicorn running the FastAPI application of :mod:`epochal.rest.app` on an event loop
in a daemon thread (``epochal-rest``); it touches a JobMaster only through its query methods. A
second thread (``epochal-rest-jobs``) notices jobs that ended, removes their registry entries,
and stops the server once it served no running job for :data:`IDLE_S` (so a script or test
session running jobs one after another keeps one server), and longer, up to :data:`LINGER_S`,
while a savepoint or stop requested through the API has ended and no client has read how (the
``epochal stop`` that is polling for it). At interpreter exit the same linger applies, then
every entry of this process is removed and every server stopped.
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable

from epochal.config import EngineConfig
from epochal.control.job_registry import Registry, RegistryEntry
from epochal.control.jobmaster import JobMaster
from epochal.errors import EnvironmentSetupError
from epochal.rest.directory import JobDirectory, ServedJob
from epochal.rest.outline import JobOutline

_log = logging.getLogger("epochal.rest")

#: Seconds a server (or the exiting process) keeps serving, once no job runs, while a client has
#: not yet read the outcome of a savepoint or stop it requested.
LINGER_S = 5.0
#: Seconds a server without running jobs keeps serving, for the next job of the process.
IDLE_S = 30.0
#: Seconds between the job thread's looks at the jobs.
POLL_S = 0.2


class RestServer:
    """uvicorn serving one :class:`JobDirectory` on ``host``:``port`` (0: a free port)."""

    def __init__(self, host: str, port: int) -> None:
        import uvicorn

        from epochal.rest.app import create_app

        self.token = secrets.token_urlsafe(32)
        self.directory = JobDirectory()
        self.socket = _bind(host, port)
        bound = self.socket.getsockname()
        self.host = host
        self.port: int = bound[1]
        #: how a client on this machine reaches it (``host:port``)
        self.address = f"{_connectable(host)}:{self.port}"
        #: jobs being started to be served here (the server is not stopped meanwhile)
        self.pending = 0
        self.stopped = False
        #: the dashboard's cookie: one per port, as browsers share a host's cookies between its ports
        self.cookie = f"epochal_token_{self.port}"
        config = uvicorn.Config(create_app(self.directory, self.token, self.cookie), log_config=None,
                                log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self.socket]},
                                        name="epochal-rest", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def dashboard_url(self, job_id: str = "") -> str:
        """The dashboard (a job's page when ``job_id`` is given), with the token that opens it."""
        return f"{self.url}/dashboard?token={self.token}" + (f"#/jobs/{job_id}" if job_id else "")

    def start(self, timeout: float = 10.0) -> None:
        """Start serving; raises :class:`EnvironmentSetupError` if it did not within ``timeout``."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._server.should_exit = True
                raise EnvironmentSetupError(f"the REST server on {self.address} did not start")
            time.sleep(0.01)

    @property
    def alive(self) -> bool:
        """Whether its thread still runs (it may be stopping)."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        self.stopped = True
        self._server.should_exit = True
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self.socket.close()


def prepare() -> None:
    """Pay now what starting the process's first server costs (seconds: importing uvicorn and
    FastAPI, and FastAPI's first routes, which import more), so that a job submitted later (an HA
    standby's at its takeover) does not wait for it. Builds one app and drops it."""
    import uvicorn  # noqa: F401

    from epochal.rest.app import create_app

    create_app(JobDirectory(), secrets.token_urlsafe(8), "epochal_prepare")


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port``, or :class:`EnvironmentSetupError` saying why not."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(128)
        except OSError:
            sock.close()
            raise
    except OSError as error:
        raise EnvironmentSetupError(
            f"the REST API cannot listen on {host}:{port}: {error}. Choose another rest_port (0 picks a free "
            "one; environment variable EPOCHAL_REST_PORT), or turn the REST API off (rest_enabled=False or "
            "EPOCHAL_REST=off)") from error
    sock.set_inheritable(False)
    return sock


def _connectable(host: str) -> str:
    """How a client on this machine names ``host`` (a wildcard address: the loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


# ---------------------------------------------------------------------- the process's servers
_lock = threading.Lock()
_servers: dict[tuple[str, int], RestServer] = {}
#: every server started, until it is gone (for :func:`running_servers`)
_started: weakref.WeakSet[RestServer] = weakref.WeakSet()
_at_exit_registered = False


def serve(config: EngineConfig, outline: JobOutline, start: Callable[[], JobMaster]) -> JobMaster:
    """Start a job with ``start`` (``control.launch.launch``) and serve it over REST as ``config``
    says; returns its JobMaster. With ``config.rest_enabled`` False only starts it.

    Raises :class:`EnvironmentSetupError` before the job starts if the server cannot listen."""
    if not config.rest_enabled:
        return start()
    server = _acquire(config.rest_host, config.rest_port)
    try:
        jobmaster = start()
        served = ServedJob(jobmaster, outline)
        registered = _register(server, served)  # before its server's job thread can see it end
        server.directory.add(served)
    finally:
        with _lock:
            server.pending -= 1
    _log.info("job '%s' (id %s) is served at %s%s", jobmaster.job_name, jobmaster.job_id, server.url,
              f" (token in {registered})" if registered else "")
    jobmaster.dashboard_url = server.dashboard_url(jobmaster.job_id)
    if _interactive():
        print(f"epochal: job '{jobmaster.job_name}' (id {jobmaster.job_id}): dashboard {jobmaster.dashboard_url}",
              file=sys.stderr, flush=True)
    return jobmaster


def _interactive() -> bool:
    """Whether the driver's standard error is a terminal (a person runs it): then the dashboard's
    URL is printed there (``JobClient.dashboard_url`` and ``epochal dashboard`` give it anyway)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _acquire(host: str, port: int) -> RestServer:
    """The running server for ``host``:``port``, else a new one (started, with its job thread)."""
    global _at_exit_registered
    with _lock:
        server = _servers.get((host, port))
        if server is None or server.stopped:
            server = RestServer(host, port)
            server.start()
            _servers[(host, port)] = server
            _started.add(server)
            threading.Thread(target=_watch, args=(server, (host, port)), name="epochal-rest-jobs",
                             daemon=True).start()
            if not _at_exit_registered:
                atexit.register(_at_exit)
                _at_exit_registered = True
        server.pending += 1
        return server


def _register(server: RestServer, served: ServedJob) -> str:
    """Write ``served``'s registry entry (and remember which registry: the one removing it must be
    the same, whatever ``EPOCHAL_HOME`` says by then); the registry's path, or "" if it could not
    be written (the job runs and is served all the same; the command line will not find it)."""
    registry = Registry()
    jm = served.jobmaster
    try:
        registry.add(RegistryEntry(jm.job_id, jm.job_name, served.outline.kind, server.address, server.token,
                                   os.getpid(), jm.start_time))
    except OSError as error:
        _log.warning("job '%s' (id %s) is served at %s, but the job registry %s cannot be written (%s): the "
                     "epochal command line will not find it", jm.job_name, jm.job_id, server.url,
                     registry.path, error)
        return ""
    served.registry = registry
    return str(registry.path)


def _unregister(jobs: list[ServedJob]) -> None:
    for served in jobs:
        registry, served.registry = served.registry, None
        if registry is None:
            continue
        try:
            registry.remove(served.job_id, pid=os.getpid())
        except OSError as error:  # entries of a dead process are dropped by the next change anyway
            _log.warning("cannot remove job %s from the job registry %s: %s", served.job_id, registry.path, error)


def _watch(server: RestServer, key: tuple[str, int]) -> None:
    """The server's job thread: unregister jobs that ended; stop the server once none runs (see
    the module docstring)."""
    idle_since: float | None = None
    while not server.stopped:
        time.sleep(POLL_S)
        jobs = server.directory.jobs()
        _unregister([j for j in jobs if not j.running])
        if any(j.running for j in jobs) or server.pending:
            idle_since = None
            continue
        now = time.monotonic()
        idle_since = idle_since if idle_since is not None else now
        if now - idle_since < max(IDLE_S, LINGER_S if server.directory.unread_outcomes() else 0.0):
            continue
        with _lock:
            if server.pending or any(j.running for j in server.directory.jobs()):
                continue
            if _servers.get(key) is server:
                del _servers[key]
            server.stopped = True
        server.stop()


def _at_exit() -> None:
    """The process exits: linger for unread outcomes, unregister every job, stop every server."""
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    deadline = time.monotonic() + LINGER_S
    while any(s.directory.unread_outcomes() for s in servers) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    _unregister([j for s in servers for j in s.directory.jobs()])
    for server in servers:
        server.stop(timeout=1.0)


def running_servers() -> list[RestServer]:
    """The servers of this process whose thread still runs, stopping or not (for tests and benchmarks)."""
    with _lock:
        return [s for s in _started if s.alive]
