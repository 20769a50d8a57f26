"""`nexus serve`: the read-only trace viewer on 127.0.0.1."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nexus_assets.cli.common import UsageError
from nexus_assets.vault.connection import VaultBusy, connect
from nexus_assets.vault.migrations import pending
from nexus_assets.web.server import LOOPBACK_NAMES, make_server


def cmd_serve(args: argparse.Namespace) -> int:
    if not Path(args.db).exists():
        raise UsageError(f"no vault at {args.db}; run `nexus sync` first, or pass --db PATH")
    try:
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
    print(f"Nexus trace viewer (read-only) on {server.url} ; Ctrl-C stops it", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
