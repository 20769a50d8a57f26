"""A real PostgreSQL for the tests: Debian's server binaries, a cluster in a temp directory owned by
a non-root user (initdb refuses root), listening on 127.0.0.1 only, stopped by the fixture that
started it (SIGTERM, then SIGKILL) even when a test fails.

The cluster's default collation is ICU en-US, as a typical server has, not bytewise: results that
only matched because of a lucky sort order show up here."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psycopg


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL's server is not installed (apt-get install postgresql; .ci/run does)")
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One cluster: `start()`, `database()` for a fresh database's address, `stop()`."""

    def __init__(self, root: Path | None = None):
        self.bin = _bin_dir()
        self.root = Path(root or tempfile.mkdtemp(prefix="nexus-pg-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.data = self.root / "data"
        self.port = _free_port()
        # As root, the cluster belongs to Debian's `postgres` user; otherwise to whoever runs the tests.
        self.user = "postgres" if os.geteuid() == 0 else None
        self.superuser = "nexus"
        self.process_pid: int | None = None

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]], user=self.user, check=True, timeout=timeout,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=self.root,
        )

    def start(self) -> "PostgresServer":
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        os.chmod(self.root, 0o700)
        self._run(
            "initdb", "-D", str(self.data), "-U", self.superuser, "--auth=trust", "--encoding=UTF8",
            "--locale=C.UTF-8", "--locale-provider=icu", "--icu-locale=en-US",
        )
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        try:
            self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "-t", "60", "start")
        except subprocess.SubprocessError:
            self.stop()
            raise RuntimeError(f"PostgreSQL did not start: {self.log()}") from None
        self.process_pid = int((self.data / "postmaster.pid").read_text().split()[0])
        return self

    def log(self) -> str:
        try:
            return (self.root / "log").read_text()[-4000:]
        except OSError:
            return ""

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.superuser}@127.0.0.1:{self.port}/{database}"

    def database(self, name: str | None = None) -> str:
        """A new, empty database; its address."""
        name = name or f"nexus_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """pg_ctl's fast stop (SIGINT to the postmaster), then SIGTERM, then SIGKILL; the files go."""
        if self.data.exists():
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "20", "stop", timeout=30)
            except (subprocess.SubprocessError, OSError):
                pass
        pid = self.process_pid
        if pid:
            for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                if not _alive(pid):
                    break
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + wait
                while _alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
        shutil.rmtree(self.root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); it has stopped all the same.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
