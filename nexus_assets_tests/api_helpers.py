"""`nexus api` started for a test in its own session on a free loopback port, always stopped
(SIGTERM, then SIGKILL; servers.py), and a small stdlib HTTP client for it."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Iterator

from nexus_assets_tests import servers
from nexus_assets_tests.project import REPO, Project

START_TIMEOUT_S = 120.0  # a cold start loads Dagster's instance and the embedding model on 2 busy cores


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    def __init__(self, base: str, token: str | None = None) -> None:
        self.base = base
        self.token = token
        self.proc = None  # the server's process (a test may kill it)

    def call(self, method: str, path: str, body: object = None, *, headers: dict | None = None, raw: bytes | None = None,
             token: str | None = None) -> tuple[int, dict, object]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        bearer = token if token is not None else self.token
        if bearer:
            request.add_header("Authorization", f"Bearer {bearer}")
        for k, v in (headers or {}).items():
            request.add_header(k, v)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                status, got, payload = response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            status, got, payload = exc.code, dict(exc.headers), exc.read()
        text = payload.decode("utf-8")
        try:
            return status, got, json.loads(text)
        except ValueError:
            return status, got, text

    def get(self, path: str, **kw):
        return self.call("GET", path, **kw)

    def post(self, path: str, body: object = None, **kw):
        return self.call("POST", path, body, **kw)


@contextmanager
def api_server(project: Project, *, token: str | None = None, extra_env: dict | None = None) -> Iterator[Api]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "NEXUS_API_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    if token:
        env["NEXUS_API_TOKEN"] = token
    env.update(extra_env or {})
    argv = servers.nexus("--db", str(project.db), "api", "--port", str(port), "--runs-dir", str(project.runs), "--topics-dir", str(project.topics))
    with servers.running(argv, env=env, stdout=subprocess_devnull(), stderr=subprocess_devnull()) as proc:
        api = Api(f"http://127.0.0.1:{port}", token)
        api.proc = proc
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"nexus api exited with {proc.returncode}"
            try:
                if api.get("/v1/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "nexus api did not answer /v1/health in time"
            time.sleep(0.3)
        yield api


def subprocess_devnull():
    import subprocess

    return subprocess.DEVNULL
