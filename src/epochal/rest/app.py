"""The REST API's FastAPI application: the routes, the bearer token, the errors.

:func:`create_app` builds the application for one server's :class:`~epochal.rest.directory.JobDirectory`
and token. Every request, whatever its path (``/openapi.json`` included), must carry
``Authorization: Bearer <token>``; one without it, or with another token, gets 401 and the same
body either way (compared with :func:`hmac.compare_digest`), before any route is looked up, so
nothing about the jobs or even the paths is revealed. Reads and cancel run on the server's
event loop (they only copy under the JobMaster's lock, and a thread hop would cost more than
they do); savepoint and stop requests are plain functions, which FastAPI runs on its thread pool,
off the loop: they wait there (:data:`DECIDE_TIMEOUT` at most) until the job took the request up
or refused it.

Errors are :class:`~epochal.rest.models.Error` bodies: 400 (a savepoint target that cannot be
written, no target and no default), 404 (no such job or savepoint request), 409 (a name that
matches several jobs, listed in ``candidates``; a job that cannot take the request now: another
savepoint in progress, restarting, ended, a kind that takes none), 422 (a malformed request).
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from importlib import metadata
from typing import Any, Literal
from urllib.parse import parse_qs

from fastapi import FastAPI, Query, Request, Security
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPBearer

from epochal.control.kinds import checkpoints_of
from epochal.control.savepoints import IN_PROGRESS
from epochal.rest import dashboard, views
from epochal.rest.directory import JobDirectory, ServedJob
from epochal.rest.metrics import registry_for as metrics_registry
from epochal.rest.models import (
    CheckpointList,
    Error,
    JobAccepted,
    JobDetails,
    JobList,
    JobPlan,
    JobsOverview,
    JobSummary,
    KindTables,
    QueryableRoutes,
    SavepointReport,
    SavepointTrigger,
    StopTrigger,
    TriggerAccepted,
    VertexList,
)
from epochal.rest.names import AmbiguousJob, UnknownJob

#: Seconds a savepoint or stop request waits for the job to take it up or refuse it; after that
#: it is answered 202 (still queued, poll it), or 409 if the job ended meanwhile.
DECIDE_TIMEOUT = 10.0
#: The dashboard's cookie when the server names none (a server names it after its port).
DASHBOARD_COOKIE = "epochal_token"
#: The one body of every 401.
UNAUTHORIZED = json.dumps({"detail": "unauthorized: this API needs its bearer token "
                                     "(Authorization: Bearer <token>)", "candidates": []}).encode()

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ApiError(Exception):
    """An answer other than success: ``status`` and an :class:`Error` body."""

    def __init__(self, status: int, detail: str, candidates: list[str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.body = Error(detail=detail, candidates=candidates or [])


class BearerToken:
    """ASGI middleware: a request without the token gets 401.

    The token comes as ``Authorization: Bearer <token>`` (the API's clients, Prometheus), or as
    the dashboard's cookie (``cookie``: its name, one per server port, since browsers share
    cookies between the ports of a host). A browser gets the cookie by opening
    ``/dashboard?token=<token>`` once (the URL the driver prints): it is answered with a redirect
    to ``/dashboard/`` that sets the cookie (HttpOnly, SameSite=Strict), so the token leaves the
    address bar. A request other than GET/HEAD authorized by the cookie alone must also carry
    ``X-Epochal-Dashboard`` (the dashboard's scripts send it; a form of another site cannot)."""

    def __init__(self, app: ASGIApp, token: str, cookie: str = DASHBOARD_COOKIE) -> None:
        self.app = app
        self.token = token.encode()
        self.cookie = cookie.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope.get("path") in ("/dashboard", "/dashboard/") and b"token=" in scope.get("query_string", b""):
                await self.sign_in(scope, send)
                return
            if not self.authorized(scope):
                await refuse(send)
                return
        await self.app(scope, receive, send)

    def authorized(self, scope: Scope) -> bool:
        given, cookies, dashboard = b"", b"", False
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                given = value
            elif name == b"cookie":
                cookies = value
            elif name == b"x-epochal-dashboard":
                dashboard = True
        scheme, _, credentials = given.partition(b" ")
        # compare even when the scheme is wrong, so the time taken says nothing either
        same = hmac.compare_digest(credentials.strip(), self.token)
        if same and scheme.lower() == b"bearer":
            return True
        cookie = _cookie(cookies, self.cookie)
        if cookie is None or not hmac.compare_digest(cookie, self.token):
            return False
        return dashboard or scope.get("method") in ("GET", "HEAD")

    async def sign_in(self, scope: Scope, send: Send) -> None:
        """``/dashboard?token=...``: the right token is answered with the cookie and a redirect
        to the dashboard; any other query with 401."""
        token = parse_qs(scope["query_string"].decode("latin-1")).get("token", [""])[0].encode()
        if not hmac.compare_digest(token, self.token):
            await refuse(send)
            return
        cookie = self.cookie + b"=" + self.token + b"; Path=/; HttpOnly; SameSite=Strict"
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", b"/dashboard/"), (b"set-cookie", cookie),
                                (b"cache-control", b"no-store"), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


async def refuse(send: Send) -> None:
    """The one answer to a request without the token."""
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(UNAUTHORIZED)).encode()),
                            (b"www-authenticate", b"Bearer")]})
    await send({"type": "http.response.body", "body": UNAUTHORIZED})


