"""The MCP tools: each a few lines over the same services and models as the API's routes.

Every tool's failure a caller can fix is a `ToolError` whose message starts with the argument's
name; anything else reaches the client as the SDK's generic "Error executing tool". The server
keeps answering either way."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from nexus_assets import queries
from nexus_assets.schemas import AnswerOut, BrickOut, Conflict, RecallOut, RunMessage, RunPushed, SearchHit, Taught, TopicSummary

VERBATIM = (
    "Every brick is text copied verbatim from a conversation, never paraphrased, and citable by its "
    "brick_id; each carries its source address (run_id, json_path, start, end)."
)
INSTRUCTIONS = (
    "Nexus is memory compiled from AI conversations into verbatim bricks grouped by topic. " + VERBATIM + " "
    "Quote bricks as they are and cite their brick_id; `get_brick` shows the source text around a brick."
)


def client_name(ctx: Context | None) -> str:
    """The MCP client's name as it introduced itself (the audited agent of an answer)."""
    try:
        params = ctx.session.client_params if ctx is not None else None
        name = params.client_info.name if params is not None else None
    except Exception:  # noqa: BLE001 (a stateless request may carry no client info)
        name = None
    return f"mcp:{name}" if name else "mcp"


async def _call(argument: str, fn, *args, **kwargs):
    """Run a blocking service call off the event loop; a fixable failure names `argument`."""
    from nexus_assets.sync.selection import SyncInputError

    try:
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))
    except (queries.NotFound, queries.BadQuery, SyncInputError) as exc:
        raise ToolError(f"{argument}: {exc}") from None


def build_server(config, *, allow_writes: bool = False) -> MCPServer:
    """`config`: an ApiConfig (db, folders, env, user). `allow_writes`: add the sync and forget tools."""
    # WARNING: the SDK would otherwise log every request at INFO on the server's stderr.
    server = MCPServer(name="nexus", instructions=INSTRUCTIONS, version="1", log_level="WARNING")
    db = config.db

    @server.tool(description="Topics with their state and brick counts (as `nexus topics --json`). " + VERBATIM)
    async def list_topics() -> list[TopicSummary]:
        return await _call("vault", queries.topics, db)

    @server.tool(description="A topic's bricks in manifest order (as `nexus bricks TOPIC --json`); min_state IMPROVISE < FORMING < FINAL. " + VERBATIM)
    async def get_bricks(
        topic_id: Annotated[str, Field(max_length=64)],
        min_state: Literal["IMPROVISE", "FORMING", "FINAL"] = "IMPROVISE",
        include_superseded: bool = False,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
        offset: Annotated[int, Field(ge=0)] = 0,
    ) -> list[BrickOut]:
        return await _call(
            "topic_id", queries.bricks, db, topic_id, include_superseded=include_superseded, min_state=min_state, limit=limit, offset=offset
        )

    @server.tool(description="One brick with each source's verbatim text around the quote, its lineage and a viewer link. " + VERBATIM)
    async def get_brick(brick_id: Annotated[str, Field(min_length=6, max_length=64)]) -> dict[str, Any]:
        return await _call("brick_id", queries.brick_detail, db, brick_id)

    @server.tool(description="Semantic recall: the bricks closest in meaning to the query, with a confidence in [0, 1]; reads only. " + VERBATIM)
    async def recall(
        query: Annotated[str, Field(min_length=1, max_length=2000)],
        topics: Annotated[list[str] | None, Field(max_length=50)] = None,
        k: Annotated[int, Field(ge=1, le=100)] = 5,
    ) -> RecallOut:
        return await _call("query", queries.recall, db, query, topics, k=k, env=config.env)

    @server.tool(description="A grounded answer in which every sentence cites bricks, or a refusal; audited with this client as the agent. " + VERBATIM)
    async def ask(
        question: Annotated[str, Field(min_length=1, max_length=2000)],
        ctx: Context,
        topics: Annotated[list[str] | None, Field(max_length=50)] = None,
    ) -> AnswerOut:
        return await _call("question", queries.ask, db, question, topics, user=config.user, agent=client_name(ctx), env=config.env)

    @server.tool(description="Full-text search (BM25) over brick text, with highlights (as `nexus search --json`). " + VERBATIM)
    async def search(
        q: Annotated[str, Field(min_length=1, max_length=1000)],
        topic: Annotated[str | None, Field(max_length=64)] = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
    ) -> list[SearchHit]:
        return await _call("q", queries.search, db, q, [topic] if topic else None, limit=limit)

    @server.tool(description="Related bricks of a topic that state different values, side by side with their sources; a person decides. " + VERBATIM)
    async def conflicts(topic_id: Annotated[str, Field(max_length=64)]) -> list[Conflict]:
        found = await _call("topic_id", queries.conflicts, db, topic_id)
        return found[0]

    if allow_writes:
        _write_tools(server, config)
    return server


