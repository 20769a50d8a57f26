"""Servers that tests start in a subprocess, and how they are always stopped.

Each server gets its own session (process group), so stopping it reaches everything it started
(`dagster dev` runs a webserver, a daemon and a code server). `stop` sends SIGTERM to the group,
then SIGKILL when the grace period passes: a test that fails half-way leaves nothing behind.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import IO, Iterator, Sequence

STOP_GRACE_S = 5.0  # every server the project starts stops within this on SIGTERM

# `dagster dev` started from a script ignores SIGINT/SIGTERM (FACTS.md): it stops its children with
# SIGINT, which a script's background job inherits as ignored. Restore SIGINT, then exec it.
DEFAULT_SIGINT = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])"


def as_script_job(*, sigterm: str = "default"):
    """A preexec_fn that gives the child what a script's background job has: SIGINT ignored (no
    job control). `sigterm` "ignored" or "blocked" also hands down a launcher's SIGTERM disposition
    (nohup-like wrappers, supervisors, threads that mask signals): a server must stop anyway."""

    def prepare() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if sigterm == "ignored":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        elif sigterm == "blocked":
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    return prepare


def start(argv: Sequence[str], *, preexec_fn=None, **popen) -> subprocess.Popen:
    """`argv` in its own session with stdin closed, as a script or a supervisor starts a server."""
    return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec_fn, **popen)


def stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> float | None:
    """SIGTERM to the server's group; SIGKILL to it after `grace_s`. Returns the seconds the
    server took to exit on SIGTERM, or None when it had to be killed."""
    if proc.poll() is not None:
        _kill_group(proc, signal.SIGKILL)  # anything it left running in its group
        return 0.0
    started = time.monotonic()
    _kill_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
        took = time.monotonic() - started
    except subprocess.TimeoutExpired:
        took = None
    _kill_group(proc, signal.SIGKILL)
    proc.wait()
    return took


@contextmanager
def running(argv: Sequence[str], **options) -> Iterator[subprocess.Popen]:
    proc = start(argv, **options)
    try:
        yield proc
    finally:
        stop(proc)


def _kill_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


def read_line(stream: IO[str], timeout_s: float) -> str:
    """The next line of a child's output, or "" when none comes in time (never blocks a test forever)."""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            return ""
    return stream.readline()


def nexus(*args: str) -> list[str]:
    return [sys.executable, "-m", "nexus_assets.cli", *args]
