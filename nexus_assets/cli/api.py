"""`nexus api [--host H] [--port P]` (the HTTP API, docs/agents.md) and `nexus mcp [--allow-writes]`
(the MCP server over stdio, §10.1): read the settings, build the server, run it."""

from __future__ import annotations

import argparse
import sys

from nexus_assets import settings
from nexus_assets.cli.common import UsageError, settings_of
from nexus_assets.cli.parsing import Commands, runs_dir_flag, topics_dir_flag, vault_flag


def api_config(args: argparse.Namespace, *, host: str = "127.0.0.1", port: int = 8765, mcp: bool = True):
    from nexus_assets.api.config import ApiConfig, InsecureBind

    config = settings_of(args)
    origins = tuple(o.strip() for o in (config.api_cors_origins or "").split(",") if o.strip())
    try:
        return ApiConfig(
            db=args.db, runs_dir=args.runs_dir, topics_dir=args.topics_dir, host=host, port=port,
            token=config.api_token or None, cors_origins=origins, max_body_bytes=config.api_max_body_bytes,
            extractor=config.extractor, no_recall=settings.truthy(config.no_recall), env=config.as_env(),
            max_run_bytes=config.input_limits().max_file_bytes, user=config.current_user(), mcp=mcp,
        )
    except (InsecureBind, ValueError) as exc:
        raise UsageError(str(exc)) from None


def cmd_api(args: argparse.Namespace) -> int:
    import uvicorn

    from nexus_assets.api.app import create_app
    from nexus_assets.vault.warm import serve_memory

    serve_memory()
    config = api_config(args, host=args.host, port=args.port)
    print(
        f"nexus api on http://{args.host}:{args.port} (docs /docs, MCP /mcp)"
        f"{'; every request needs the bearer token' if config.token else '; loopback only, no token'}",
        file=sys.stderr, flush=True,
    )
    # uvicorn stops on SIGINT/SIGTERM: requests in flight finish, the lifespan stops the sync worker.
    uvicorn.run(create_app(config), host=args.host, port=args.port, log_level="warning", server_header=False)
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    import threading

    from nexus_assets.services.warming import warm
    from nexus_assets.mcp_server.tools import build_server
    from nexus_assets.services.sync_worker import SyncJobs

    from nexus_assets.services.warming import refresh
    from nexus_assets.vault.warm import hold, serve_memory

    serve_memory()
    config = api_config(args, mcp=False)
    # With writes, one worker compiles what `remember` writes and runs `sync`, in turn (one writer).
    jobs = SyncJobs(config.db, config.runs_dir, config.topics_dir, extractor=config.extractor, no_recall=config.no_recall) if args.allow_writes else None
    server = build_server(config, allow_writes=args.allow_writes, jobs=jobs)
    hold(config.db, refresh=lambda: refresh(config.db))  # the vault stays open for reading between tool calls (let go whenever a writer comes)
    # Loaded beside the handshake: the first recall then costs a search, not a model load.
    threading.Thread(target=warm, args=(config.db,), daemon=True).start()
    if jobs is not None:
        jobs.start()
    try:
        server.run("stdio")
    finally:
        if jobs is not None:
            jobs.stop()
    return 0


def register(commands: Commands) -> None:
    p = commands.add("api", cmd_api, common=False, help="the HTTP API (loopback unless NEXUS_API_TOKEN is set), with the MCP tools at /mcp")
    vault_flag(p)
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1; another needs NEXUS_API_TOKEN)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    runs_dir_flag(p)
    topics_dir_flag(p)
    p = commands.add("mcp", cmd_mcp, common=False, help="the MCP server over stdio, for desktop and IDE agents; read-only unless --allow-writes")
    vault_flag(p)
    p.add_argument("--allow-writes", action="store_true", help="add the sync, forget, keep and drop tools")
    runs_dir_flag(p)
    topics_dir_flag(p)
