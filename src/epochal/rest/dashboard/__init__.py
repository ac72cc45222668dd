"""The dashboard: a page served by the driver's REST server that shows its jobs while they run.

It is three files shipped inside the package (``index.html``, ``dashboard.js``,
``dashboard.css``: plain JavaScript, inline SVG, no framework, no CDN, nothing fetched from the
network), which read the REST API's own endpoints (``/jobs/overview``, ``/jobs/{id}``,
``.../plan``, ``.../vertices``, ``.../checkpoints``) every 3 s (1 s or 10 s as chosen on the
page) and call its savepoint, stop
and cancel endpoints. The page is the browser's: the server only hands out the files.

Access is the API's (:class:`epochal.rest.app.BearerToken`): the URL the driver prints,
``/dashboard?token=...``, sets the dashboard's cookie and redirects to ``/dashboard/``; without
the token or the cookie every path answers 401.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import RedirectResponse, Response

#: The files of the dashboard, and their media types.
ASSETS = {"index.html": "text/html; charset=utf-8", "dashboard.js": "text/javascript; charset=utf-8",
          "dashboard.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}
#: The page may load only its own files and talk only to its own server.
POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def asset(name: str) -> bytes:
    """The bytes of one of :data:`ASSETS`."""
    return resources.files(__name__).joinpath(name).read_bytes()


def add_routes(app: FastAPI) -> None:
    """``/`` and ``/dashboard`` (redirects), ``/dashboard/`` (the page) and ``/dashboard/<asset>``."""
    headers = {"content-security-policy": POLICY, "x-content-type-options": "nosniff", "cache-control": "no-cache",
               "referrer-policy": "no-referrer"}

    @app.get("/", include_in_schema=False)
    @app.get("/dashboard", include_in_schema=False)
    async def to_dashboard() -> RedirectResponse:
        return RedirectResponse("/dashboard/", status_code=303)

    @app.get("/dashboard/", include_in_schema=False)
    async def page() -> Response:
        return Response(asset("index.html"), media_type=ASSETS["index.html"], headers=headers)

    @app.get("/dashboard/{name}", include_in_schema=False)
    async def file(name: str) -> Response:
        if name not in ASSETS:
            return Response(b'{"detail": "no such file"}', status_code=404, media_type="application/json")
        return Response(asset(name), media_type=ASSETS[name], headers=headers)
