"""The trace viewer: a small read-only web app over the vault (FastAPI + Jinja2), served by
`nexus serve` alone and by `nexus api` beside the API, on the same routes, CSP and Host check.

Every request opens its own read-only DuckDB connection and closes it before the response is
sent, so a sync (which needs the write lock) is never kept waiting for long by the viewer.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import traceback
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from nexus_assets.core.display import visible

from nexus_assets.vault.address import parse_address
from nexus_assets.core.models import TOPIC_ID_PATTERN
from nexus_assets.services import pages as views
from nexus_assets.services.pages import NoVault
from nexus_assets.services.queries import NotFound
from nexus_assets.vault.connection import VaultBusy
from nexus_assets.web.markdown import inline_markdown

if TYPE_CHECKING:
    from starlette.responses import Response as StarletteResponse

DEFAULT_HOST = "127.0.0.1"
# Not `nexus api`'s 8765: the viewer and the API (which serves these pages too) can run side by side.
DEFAULT_PORT = 8766
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}
MAX_QUERY = 200

# Scripts and styles only from our own files: text from a conversation can never become code.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
STATIC = {"viewer.js": "text/javascript; charset=utf-8", "viewer.css": "text/css; charset=utf-8"}

TOPIC_ROUTE = re.compile(r"/topics/(" + TOPIC_ID_PATTERN.strip("^$") + r")")
CONFLICTS_ROUTE = re.compile(r"/topics/(" + TOPIC_ID_PATTERN.strip("^$") + r")/conflicts")
# A whole brick id or a unique prefix of one, as `nexus trace` accepts.
TRACE_ROUTE = re.compile(r"/api/bricks/([0-9a-f]{1,64})/trace")
# A passage id or a unique prefix of one (core/links.py `passage_url` links here); too short a one is refused as the CLI's.
PASSAGE_ROUTE = re.compile(r"/passages/([0-9a-f]{1,64})")
STATIC_ROUTE = re.compile(r"/static/([A-Za-z0-9_.-]+)")

def _shown(value: object) -> object:
    """Every value a page prints, its control characters shown (`\x1b`), never obeyed or hidden;
    markup we made stays markup (its text is escaped the same way)."""
    if isinstance(value, Markup):
        return Markup(visible(str(value)))
    return visible(value) if isinstance(value, str) else value


def _for_display(value: object) -> object:
    """The source panel's data (drawn by viewer.js as text), its strings as `_shown` prints them."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {k: _for_display(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_for_display(v) for v in value]
    return value


