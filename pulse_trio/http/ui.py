"""The dashboard's files: ``GET /`` redirects to ``/ui/``, which serves ``static/`` from the package.

Plain HTML, CSS and JavaScript modules, no build step: what ships in the
wheel is what the browser runs, and it fetches nothing from anywhere but
this service. The files are read once, when the app is built; a name that
is not one of them is 404, so no path from the request ever reaches the
file system. One module is not a file: ``charts.js`` carries what the
pages need to know of the statecharts (in which states a cancel can do
something), derived from the chart files by :mod:`pulse_trio.charts.states`,
so the dashboard keeps no hand list of states for it.
"""

from __future__ import annotations

import json
from importlib import resources

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from pulse_trio.charts.states import CANCEL_REQUEST_FROM, CANCEL_TASK_STATES
from pulse_trio.http.errors import not_found
from pulse_trio.http.security import UI_POLICY

ROOT = "/ui/"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


def _load() -> dict[str, tuple[bytes, str]]:
    found = {}
    for entry in resources.files("pulse_trio.http").joinpath("static").iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _TYPES:
            found[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    found[CHARTS_MODULE] = (charts_module(), _TYPES[".js"])
    return found


CHARTS_MODULE = "charts.js"


def charts_module() -> bytes:
    """``export const CHARTS = {...}``: the chart facts the pages use, as a JavaScript module."""
    facts = {"cancel": {"intent_states": list(CANCEL_REQUEST_FROM), "task_states": list(CANCEL_TASK_STATES)}}
    return ("// Derived from statecharts/ by pulse_trio/charts/states.py when the service starts.\n"
            f"export const CHARTS = {json.dumps(facts, sort_keys=True)};\n").encode()


class Dashboard:
    def __init__(self) -> None:
        self.files = _load()

    async def root(self, request: Request) -> Response:
        return RedirectResponse(ROOT, status_code=302)

    async def index(self, request: Request) -> Response:
        return self._file("index.html")

    async def asset(self, request: Request) -> Response:
        return self._file(request.path_params["asset"])

    def _file(self, name: str) -> Response:
        if name not in self.files:
            raise not_found("not_found", f"no such resource: {ROOT}{name[:80]}")
        body, media_type = self.files[name]
        return Response(body, media_type=media_type, headers={
            "Content-Security-Policy": UI_POLICY, "Cache-Control": "no-cache"})