def _write_tools(server: MCPServer, config) -> None:
    from nexus_assets.sync.service import SyncRequest, check, run

    @server.tool(description="Compile topics through the Dagster asset graph, as `nexus sync` (writes the vault); "
                 "reselect=true moves them to this release's selector, as `nexus sync --reselect`. " + VERBATIM)
    async def sync(
        topics: Annotated[list[str] | None, Field(max_length=100)] = None,
        force_recompile: bool = False,
        extractor: Literal["embedded", "openai"] | None = None,
        reselect: bool = False,
    ) -> list[dict[str, Any]]:
        request = SyncRequest(
            db=config.db, runs_dir=config.runs_dir, topics_dir=config.topics_dir, topics=tuple(topics or ()),
            extractor=extractor or config.extractor, no_recall=config.no_recall, force=force_recompile, reselect=reselect,
        )
        checked = await _call("topics", check, request)
        outcome = await anyio.to_thread.run_sync(lambda: run(checked))
        return outcome.results

    @server.tool(description="Remember what was said: append messages to your own OPEN run (created if new), as "
                 "`POST /v1/runs/{run_id}/messages`; a message id the run holds adds nothing, so a retry is harmless. "
                 "The next `sync` compiles it into bricks.")
    async def remember(
        run_id: Annotated[str, Field(min_length=1, max_length=256)],
        messages: Annotated[list[RunMessage], Field(min_length=1, max_length=10_000)],
    ) -> RunPushed:
        from pathlib import Path

        from nexus_assets.ingest.push import PushError, append_messages

        def work() -> RunPushed:
            try:
                pushed = append_messages(Path(config.runs_dir), run_id, [m.model_dump(exclude_none=True) for m in messages])
            except PushError as exc:
                raise ToolError(f"{'messages' if 'messages' in str(exc) else 'run_id'}: {exc}") from None
            return RunPushed(run_id=pushed.run_id, status=pushed.status, messages=pushed.messages, added=pushed.added)

        return await anyio.to_thread.run_sync(work)

    @server.tool(description="Erase a run (or every run of a file) everywhere, with a tombstone (invariant 15). Without confirm=true only the plan is returned.")
    async def forget(
        reason: Annotated[str, Field(min_length=1, max_length=2000)],
        run_id: str | None = None,
        file: str | None = None,
        confirm: bool = False,
    ) -> dict[str, Any]:
        from nexus_assets import settings
        from nexus_assets.forget.step import ForgetError, find_target, forget as erase, plan
        from nexus_assets.lifecycle.step import user_actor
        from nexus_assets.store import Vault

        if bool(run_id) == bool(file):
            raise ToolError("run_id: give exactly one of run_id or file")

        def work() -> dict:
            with Vault.open(config.db, read_only=not confirm) as vault:
                try:
                    target = find_target(vault, run_id=run_id, file=file)
                except ForgetError as exc:
                    raise ToolError(f"{'run_id' if run_id else 'file'}: {exc}") from None
                planned = plan(vault, target)
            if not confirm:
                return {"plan": planned, "changed": False}
            report = erase(config.db, target, reason=reason.strip(), actor=user_actor("nexus mcp", settings.user()), delete_file=False)
            return {"report": report, "changed": True}

        return await anyio.to_thread.run_sync(work)


    async def _teach(ctx: Context | None, brick_id: str, verdict: str, reason: str | None) -> Taught:
        from nexus_assets.teaching.service import TeachingRefused, teach_in

        try:
            done = await _call("brick_id", teach_in, config.db, config.topics_dir, brick_id, verdict,
                               reason=reason, actor=client_name(ctx))
        except TeachingRefused as exc:
            raise ToolError(f"brick_id: {exc}") from None
        return Taught(**done.as_json())

    @server.tool(description="Keep: the brick's verbatim text joins its topic's examples to keep (the topic file is "
                 "rewritten, comments kept); the next `sync` keeps sentences like it. Refused on a sealed topic.")
    async def keep(brick_id: Annotated[str, Field(min_length=6, max_length=64)], ctx: Context,
                   reason: Annotated[str | None, Field(max_length=2000)] = None) -> Taught:
        return await _teach(ctx, brick_id, "keep", reason)

    @server.tool(description="Drop: the brick's verbatim text joins its topic's examples to drop (the topic file is "
                 "rewritten, comments kept); the next `sync` leaves it and sentences like it out of the manifest "
                 "(history kept). Refused on a sealed topic.")
    async def drop(brick_id: Annotated[str, Field(min_length=6, max_length=64)], ctx: Context,
                   reason: Annotated[str | None, Field(max_length=2000)] = None) -> Taught:
        return await _teach(ctx, brick_id, "drop", reason)
