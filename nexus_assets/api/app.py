"""The FastAPI app: the routes of docs/agents.md, the MCP tools at /mcp (§10.1), the trace viewer's
pages, one door (guard.py)."""

from __future__ import annotations

import contextlib
import logging

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from nexus_assets.api import problems
from nexus_assets.api.config import ApiConfig
from nexus_assets.api.guard import Guard
from nexus_assets.services.sync_worker import SyncJobs
from nexus_assets.api.routes import answers, bricks, health, passages, runs, sync, topics

from nexus_assets.services.warming import refresh, warm

log = logging.getLogger("nexus.api")


def create_app(config: ApiConfig) -> FastAPI:
    jobs = SyncJobs(config.db, config.runs_dir, config.topics_dir, extractor=config.extractor, no_recall=config.no_recall)
    mcp_server = None
    mcp_routes = []
    if config.mcp:
        from mcp.server.transport_security import TransportSecuritySettings

        from nexus_assets.mcp_server.tools import build_server

        # /mcp only reads (the HTTP routes write, behind the same token); an agent is told where writes are.
        mcp_server = build_server(config, allow_writes=False, writes_off=(
            "the tools at /mcp on `nexus api` only read: start `nexus mcp --allow-writes` to use it, "
            "or call this API's HTTP routes that write (docs/agents.md)"
        ))
        # With a token the guard checks every request; the SDK's own Host check is for a loopback
        # server without one (it would refuse the names a remote client uses).
        security = None if not config.token else TransportSecuritySettings(enable_dns_rebinding_protection=False)
        mcp_routes = mcp_server.streamable_http_app(streamable_http_path="/mcp", transport_security=security, host=config.host).routes

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        from nexus_assets.vault import warm as held

        jobs.start()
        if config.warm:
            # The vault stays open for reading between requests (let go whenever a writer comes).
            held.hold(config.db, refresh=lambda: refresh(config.db))
            warm(config.db)
        try:
            if mcp_server is not None:
                # The streamable HTTP session manager lives in the app's lifespan, or /mcp answers 404.
                async with mcp_server.session_manager.run():
                    yield
            else:
                yield
        finally:
            jobs.stop()
            held.release(config.db)

    app = FastAPI(
        title="Nexus Sync",
        version="1",
        summary="Verbatim, traceable bricks compiled from AI conversations (docs/agents.md).",
        lifespan=lifespan,
    )
    app.state.config = config
    app.state.jobs = jobs
    for module in (health, sync, runs, topics, bricks, answers, passages):
        app.include_router(module.router)
    app.router.routes.extend(mcp_routes)
    # The trace viewer's pages on the same app (same routes, CSP and Host check as `nexus serve`).
    from nexus_assets.api.config import is_loopback
    from nexus_assets.web.server import Viewer, add_pages

    add_pages(app, Viewer(config.db, loopback_only=is_loopback(config.host), teach=True))
    problems.install(app)
    app.add_middleware(Guard, config=config)
    if config.cors_origins:
        # Outside the guard: a browser's preflight carries no token.
        app.add_middleware(
            CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Mcp-Session-Id", "Mcp-Protocol-Version"],
        )
    return app
