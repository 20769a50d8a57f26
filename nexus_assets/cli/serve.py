"""`nexus serve`: the read-only trace viewer on 127.0.0.1."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from nexus_assets.vault.address import is_postgres, vault_exists
from nexus_assets.cli.common import UsageError
from nexus_assets.cli.parsing import Commands, vault_flag
from nexus_assets.vault.connection import VaultBusy, connect
from nexus_assets.vault.migrations import pending


class _Terminated(Exception):
    """SIGTERM arrived: stop serving."""


def _stop_on_sigterm() -> None:
    # A server started by a script, a supervisor or a test inherits its launcher's SIGTERM
    # disposition, ignored or blocked included; `kill PID` must stop it all the same.
    def terminate(signum, frame):
        raise _Terminated

    if threading.current_thread() is threading.main_thread():  # signal handlers live there only
        signal.signal(signal.SIGTERM, terminate)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def cmd_serve(args: argparse.Namespace) -> int:
    from nexus_assets.web.server import LOOPBACK_NAMES, make_server

    if not vault_exists(args.db):
        raise UsageError(f"no vault at {args.db}; run `nexus sync` first, or pass --db PATH")
    try:
        if is_postgres(args.db):
            raise VaultBusy  # nothing to check ahead: the pages open it as they are asked
        # A file that is no vault, or one from a newer release, is refused now (exit 2), not by
        # every page once serving.
        conn = connect(args.db, read_only=True, wait_s=0)
    except VaultBusy:
        pass  # a sync is writing it: the pages say so until it is done
    else:
        try:
            pending(conn)
        finally:
            conn.close()
    if args.host not in LOOPBACK_NAMES:
        print(f"warning: --host {args.host} makes the vault readable from other machines", file=sys.stderr)
    try:
        server = make_server(args.db, args.host, args.port, log_requests=True)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}; pass another --port (0 picks a free one)") from None
    _stop_on_sigterm()
    # Started as a background job, Ctrl-C does not reach it: say what does.
    print(f"Nexus trace viewer (read-only) on {server.url} ; Ctrl-C or `kill {os.getpid()}` stops it", flush=True)
    # uvicorn serves on a thread; this one waits, so SIGTERM and Ctrl-C land here whatever uvicorn does.
    worker = threading.Thread(target=server.serve_forever, name="nexus-viewer", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.5)
    except KeyboardInterrupt:
        pass
    except _Terminated:
        server.server_close()
        print("stopped (SIGTERM)", flush=True)
        sys.stderr.flush()
        # Request threads may be inside DuckDB or the embedding model; the pages are read-only, so
        # nothing is lost by not waiting for them, and interpreter shutdown could.
        os._exit(0)
    finally:
        server.shutdown()
        server.server_close()
    return 0


def register(commands: Commands) -> None:
    p = commands.add("serve", cmd_serve, common=False, help="the read-only trace viewer (a local web app)")
    vault_flag(p)
    p.add_argument("--port", type=int, default=8766, help="port (default 8766, beside `nexus api`'s 8765; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1, this machine only)")
