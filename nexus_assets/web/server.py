"""`nexus serve`: a small read-only web app over the vault (stdlib http.server + Jinja2).

Every request opens its own read-only DuckDB connection and closes it before the response is
sent, so a sync (which needs the write lock) is never kept waiting for long by the viewer.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qs, unquote, urlsplit

from jinja2 import Environment, PackageLoader, StrictUndefined

from nexus_assets.core.models import TOPIC_ID_PATTERN
from nexus_assets.vault.connection import VaultBusy, connect
from nexus_assets.vault.store import Vault
from nexus_assets.web import views

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
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
STATIC_ROUTE = re.compile(r"/static/([A-Za-z0-9_.-]+)")

templates = Environment(
    loader=PackageLoader("nexus_assets.web", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters["short"] = lambda h, n=12: (h or "")[:n]


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


class NoVault(Exception):
    """The vault file is missing or was never synced."""


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


class ViewerServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, db_path: str | Path, host: str, port: int, *, busy_wait_s: float = 2.0, log_requests: bool = False):
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.db_path = Path(db_path)
        self.busy_wait_s = busy_wait_s
        self.log_requests = log_requests
        self.loopback_only = host in LOOPBACK_NAMES
        super().__init__((host, port), ViewerHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"

    @contextmanager
    def vault(self) -> Iterator[Vault]:
        if not self.db_path.exists():
            raise NoVault(f"no vault at {self.db_path}; run `nexus sync` first, or pass --db")
        conn = connect(self.db_path, read_only=True, wait_s=self.busy_wait_s)
        try:
            vault = Vault(conn, migrate=False)
            if not vault.history.holds_vault_tables():
                raise NoVault(f"{self.db_path} holds no vault tables yet; run `nexus sync` first")
            yield vault
        finally:
            conn.close()


class ViewerHandler(BaseHTTPRequestHandler):
    server: ViewerServer
    server_version = "NexusViewer/1"

    def version_string(self) -> str:
        return self.server_version

    def do_GET(self) -> None:
        self._respond(self._handle(), head=False)

    def do_HEAD(self) -> None:
        self._respond(self._handle(), head=True)

    def __getattr__(self, name: str):
        # Read-only: every other method (POST, PUT, DELETE, made-up ones) gets 405, not 501.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        # The request body is never read, so the connection cannot be reused.
        self.close_connection = True
        response = Response(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only viewer: only GET and HEAD\n", "text/plain; charset=utf-8")
        response.headers["Allow"] = "GET, HEAD"
        self._respond(response, head=False)

    def _host_ok(self) -> bool:
        # Bound to loopback, only loopback names are expected; another Host means DNS rebinding.
        if not self.server.loopback_only:
            return True
        host = (self.headers.get("Host") or "").strip().lower()
        host = host[1:].split("]", 1)[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        return host in LOOPBACK_NAMES

    def _handle(self) -> Response:
        if not self._host_ok():
            return Response(HTTPStatus.BAD_REQUEST, b"unexpected Host header\n", "text/plain; charset=utf-8")
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        is_api = path.startswith("/api/")
        try:
            return self._route(path, parse_qs(parts.query))
        except VaultBusy:
            if is_api:
                return api(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "sync in progress; retry in a moment"})
            response = html(HTTPStatus.SERVICE_UNAVAILABLE, "busy.html", db=str(self.server.db_path))
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
            with self.server.vault() as v:
                topics = views.topic_summaries(v)
            recalled = None
            if query:
                from nexus_assets.recall.service import (  # read-only: the same code as `nexus recall`
                    NothingToRecall,
                    recall,
                )

                try:
                    recalled = recall(self.server.db_path, query, None, k=5)
                except NothingToRecall as exc:
                    recalled = {"results": [], "problem": str(exc)}
            return html(HTTPStatus.OK, "index.html", topics=topics, db=str(self.server.db_path), recall_query=query, recalled=recalled)
        if m := TOPIC_ROUTE.fullmatch(path):
            query = params.get("q", [""])[0][:MAX_QUERY]
            with self.server.vault() as v:
                page = views.topic_page(v, m.group(1), query, db_path=self.server.db_path)
                if page is None:
                    return self._not_found(f"No topic {m.group(1)!r} in this vault.")
                return html(HTTPStatus.OK, "topic.html", page=page)
        if m := CONFLICTS_ROUTE.fullmatch(path):
            with self.server.vault() as v:
                conflicts = views.conflict_page(v, m.group(1))
            if conflicts is None:
                return self._not_found(f"No topic {m.group(1)!r} in this vault.")
            return html(HTTPStatus.OK, "conflicts.html", page=conflicts)
        if m := TRACE_ROUTE.fullmatch(path):
            with self.server.vault() as v:
                matches = v.history.brick_ids_with_prefix(m.group(1))
                if len(matches) > 1:
                    return api(HTTPStatus.BAD_REQUEST, {"error": f"brick id prefix {m.group(1)} is ambiguous; give more characters"})
                traced = views.brick_trace(v, matches[0]) if matches else None
            if traced is None:
                return api(HTTPStatus.NOT_FOUND, {"error": f"no brick {m.group(1)}"})
            return api(HTTPStatus.OK, traced)
        if path.startswith("/api/"):
            return api(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {path}"})
        if (m := STATIC_ROUTE.fullmatch(path)) and m.group(1) in STATIC:
            body = resources.files("nexus_assets.web").joinpath("static", m.group(1)).read_bytes()
            return Response(HTTPStatus.OK, body, STATIC[m.group(1)], {"Cache-Control": "no-cache"})
        return self._not_found(f"Nothing at {path}.")

    def _not_found(self, message: str) -> Response:
        return html(HTTPStatus.NOT_FOUND, "message.html", title="Not found", message=message)

    def _respond(self, response: Response, *, head: bool) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", response.headers.pop("Cache-Control", "no-store"))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(response.body)

    def log_message(self, format: str, *args) -> None:
        if self.server.log_requests:
            super().log_message(format, *args)


def make_server(db_path: str | Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, **options) -> ViewerServer:
    """A viewer bound to host:port (0 picks a free port); run it with `serve_forever()`."""
    return ViewerServer(db_path, host, port, **options)
