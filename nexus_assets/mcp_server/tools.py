"""The MCP tools: each a few lines over the same services and models as the API's routes.

Every tool's failure a caller can fix is a `ToolError` whose message starts with the argument's
name; anything else reaches the client as the SDK's generic "Error executing tool". The server
keeps answering either way."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from nexus_assets.services import queries
from nexus_assets.services.pushing import RUN_ID_RULE
from nexus_assets.services.requests import (
    DAY,
    AskRequest,
    BrickLookup,
    BricksPage,
    ForgetRequest,
    RecallRequest,
    RememberRequest,
    SearchRequest,
    StartSync,
    TeachRequest,
    bounds_of,
)
from nexus_assets.extract.registry import ExtractorName
from nexus_assets.schemas import AnswerOut, BrickOut, Conflict, RecallOut, RunMessage, RunPushed, SearchHit, Taught, TopicSummary

VERBATIM = "Every brick is verbatim text from a conversation, never paraphrased, citable by its brick_id."
INSTRUCTIONS = (
    "Nexus is memory compiled from AI conversations into verbatim bricks grouped by topic. " + VERBATIM + " "
    "Each brick carries its source address (run_id, json_path, start, end). Start with `list_topics`; find bricks by "
    "meaning with `recall`, by exact words with `search`; get a cited answer with `ask`; read a whole topic with "
    "`get_bricks`; check one brick in its conversation with `get_brick`. Quote bricks as they are and cite their brick_id."
)
# Names an agent may use for an argument (the HTTP API's and earlier releases' names), by the name the tools take.
ALIASES = {"query": ("q",), "topics": ("topic",)}
# The tools `_write_tools` adds (`nexus mcp --allow-writes`). A read-only server does not list them,
# but an agent that read the docs calls them anyway: it is told why, not "Unknown tool".
WRITE_TOOLS = ("remember", "sync", "forget", "keep", "drop")
# How a read-only server's caller gets a write tool: the stdio server is started again with the flag.
WRITES_OFF = "this server was started read-only: start it with `nexus mcp --allow-writes` to use it"


class NexusServer(MCPServer):
    """The SDK's server, with arguments an agent can get right the first time: the old names
    (`q`, `topic`) are taken for `query` and `topics`, one topic may be given as a string, an
    argument a tool does not have is named, and a bad value is one sentence saying what is
    wanted (not pydantic's report and its URL). On a read-only server, a write tool is a tool error
    saying how to get it (`writes_off`)."""

    # Set by build_server on a read-only server: how its caller gets the write tools.
    writes_off: str | None = None

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None):
        tool = self._tool_manager.get_tool(name)
        if tool is None and self.writes_off and name in WRITE_TOOLS:
            raise ToolError(f"{name} is a write tool; {self.writes_off}")
        if tool is not None:
            arguments = _agreed(name, tool.parameters, dict(arguments or {}))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError) and tool is not None:
                raise ToolError(argument_problem(name, tool.parameters, exc.__cause__)) from None
            raise


def _agreed(tool: str, schema: dict, arguments: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties", {})
    for name, old_names in ALIASES.items():
        for old in old_names:
            if old in arguments and old not in properties and name in properties:
                if name in arguments:
                    raise ToolError(f"{tool}: give {name!r} only ({old!r} is its old name), not both")
                arguments[name] = arguments.pop(old)
    if isinstance(arguments.get("topics"), str) and properties.get("topics", {}).get("anyOf"):
        arguments["topics"] = [arguments["topics"]]  # one topic, as a list of one
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        raise ToolError(
            f"{tool}: {unknown[0]!r} is not an argument of {tool}; its arguments are {', '.join(properties) or 'none'}"
        )
    return arguments


def argument_problem(tool: str, schema: dict, error: ValidationError) -> str:
    """The first bad argument as one sentence that starts with its name and says what is wanted."""
    first = error.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else "arguments"
    where = ".".join(str(part) for part in first["loc"])
    if first["type"] == "missing" and where == name:
        return f"{where}: {tool} needs {name!r} ({_wanted(schema.get('properties', {}).get(name, {}))})"
    if first["type"] == "missing":
        return f"{where}: {str(first['loc'][-1])!r} is required in each of {name}"
    got = first.get("input")
    # A short value is echoed; a long one (a whole document) only by its size.
    shown = repr(got) if isinstance(got, (int, float, bool)) or got is None or (isinstance(got, str) and len(got) <= 40) else (
        f"{type(got).__name__} of {len(got)}" if isinstance(got, (str, list, dict)) else type(got).__name__
    )
    wanted = _wanted(schema.get("properties", {}).get(name, {})) if where == name else first["msg"].lower()
    return f"{where}: must be {wanted}, got {shown}"


def _wanted(prop: dict) -> str:
    """What a JSON-schema property takes, in words: `a whole number from 1 to 100`."""
    options = [p for p in prop.get("anyOf", [prop]) if p.get("type") != "null"] or [prop]
    p = options[0]
    kind = p.get("type")
    if "enum" in p:
        return "one of " + ", ".join(map(str, p["enum"]))
    if kind == "integer":
        low, high = p.get("minimum"), p.get("maximum")
        return "a whole number" + (f" from {low} to {high}" if low is not None and high is not None else f" of at least {low}" if low is not None else "")
    if kind == "string":
        low, high = p.get("minLength", 0), p.get("maxLength")
        text = "text" + (f" of {low} to {high} characters" if high else "")
        return text + (f" matching {p['pattern']}" if "pattern" in p else "")
    if kind == "array":
        high = p.get("maxItems")
        return "a list" + (f" of at most {high}" if high else "") + (f" {_wanted(p['items'])} items" if "items" in p else "")
    if kind == "boolean":
        return "true or false"
    return kind or "a value"


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
    from nexus_assets.services.sync import SyncInputError

    try:
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))
    except (queries.NotFound, queries.BadQuery, SyncInputError) as exc:
        raise ToolError(f"{argument}: {exc}") from None


# Every argument a request bounds takes its bounds from the service's request (services/requests.py);
# each tool builds that request, so the service gets what the other shells give it.
TopicId = Annotated[str, Field(**bounds_of(BricksPage, "topic_id"), description="a topic id, as list_topics gives it")]
_TOPIC_IDS = RecallRequest.model_fields["topics"].annotation  # a list of bounded topic ids, or None
Topics = Annotated[_TOPIC_IDS, Field(**bounds_of(RecallRequest, "topics"), description="only these topic ids (default: every topic)")]
BrickId = Annotated[str, Field(**bounds_of(BrickLookup, "brick_id"))]
Speaker = Annotated[str | None, Field(**bounds_of(RecallRequest, "speaker"), description="only what this person said")]
Since = Annotated[str | None, Field(pattern=DAY, description="said on or after YYYY-MM-DD")]
Until = Annotated[str | None, Field(pattern=DAY, description="said on or before YYYY-MM-DD")]


def build_server(config, *, allow_writes: bool = False, jobs=None, writes_off: str = WRITES_OFF) -> MCPServer:
    """`config`: an ApiConfig (db, folders, env, user). `allow_writes`: add the WRITE_TOOLS; without
    it a call to one answers that it writes and `writes_off` (how this server's caller gets it).
    `jobs`: the server's sync worker (services/sync_worker.py, started by the caller): `remember` then
    compiles what it wrote, as a push to the API does, and `sync` runs in turn with those compiles."""
    # WARNING: the SDK would otherwise log every request at INFO on the server's stderr.
    server = NexusServer(name="nexus", instructions=INSTRUCTIONS, version="1", log_level="WARNING")
    # Registered in the order `tools/list` shows them.
    _topic_tools(server, config)
    _question_tools(server, config)
    if allow_writes:
        _write_tools(server, config, jobs)
    else:
        server.writes_off = writes_off
    return server


def _topic_tools(server: MCPServer, config) -> None:
    """Reading a topic: the topics, a topic's bricks, one brick in context."""
    db = config.db

    @server.tool(description=(
        "List the topics in this memory: each one's topic_id, display name, state (DRAFT, ACTIVE, LOCKED) and its "
        "brick counts by state. Call it first: the other tools take these ids as `topic_id` or `topics`. " + VERBATIM
    ))
    async def list_topics() -> list[TopicSummary]:
        return await _call("vault", queries.topics, db)

    @server.tool(description=(
        "Read a topic's bricks in its reading (manifest) order: each brick's brick_id, content, state and sources. "
        "Page with limit/offset; min_state FORMING or FINAL leaves out bricks whose conversations are still open "
        "(IMPROVISE < FORMING < FINAL). To find bricks about something, use recall or search instead. " + VERBATIM
    ))
    async def get_bricks(
        topic_id: TopicId,
        min_state: Literal["IMPROVISE", "FORMING", "FINAL"] = "IMPROVISE",
        include_superseded: bool = False,
        limit: Annotated[int, Field(**bounds_of(BricksPage, "limit"), description="at most this many bricks")] = 100,
        offset: Annotated[int, Field(**bounds_of(BricksPage, "offset"), description="skip this many first")] = 0,
    ) -> list[BrickOut]:
        page = BricksPage(topic_id=topic_id, include_superseded=include_superseded, min_state=min_state, limit=limit, offset=offset)
        return await _call("topic_id", queries.bricks, db, page)

    @server.tool(description=(
        "Check one brick in context: its text, each source with the verbatim conversation text before and after the "
        "quote, its lineage (file, run, extraction, manifests) and a link to the trace viewer. Takes a brick_id or a "
        "unique prefix of at least 6 characters. A passage_id (a sentence of the record, as recall and ask give them) "
        "or its prefix answers the passage instead: its verbatim text, its one source (address, speaker, time, the "
        "conversation's title), the passages around it in its message, and a viewer link. " + VERBATIM
    ))
    async def get_brick(
        brick_id: Annotated[BrickId, Field(description="a brick id or a passage id, or a unique prefix of either")],
    ) -> dict[str, Any]:
        lookup = BrickLookup(brick_id=brick_id)
        return await _call("brick_id", queries.brick_detail, db, lookup, viewer_url=config.env.get("NEXUS_VIEWER_URL"))


def _question_tools(server: MCPServer, config) -> None:
    """Questions over the bricks: by meaning, as a cited answer, by words, and where they disagree."""
    db = config.db

    @server.tool(description=(
        "Find bricks by meaning: the k bricks that best answer `query` (a question or a description, in any words), "
        "best first, each with a confidence from 0 to 1 that never rises down the list, and its sources. Reads only. "
        "Use recall when you do not know the exact words; search for exact words or a phrase; ask for a written, "
        "cited answer. " + VERBATIM
    ))
    async def recall(
        query: Annotated[str, Field(**bounds_of(RecallRequest, "query"), description="what to recall")],
        topics: Topics = None,
        k: Annotated[int, Field(**bounds_of(RecallRequest, "k"), description="how many bricks")] = 5,
        speaker: Speaker = None,
        since: Since = None,
        until: Until = None,
    ) -> RecallOut:
        request = RecallRequest(query=query, topics=topics, k=k, speaker=speaker, since=since, until=until)
        return await _call("query", queries.recall, db, request, env=config.env)

    @server.tool(description=(
        "Get a written answer to `question` in which every sentence cites the bricks it rests on (their brick_ids), "
        "each cited source re-read and checked first; or a refusal when the bricks do not support an answer. Every "
        "answer and refusal is audited with this client as the agent. Use recall instead to get the bricks "
        "themselves. " + VERBATIM
    ))
    async def ask(
        question: Annotated[str, Field(**bounds_of(AskRequest, "question"), description="the question")],
        ctx: Context,
        topics: Topics = None,
        speaker: Speaker = None,
        since: Since = None,
        until: Until = None,
    ) -> AnswerOut:
        request = AskRequest(question=question, topics=topics, speaker=speaker, since=since, until=until)
        return await _call("question", queries.ask, db, request, user=config.user, agent=client_name(ctx), env=config.env)

    @server.tool(description=(
        "Find bricks by their words: full-text (BM25) search for `query`, words or \"a phrase in quotes\", ranked, "
        "with the matching words highlighted and the conversation each was said in. Use search when you know the "
        "words; recall to search by meaning. (`q` and `topic` are accepted for `query` and `topics`.) " + VERBATIM
    ))
    async def search(
        query: Annotated[str, Field(**bounds_of(SearchRequest, "text"), description='words, or "a phrase" in quotes')],
        topics: Topics = None,
        limit: Annotated[int, Field(**bounds_of(SearchRequest, "limit"), description="at most this many hits")] = 20,
    ) -> list[SearchHit]:
        return await _call("query", queries.search, db, SearchRequest(text=query, topics=topics or None, limit=limit))

    @server.tool(description=(
        "List the disagreements in a topic: pairs of related bricks that state different values (numbers, dates, "
        "names, versions, yes/no), side by side with their sources and when each was said. Nexus never picks a side: "
        "show both to the person. " + VERBATIM
    ))
    async def conflicts(topic_id: TopicId) -> list[Conflict]:
        found = await _call("topic_id", queries.conflicts, db, topic_id)
        return found[0]


def _write_tools(server: MCPServer, config, jobs) -> None:
    """The tools that change the memory (`nexus mcp --allow-writes`), in `tools/list` order."""
    _compile_tools(server, config, jobs)
    _forget_tool(server, config)
    _teach_tools(server, config)


def _compile_tools(server: MCPServer, config, jobs) -> None:
    """Conversations in (`remember`), bricks out (`sync`)."""
    from nexus_assets.services.sync import SyncRequest, check, run

    @server.tool(description=(
        "Compile the conversations in the runs folder into bricks (writes the vault): every ACTIVE topic, or the "
        "`topics` named; returns per topic whether it compiled and its checks. Run it after `remember` so what was "
        "said becomes recallable; reselect=true moves the topics to this release's selector, as "
        "`nexus sync --reselect`. " + VERBATIM
    ))
    async def sync(
        topics: Annotated[list[str] | None, Field(**bounds_of(StartSync, "topics"))] = None,
        force_recompile: bool = False,
        extractor: ExtractorName | None = None,
        reselect: bool = False,
    ) -> list[dict[str, Any]]:
        request = SyncRequest(
            db=config.db, runs_dir=config.runs_dir, topics_dir=config.topics_dir, topics=tuple(topics or ()),
            extractor=extractor or config.extractor, no_recall=config.no_recall, force=force_recompile, reselect=reselect,
        )
        checked = await _call("topics", check, request)
        outcome = await anyio.to_thread.run_sync(lambda: jobs.run_now(checked) if jobs is not None else run(checked))
        return outcome.results

    @server.tool(description=(
        "Remember what was said: append messages ({id, role, content, timestamp?}) to your own OPEN run, created if "
        "new; returns the run's status and how many messages it holds and this call added. A message id the run holds "
        "adds nothing (a retry is harmless); the same id with other content is refused. What it adds is compiled into "
        "the topics that read the run in about a second, then `recall` finds it (sync_job_id names that compile). " + VERBATIM
    ))
    async def remember(
        run_id: Annotated[str, Field(**bounds_of(RememberRequest, "run_id"), pattern=RUN_ID_RULE, description="your run's id")],
        messages: Annotated[list[RunMessage], Field(**bounds_of(RememberRequest, "messages"))],
    ) -> RunPushed:
        from pathlib import Path

        from nexus_assets.services.pushing import MessageConflict, PushError, append_messages

        def work() -> RunPushed:
            try:
                pushed = append_messages(
                    Path(config.runs_dir), run_id, [m.model_dump(exclude_none=True) for m in messages], max_bytes=config.max_run_bytes
                )
            except PushError as exc:
                argument = "messages" if isinstance(exc, MessageConflict) or "messages" in str(exc) else "run_id"
                raise ToolError(f"{argument}: {exc}") from None
            job_id = jobs.push_run(pushed) if jobs is not None and pushed.added else None
            return RunPushed(run_id=pushed.run_id, status=pushed.status, messages=pushed.messages, added=pushed.added,
                             sync_job_id=job_id)

        return await anyio.to_thread.run_sync(work)


def _forget_tool(server: MCPServer, config) -> None:
    @server.tool(description=(
        "Erase a run (or every run read from a file) from this memory everywhere, with a tombstone recording what, "
        "who, when and why (a legal erasure: even FINAL bricks go). Without confirm=true only the plan is returned "
        "(the bricks it alone backs, which are removed, and those it shares, which stay). A forget that was "
        "interrupted earlier is finished first. " + VERBATIM
    ))
    async def forget(
        reason: Annotated[str, Field(**bounds_of(ForgetRequest, "reason"), description="why; recorded in the tombstone")],
        run_id: Annotated[str, Field(**bounds_of(ForgetRequest, "run_id"))] | None = None,
        file: Annotated[str, Field(**bounds_of(ForgetRequest, "file"))] | None = None,
        confirm: bool = False,
    ) -> dict[str, Any]:
        from nexus_assets.core.actors import user_actor
        from nexus_assets.services.forgetting import ForgetError, forget_source

        if bool(run_id) == bool(file):
            raise ToolError("run_id: give exactly one of run_id or file")

        def work() -> dict:
            # The one forgetting service (as `nexus forget`): unfinished erasures are finished first.
            try:
                outcome = forget_source(
                    config.db, run_id=run_id, file=file, reason=reason, actor=user_actor("nexus mcp", config.user),
                    confirm=confirm, delete_file=False,
                )
            except ForgetError as exc:
                raise ToolError(f"{'run_id' if run_id else 'file'}: {exc}") from None
            if not confirm:
                return {"plan": outcome.planned, "unfinished": [p["tombstone_id"] for p in outcome.pending], "changed": False}
            return {"report": outcome.last_report, "finished_first": outcome.finished if outcome.report else [], "changed": True}

        return await anyio.to_thread.run_sync(work)


def _teach_tools(server: MCPServer, config) -> None:
    """A person's judgement of a brick (keep, drop), through the teaching service."""

    async def _teach(ctx: Context | None, brick_id: str, verdict: str, reason: str | None) -> Taught:
        from nexus_assets.services.teaching import TeachingRefused, teach_in

        try:
            done = await _call("brick_id", teach_in, config.db, config.topics_dir, brick_id, verdict,
                               reason=reason, actor=client_name(ctx))
        except TeachingRefused as exc:
            raise ToolError(f"brick_id: {exc}") from None
        return Taught(**done.as_json())

    @server.tool(description="Keep: the brick's verbatim text joins its topic's examples to keep (the topic file is "
                 "rewritten, comments kept); the next `sync` keeps sentences like it. Refused on a sealed topic.")
    async def keep(brick_id: BrickId, ctx: Context,
                   reason: Annotated[str | None, Field(**bounds_of(TeachRequest, "reason"))] = None) -> Taught:
        return await _teach(ctx, brick_id, "keep", reason)

    @server.tool(description="Drop: the brick's verbatim text joins its topic's examples to drop (the topic file is "
                 "rewritten, comments kept); the next `sync` leaves it and sentences like it out of the manifest "
                 "(history kept). Refused on a sealed topic.")
    async def drop(brick_id: BrickId, ctx: Context,
                   reason: Annotated[str | None, Field(**bounds_of(TeachRequest, "reason"))] = None) -> Taught:
        return await _teach(ctx, brick_id, "drop", reason)