templates = Environment(
    loader=PackageLoader("nexus_assets.web", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    finalize=_shown,
)
templates.filters["short"] = lambda h, n=12: (h or "")[:n]


def hit_spans(segments) -> list[tuple[int, int]]:
    """The marked pieces of a text cut by `search_segments` (`(piece, hit)` in order), as offsets."""
    spans, at = [], 0
    for piece, hit in segments:
        if hit:
            spans.append((at, at + len(piece)))
        at += len(piece)
    return spans


# The one filter pages draw a brick's or a passage's text with: escaped, its inline Markdown drawn,
# search hits marked (web/markdown.py). The exact text is in the source panel and the passage page.
templates.filters["inline_markdown"] = inline_markdown
templates.filters["hit_spans"] = hit_spans


def _groupby_adjacent(items, key: str) -> list[tuple[object, list]]:
    """Runs of items with the same `key`, in the order given (Jinja's groupby sorts, losing it)."""
    groups: list[tuple[object, list]] = []
    for item in items:
        if groups and groups[-1][0] == item[key]:
            groups[-1][1].append(item)
        else:
            groups.append((item[key], [item]))
    return groups


templates.filters["groupby_adjacent"] = _groupby_adjacent


@dataclass
class Response:
    status: HTTPStatus
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


def html(status: HTTPStatus, template: str, **context) -> Response:
    return Response(status, templates.get_template(template).render(**context).encode("utf-8"))


def api(status: HTTPStatus, data: object) -> Response:
    body = json.dumps(data, ensure_ascii=False, indent=1, default=str).encode("utf-8")
    return Response(status, body, "application/json; charset=utf-8")


class Viewer:
    """The viewer's pages over one vault, independent of the server that carries them."""

    def __init__(self, db_path: str | Path, *, loopback_only: bool = True, busy_wait_s: float = 2.0, teach: bool = False) -> None:
        self.address = parse_address(db_path)  # with its options (DuckDB's memory)
        self.db_path = Path(db_path)
        self.loopback_only = loopback_only
        self.busy_wait_s = busy_wait_s
        # Keep/drop buttons: only where `POST /v1/bricks/{id}/keep|drop` answers (the viewer served by
        # `nexus api`); `nexus serve` stays read-only and says how to teach from the command line.
        self.teach = teach

    def vault(self) -> AbstractContextManager:
        return views.reading(self.address, wait_s=self.busy_wait_s)

    def host_ok(self, host: str) -> bool:
        # Bound to loopback, only loopback names are expected; another Host means DNS rebinding.
        if not self.loopback_only:
            return True
        host = host.strip().lower()
        host = host[1:].split("]", 1)[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        return host in LOOPBACK_NAMES

    def handle(self, method: str, path: str, query: str, host: str) -> Response:
        if method not in ("GET", "HEAD"):
            # Read-only: every other method (POST, PUT, DELETE, made-up ones) gets 405, not 501.
            return Response(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only viewer: only GET and HEAD\n", "text/plain; charset=utf-8",
                            {"Allow": "GET, HEAD"})
        if not self.host_ok(host):
            return Response(HTTPStatus.BAD_REQUEST, b"unexpected Host header\n", "text/plain; charset=utf-8")
        path = unquote(path)
        is_api = path.startswith("/api/")
        try:
            return self._route(path, parse_qs(query))
        except VaultBusy:
            if is_api:
                return api(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "sync in progress; retry in a moment"})
            response = html(HTTPStatus.SERVICE_UNAVAILABLE, "busy.html", db=str(self.db_path))
            response.headers["Retry-After"] = "2"
            return response
        except NoVault as exc:
            if is_api:
                return api(HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(exc)})
            return html(HTTPStatus.SERVICE_UNAVAILABLE, "message.html", title="No vault yet", message=str(exc))
        except Exception:
            traceback.print_exc(file=sys.stderr)
            if is_api:
                return api(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error; see the server log"})
            return html(HTTPStatus.INTERNAL_SERVER_ERROR, "message.html", title="Something went wrong", message="See the server log for details.")

    def _route(self, path: str, params: dict[str, list[str]]) -> Response:
        if path == "/":
            query = params.get("recall", [""])[0][:MAX_QUERY].strip()
            with self.vault() as v:
                topics = views.topic_summaries(v)
            recalled = None
            if query:
                from nexus_assets.services.answers import (  # read-only: the same code as `nexus recall`
                    NothingToRecall,
                    recall,
                )

                try:
                    recalled = recall(self.db_path, query, None, k=5)
                except NothingToRecall as exc:
                    recalled = {"results": [], "problem": str(exc)}
            return html(HTTPStatus.OK, "index.html", topics=topics, db=str(self.db_path), recall_query=query, recalled=recalled)
        if m := TOPIC_ROUTE.fullmatch(path):
            query = params.get("q", [""])[0][:MAX_QUERY]
            with self.vault() as v:
                page = views.topic_page(v, m.group(1), query, db_path=self.db_path)
                if page is None:
                    return self._not_found(f"No topic {m.group(1)!r} in this vault.")
                return html(HTTPStatus.OK, "topic.html", page=page, teach=self.teach)
        if m := CONFLICTS_ROUTE.fullmatch(path):
            with self.vault() as v:
                conflicts = views.conflict_page(v, m.group(1))
            if conflicts is None:
                return self._not_found(f"No topic {m.group(1)!r} in this vault.")
            return html(HTTPStatus.OK, "conflicts.html", page=conflicts)
        if m := TRACE_ROUTE.fullmatch(path):
            with self.vault() as v:
                matches = views.brick_prefix(v, m.group(1))
                if len(matches) > 1:
                    return api(HTTPStatus.BAD_REQUEST, {"error": f"brick id prefix {m.group(1)} is ambiguous; give more characters"})
                traced = views.brick_trace(v, matches[0]) if matches else None
            if traced is None:
                return api(HTTPStatus.NOT_FOUND, {"error": f"no brick {m.group(1)}"})
            return api(HTTPStatus.OK, _for_display(traced))  # for viewer.js to draw; `nexus trace --json` keeps the exact text
        if m := PASSAGE_ROUTE.fullmatch(path):
            with self.vault() as v:
                try:
                    page = views.passage_page(v, m.group(1))
                except NotFound as exc:
                    return self._not_found(str(exc))
            return html(HTTPStatus.OK, "passage.html", page=page)
        if path.startswith("/api/"):
            return api(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {path}"})
        if (m := STATIC_ROUTE.fullmatch(path)) and m.group(1) in STATIC:
            body = resources.files("nexus_assets.web").joinpath("static", m.group(1)).read_bytes()
            return Response(HTTPStatus.OK, body, STATIC[m.group(1)], {"Cache-Control": "no-cache"})
        return self._not_found(f"Nothing at {path}.")

    def _not_found(self, message: str) -> Response:
        return html(HTTPStatus.NOT_FOUND, "message.html", title="Not found", message=message)

    async def respond(self, request) -> StarletteResponse:
        """The page for a Starlette/FastAPI request, with the viewer's security headers."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import Response as StarletteResponse

        response = await run_in_threadpool(
            self.handle, request.method, request.url.path, request.url.query, request.headers.get("host", "")
        )
        headers = {
            "Content-Security-Policy": CSP,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Cache-Control": response.headers.pop("Cache-Control", "no-store"),
            **response.headers,
        }
        body = b"" if request.method == "HEAD" else response.body
        out = StarletteResponse(body, status_code=int(response.status), headers=headers, media_type=response.content_type)
        if request.method == "HEAD":
            out.headers["content-length"] = str(len(response.body))
        return out


# The viewer's pages, as paths: `nexus api` routes these to the viewer beside its own.
PAGE_PATHS = ("/", "/topics/{topic_id}", "/topics/{topic_id}/conflicts", "/api/bricks/{brick_id}/trace", "/passages/{passage_id}",
              "/static/{name}")


def add_pages(app, viewer: Viewer) -> None:
    """The viewer's pages on a FastAPI app (GET and HEAD; the API's own 405 for other methods)."""

    async def page(request):
        return await viewer.respond(request)

    for path in PAGE_PATHS:
        # A plain Starlette route: the viewer reads the request itself (no FastAPI parameters).
        app.add_route(path, page, methods=["GET", "HEAD"], include_in_schema=False)


def viewer_app(viewer: Viewer, *, log_requests: bool = False):
    """The viewer alone (`nexus serve`): every path and method goes to the viewer, which answers
    405 itself for anything but GET and HEAD."""
    from fastapi import FastAPI
    from starlette.routing import Route

    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    # An ASGI endpoint, not a function: Starlette then routes every method to it (a function would
    # be GET and HEAD only, and Starlette's own 405 would answer the rest).
    app.router.routes.append(Route("/{path:path}", _Pages(viewer, log_requests)))
    return app


class _Pages:
    def __init__(self, viewer: Viewer, log_requests: bool) -> None:
        self.viewer = viewer
        self.log_requests = log_requests

    async def __call__(self, scope, receive, send) -> None:
        from starlette.requests import Request

        request = Request(scope, receive)
        response = await self.viewer.respond(request)
        if self.log_requests:
            print(f"{request.client.host if request.client else '-'} \"{request.method} {request.url.path}\" {response.status_code}",
                  file=sys.stderr, flush=True)
        await response(scope, receive, send)


class ViewerServer:
    """`nexus serve`'s server: uvicorn on a socket bound at construction (so port 0 has its port at
    once), with the old server's interface: `serve_forever`, `shutdown`, `server_close`, `url`."""

    def __init__(self, db_path: str | Path, host: str, port: int, *, busy_wait_s: float = 2.0, log_requests: bool = False):
        self.db_path = Path(db_path)
        self.viewer = Viewer(db_path, loopback_only=host in LOOPBACK_NAMES, busy_wait_s=busy_wait_s)
        self.socket = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((host, port))
            self.socket.listen(128)
        except OSError:
            self.socket.close()
            raise
        self.server_address = self.socket.getsockname()
        self._app = viewer_app(self.viewer, log_requests=log_requests)
        self._server = None
        self._done = threading.Event()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"

    def serve_forever(self) -> None:
        import uvicorn

        # Run on a thread other than the main one, uvicorn leaves signals alone: `nexus serve` keeps its own.
        # h11: httptools refuses a made-up method with 400 before the viewer can say 405 (read-only).
        config = uvicorn.Config(self._app, log_level="warning", server_header=False, lifespan="off", http="h11")
        self._server = uvicorn.Server(config)
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self._done.set()

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._done.wait(timeout=10)

    def server_close(self) -> None:
        self.socket.close()


def make_server(db_path: str | Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, **options) -> ViewerServer:
    """A viewer bound to host:port (0 picks a free port); run it with `serve_forever()`."""
    return ViewerServer(db_path, host, port, **options)
