"""Routing queries of queryable state: which worker holds a key of a state, as the JobMaster says.

:func:`routes_of` reads a JobMaster (its workers' registrations and heartbeats) into the document
``GET /jobs/{job_id}/queryable`` serves; :class:`Routes` is that document on the client's side,
and :meth:`Routes.owner` routes a key: its key group (the same hash the job's ``key_by`` uses),
the subtask owning the group at the state's parallelism, the worker serving that subtask. Pure:
no sockets, no clock. After a restart or a rescale the client reads the routes again (a worker
answers ``not_owner`` for a key it does not hold, and a connection to a lost worker fails).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from epochal.errors import QueryKeyTypeError, StateUnavailableError, UnknownQueryableStateError
from epochal.plan.keygroups import key_group_of


def routes_of(jobmaster: Any) -> dict[str, Any]:
    """The routes document of ``jobmaster``'s job (see :class:`epochal.rest.models.QueryableRoutes`)."""
    attempt = jobmaster.attempt
    metrics = jobmaster.snapshot_metrics()
    infos = jobmaster.worker_infos()
    max_parallelism = None
    states: dict[str, dict[str, Any]] = {}
    local_sockets: dict[str, dict[str, str]] = {}
    reported = 0
    for worker, reports in sorted(metrics.items()):
        if not reports:  # no heartbeat yet
            continue
        reported += 1
        queryable = reports.get("queryable")  # (none: the worker holds no keyed state)
        info = infos.get(worker)
        if not queryable or info is None:
            continue
        max_parallelism = queryable["max_parallelism"]
        address = f"{info['host']}:{queryable['port']}"
        if queryable.get("local"):
            local_sockets[address] = dict(queryable["local"])
        for name, (subtask, parallelism) in queryable["states"].items():
            route = states.setdefault(name, {"parallelism": parallelism, "workers": {}})
            route["workers"][str(subtask)] = address
    serving = jobmaster.all_running() and reported == jobmaster.num_workers and jobmaster.attempt == attempt
    return {"job_id": jobmaster.job_id, "status": jobmaster.status.value, "attempt": attempt, "serving": serving,
            "max_parallelism": max_parallelism, "token": jobmaster.query_token.hex(), "states": states,
            "local_sockets": local_sockets}


@dataclass(frozen=True)
class StateRoute:
    parallelism: int
    #: subtask -> (host, port)
    workers: dict[int, tuple[str, int]]


@dataclass(frozen=True)
class Routes:
    """A job's routes as a client holds them."""

    job_id: str
    status: str
    attempt: int
    serving: bool
    max_parallelism: int | None
    token: bytes
    states: dict[str, StateRoute]
    #: worker address -> (its host's identity, its local socket's name), for workers that have one
    local_sockets: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> Routes:
        states = {}
        for name, route in document["states"].items():
            workers = {}
            for subtask, address in route["workers"].items():
                host, _, port = address.rpartition(":")
                workers[int(subtask)] = (host, int(port))
            states[name] = StateRoute(int(route["parallelism"]), workers)
        local_sockets = {}
        for address, local in (document.get("local_sockets") or {}).items():
            host, _, port = address.rpartition(":")
            local_sockets[(host, int(port))] = (str(local["host"]), str(local["socket"]))
        status = document["status"]
        return cls(document["job_id"], getattr(status, "value", status), int(document["attempt"]),
                   bool(document["serving"]), document["max_parallelism"], bytes.fromhex(document["token"]), states,
                   local_sockets)

    def state(self, name: str) -> StateRoute:
        """The route of state ``name``: raises :class:`UnknownQueryableStateError` when the job
        serves and has no such state, :class:`StateUnavailableError` (retriable) when it is not
        serving (deploying, restarting)."""
        route = self.states.get(name)
        if route is not None and self.serving and self.max_parallelism is not None:
            return route
        if not self.serving:
            raise StateUnavailableError(f"job {self.job_id} is not serving queries now ({self.status}, attempt "
                                        f"{self.attempt}): it is deploying, restarting or has ended")
        known = ", ".join(sorted(self.states)) or "none"
        raise UnknownQueryableStateError(f"job {self.job_id} has no queryable state '{name}' (its queryable states: "
                                         f"{known}); a state is queryable by its descriptor's queryable= name or "
                                         f"KeyedStream.as_queryable_state(name)")

    def owner(self, name: str, key: Any) -> tuple[str, int]:
        """The address of the worker holding ``key`` of state ``name``."""
        route = self.state(name)
        assert self.max_parallelism is not None
        group = key_group(key, self.max_parallelism)
        subtask = group * route.parallelism // self.max_parallelism
        address = route.workers.get(subtask)
        if address is None:
            raise StateUnavailableError(f"no worker of job {self.job_id} reported subtask {subtask} of state '{name}'")
        return address


def key_group(key: Any, max_parallelism: int) -> int:
    """``key``'s key group; a key that cannot be one raises :class:`QueryKeyTypeError`."""
    try:
        return key_group_of(key, max_parallelism)
    except TypeError as error:
        raise QueryKeyTypeError(f"cannot query key {key!r}: {error}") from None