def _cookie(header: bytes, name: bytes) -> bytes | None:
    """The value of cookie ``name`` in a ``Cookie`` header, or None."""
    for part in header.split(b";"):
        key, sep, value = part.strip().partition(b"=")
        if sep and key == name:
            return value
    return None


class ServerTiming:
    """ASGI middleware: every answer says how long the server took to start it, from the request's
    arrival at the application (``Server-Timing: app;dur=<ms>``): what a client's own latency
    adds on top is the network and the wait for a CPU."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                took = (time.perf_counter() - started) * 1000
                message["headers"] = [*message.get("headers", ()), (b"server-timing", f"app;dur={took:.2f}".encode())]
            await send(message)

        await self.app(scope, receive, timed)


_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": Error, "description": "no such job (by id, unique id prefix or name)"},
    409: {"model": Error, "description": "the name matches several jobs (see candidates)"},
}


def create_app(directory: JobDirectory, token: str, cookie: str = DASHBOARD_COOKIE) -> FastAPI:
    """The application serving ``directory``'s jobs to requests that carry ``token`` (or the
    dashboard's ``cookie``): the REST API, ``/metrics`` (:mod:`epochal.rest.metrics`) and the
    dashboard (:mod:`epochal.rest.dashboard`); the last two are not in the OpenAPI description."""
    try:
        version = metadata.version("epochal")
    except metadata.PackageNotFoundError:
        version = "0"
    app = FastAPI(
        title="epochal REST API", version=version, docs_url=None, redoc_url=None, openapi_url="/openapi.json",
        description="The running jobs of one epochal driver process. Every request needs the bearer token "
                    "of the job registry (see `epochal list`). A `{job_id}` may be a job id, a unique prefix "
                    "of one (4 characters or more), or a job name that names one job.",
        responses={401: {"model": Error, "description": "missing or wrong bearer token"}},
        dependencies=[Security(HTTPBearer(auto_error=False, description="the driver's token"))])
    app.add_middleware(BearerToken, token=token, cookie=cookie)
    app.add_middleware(ServerTiming)  # added last: the outermost, so a 401 is timed too

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse(error.body.model_dump(), status_code=error.status)

    def find(reference: str) -> ServedJob:
        try:
            return directory.find(reference)
        except UnknownJob as error:
            raise ApiError(404, str(error)) from None
        except AmbiguousJob as error:
            raise ApiError(409, str(error), error.candidates) from None

    @app.get("/jobs", response_model=JobList, summary="Every job of this driver and its status")
    async def list_jobs() -> JobList:
        return JobList(jobs=[JobSummary(id=j.job_id, status=j.jobmaster.status) for j in directory.jobs()])

    @app.get("/jobs/overview", response_model=JobsOverview, summary="Every job of this driver, in short")
    async def jobs_overview() -> JobsOverview:
        return JobsOverview(jobs=[views.overview(j) for j in directory.jobs()])

    @app.get("/jobs/{job_id}", response_model=JobDetails, responses=_ERRORS, summary="One job")
    async def job_details(job_id: str) -> JobDetails:
        return views.details(find(job_id))

    @app.patch("/jobs/{job_id}", response_model=JobAccepted, status_code=202,
               responses={**_ERRORS, 409: {"model": Error, "description": "ambiguous name, or the job has ended"}},
               summary="Cancel a job (mode=cancel): its workers stop, nothing is saved")
    async def cancel_job(job_id: str, mode: Literal["cancel"] = Query("cancel")) -> JobAccepted:
        served = find(job_id)
        jm = served.jobmaster
        if jm.done.is_set():
            raise ApiError(409, f"job '{jm.job_name}' (id {jm.job_id}) has ended ({jm.status.value})")
        jm.cancel("cancelled through the REST API")
        return JobAccepted(id=jm.job_id, status=jm.status)

    @app.get("/jobs/{job_id}/plan", response_model=JobPlan, responses=_ERRORS,
             summary="A job's shape: its vertices with their chained operators, and the edges between them")
    async def job_plan(job_id: str) -> JobPlan:
        return views.plan(find(job_id))

    @app.get("/jobs/{job_id}/kind", response_model=KindTables, responses=_ERRORS,
             summary="What a job kind shows of its own: a graph job's supersteps and recoveries, a CEC job's "
                     "recoveries and workers' counters")
    async def job_kind(job_id: str) -> KindTables:
        return views.kind_tables(find(job_id))

    @app.get("/jobs/{job_id}/vertices", response_model=VertexList, responses=_ERRORS,
             summary="A job's vertices: records in and out, watermarks, backpressure, per operator and subtask")
    async def job_vertices(job_id: str) -> VertexList:
        return views.vertices(find(job_id))

    @app.get("/jobs/{job_id}/checkpoints", response_model=CheckpointList, responses=_ERRORS,
             summary="A job's checkpoints and savepoints: counts, summary, latest, history")
    async def job_checkpoints(job_id: str, history: int = Query(100, ge=0, le=10_000,
                                                          description="at most this many entries, newest first")
                        ) -> CheckpointList:
        return views.checkpoints(find(job_id), history)

    @app.get("/jobs/{job_id}/queryable", response_model=QueryableRoutes, responses=_ERRORS,
             summary="Where a job's queryable states are served, and the token queries carry")
    async def job_queryable(job_id: str) -> QueryableRoutes:
        return views.queryable_routes(find(job_id))

    trigger_errors: dict[int | str, dict[str, Any]] = {
        400: {"model": Error, "description": "the target directory cannot be written, or none was given and "
                                             "the job has no default"},
        404: _ERRORS[404],
        409: {"model": Error, "description": "ambiguous name; or the job cannot take a savepoint now: another is "
                                             "in progress, it is restarting or has ended, or its kind takes none"}}

    @app.post("/jobs/{job_id}/savepoints", response_model=TriggerAccepted, status_code=202,
              responses=trigger_errors, summary="Take a savepoint while the job keeps running (asynchronous)")
    def trigger_savepoint(job_id: str, body: SavepointTrigger | None = None) -> TriggerAccepted:
        body = body or SavepointTrigger()
        return trigger(find(job_id), body.target_directory, body.format, stop=False, drain=False)

    @app.get("/jobs/{job_id}/savepoints/{request_id}", response_model=SavepointReport,
             responses={404: {"model": Error, "description": "no such job or savepoint request"},
                        409: _ERRORS[409]},
             summary="Where a savepoint request stands")
    async def savepoint_status(job_id: str, request_id: str) -> SavepointReport:
        served = find(job_id)
        status = served.jobmaster.savepoint_status(request_id)
        if status is None:
            raise ApiError(404, f"job '{served.name}' (id {served.job_id}) has no savepoint request {request_id!r}")
        if status.status != IN_PROGRESS:
            served.unread.discard(request_id)
        return views.savepoint_report(status)

    @app.post("/jobs/{job_id}/stop", response_model=TriggerAccepted, status_code=202, responses=trigger_errors,
              summary="Take a savepoint and stop the job at it (asynchronous; drain: end the sources first)")
    def stop_job(job_id: str, body: StopTrigger | None = None) -> TriggerAccepted:
        body = body or StopTrigger()
        return trigger(find(job_id), body.target_directory, "canonical", stop=True, drain=body.drain)

    registry = metrics_registry(directory)

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        """Every job's metrics in Prometheus' text format (run on the thread pool: a scrape
        copies every worker's metrics)."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    dashboard.add_routes(app)
    return app


def trigger(served: ServedJob, target: str | None, format: str, stop: bool, drain: bool) -> TriggerAccepted:
    """Ask ``served``'s JobMaster for a savepoint; wait (boundedly) until it took the request up
    or refused it, and answer accordingly (see the module docstring)."""
    jm = served.jobmaster
    who = f"job '{jm.job_name}' (id {jm.job_id})"
    if jm.done.is_set():
        raise ApiError(409, f"{who} has ended ({jm.status.value}): it takes no savepoint")
    directory = target or jm.query(lambda kind: checkpoints_of(kind).default_savepoint_dir)
    if not directory:
        raise ApiError(400, f"{who} has no default savepoint directory: give target_directory")
    status = jm.request_savepoint(directory, format, stop=stop, drain=drain)
    if not status.wait_decided(DECIDE_TIMEOUT) and jm.done.is_set() and status.refused_by is None:
        raise ApiError(409, f"{who} ended ({jm.status.value}) before it took the savepoint request")
    if status.refused_by == "target":
        raise ApiError(400, status.error or f"cannot write the savepoint to {status.location}")
    if status.refused_by == "job":
        raise ApiError(409, status.error or f"{who} cannot take a savepoint now")
    served.unread.add(status.request_id)
    return TriggerAccepted(request_id=status.request_id, location=status.location)
