"""The command line's side of the REST API: HTTP calls with the bearer token, JSON in and out.

It uses only the standard library (``urllib.request``), so ``epochal list`` and friends start
fast and need nothing beyond epochal's own dependencies. Every failure is a :class:`RestError`:
``status`` is the HTTP status (401, 404, 409, ...), or 0 when the server could not be reached
(refused, timed out, the driver gone).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

#: Seconds one request may take.
TIMEOUT_S = 15.0


class RestError(Exception):
    """A request failed: ``status`` (0: not reached), ``detail`` (the server's words or the
    transport's), ``candidates`` (the jobs an ambiguous name matches)."""

    def __init__(self, status: int, detail: str, candidates: list[str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.candidates = candidates or []

    @property
    def unreachable(self) -> bool:
        return self.status == 0


class RestClient:
    """Requests to the REST server at ``address`` (``host:port`` or a URL) with ``token``."""

    def __init__(self, address: str, token: str, timeout: float = TIMEOUT_S) -> None:
        self.base = address.rstrip("/") if "://" in address else f"http://{address}"
        self.token = token
        self.timeout = timeout

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.request("POST", path, body=body or {})

    def patch(self, path: str, **query: Any) -> Any:
        return self.request("PATCH", path, query=query)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                query: dict[str, Any] | None = None) -> Any:
        """``method`` ``path`` (relative to the server, ``/jobs/...``); the decoded JSON answer."""
        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Authorization": f"Bearer {self.token}",
                                                  "Accept": "application/json",
                                                  **({"Content-Type": "application/json"} if data else {})})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            raise _http_error(error) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            reason = getattr(error, "reason", error)
            raise RestError(0, f"cannot reach {self.base}: {reason}") from None
        return json.loads(payload) if payload else None


def job_path(job: str, *rest: str) -> str:
    """``/jobs/<job>/<rest...>`` with ``job`` (an id or a name) quoted for a path."""
    return "/".join(["/jobs", urllib.parse.quote(job, safe=""), *rest])


def _http_error(error: urllib.error.HTTPError) -> RestError:
    try:
        body = json.loads(error.read() or b"{}")
    except ValueError:
        body = {}
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):  # a validation error (422): FastAPI's list of problems
        detail = "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail)
    candidates = body.get("candidates") if isinstance(body, dict) else None
    return RestError(error.code, str(detail or error.reason), list(candidates or []))
