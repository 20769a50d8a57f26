"""Every server the project starts stops on SIGTERM within 5 s, however it was started (issue 32.11).

A server started from a script runs as a background job: no terminal, stdin closed, SIGINT
ignored, and it keeps whatever SIGTERM disposition its launcher had. `nexus serve` once stayed
behind after a test because SIGTERM reached it ignored.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from nexus_assets.cli import main
from nexus_assets_tests.llm_server import FakeOpenAIServer, Reply
from nexus_assets_tests.project import Project, sample_project
from nexus_assets_tests.servers import (
    STOP_GRACE_S,
    as_script_job,
    nexus,
    read_line,
    start,
    stop,
)


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Project:
    project = sample_project(tmp_path_factory.mktemp("serve") / "proj")
    assert main(project.sync_args("storage-decisions")) == 0
    return project


@pytest.mark.parametrize("sigterm", ["default", "ignored", "blocked"], ids=["script-job", "sigterm-ignored", "sigterm-blocked"])
def test_nexus_serve_started_from_a_script_stops_on_sigterm_within_5s(vault: Project, sigterm: str):
    proc = start(
        nexus("--db", str(vault.db), "serve", "--port", "0"),
        preexec_fn=as_script_job(sigterm=sigterm),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = read_line(proc.stdout, timeout_s=60)
        assert "http://127.0.0.1:" in line, f"no URL line (exit code {proc.poll()})"
        url = line.split(" on ", 1)[1].split()[0]
        with urllib.request.urlopen(url, timeout=30) as resp:
            assert resp.status == 200
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # to the server alone, as `kill PID` does
        try:
            code = proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"nexus serve ({sigterm} SIGTERM) still ran {STOP_GRACE_S} s after SIGTERM")
        assert time.monotonic() - started < STOP_GRACE_S and code == 0
        assert proc.stdout.read() == "stopped (SIGTERM)\n"
        assert f"`kill {proc.pid}` stops it" in line, "a background job ignores Ctrl-C: the line says what stops it"
    finally:
        stop(proc)


def test_the_fake_llm_server_stops_within_5s_with_a_request_in_flight():
    server = FakeOpenAIServer(api_key=None, models=None).start()
    try:
        server.script(Reply(content="late", delay_s=60))
        body = b'{"model": "m", "messages": []}'
        request = urllib.request.Request(f"{server.base_url}/chat/completions", data=body, headers={"Content-Type": "application/json"})
        client = threading.Thread(target=lambda: _ignore_errors(urllib.request.urlopen, request, timeout=90), daemon=True)
        client.start()
        deadline = time.monotonic() + 10
        while server.request_count == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.request_count == 1, "the slow request is in flight"
    finally:
        started = time.monotonic()
        server.stop()
    assert time.monotonic() - started < STOP_GRACE_S


def _ignore_errors(fn, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except OSError:
        pass


def test_stop_kills_a_server_that_ignores_sigterm(tmp_path):
    """The test helper's last resort: SIGKILL to the whole group after the grace period."""
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
    proc = start([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert read_line(proc.stdout, timeout_s=30) == "up\n"
    assert stop(proc, grace_s=0.5) is None and proc.returncode == -signal.SIGKILL
