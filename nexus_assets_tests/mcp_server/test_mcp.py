"""`nexus mcp` (docs/agents.md) through the official SDK's own client: over stdio (as a desktop agent
starts it) and over streamable HTTP at /mcp on `nexus api`. Tool answers are the CLI's --json
objects; a bad argument is a tool error naming it and the server keeps answering; writes only
with --allow-writes; `ask` is audited with the client's name as the agent."""

from __future__ import annotations

import os
import sys

import anyio
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from nexus_assets.mcp_server.tools import WRITE_TOOLS, WRITES_OFF
from nexus_assets_tests.api_helpers import api_server
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.project import REPO, Project, sample_project

READ_TOOLS = {"list_topics", "get_bricks", "get_brick", "recall", "ask", "search", "conflicts"}
# What a write tool called at /mcp on `nexus api` (always read-only) answers after "is a write tool; ".
API_WRITES_OFF = (
    "the tools at /mcp on `nexus api` only read: start `nexus mcp --allow-writes` to use it, "
    "or call this API's HTTP routes that write (docs/agents.md)"
)


@pytest.fixture(scope="module")
def synced(tmp_path_factory) -> Project:
    from nexus_assets.cli import main

    p = sample_project(tmp_path_factory.mktemp("mcp") / "proj")
    assert main([*p.sync_args(), "--json"]) == 0
    return p


def stdio(p: Project, *flags: str) -> Client:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nexus_assets.cli", "--db", str(p.db), "mcp", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics), *flags],
        env=env,
    )
    return Client(params)


def cli(capsys, p: Project, *argv: str):
    return run_json(capsys, "--db", str(p.db), *argv)


def structured(result):
    assert not result.is_error, result.content
    data = result.structured_content
    return data["result"] if set(data) == {"result"} else data


async def exercise(client: Client, p: Project, expected: dict) -> dict:
    """Every read tool once, a bad argument, then a call that must still be answered."""
    seen = {}
    async with client:
        seen["tools"] = {t.name: t for t in (await client.list_tools()).tools}
        seen["list_topics"] = structured(await client.call_tool("list_topics", {}))
        seen["get_bricks"] = structured(await client.call_tool("get_bricks", {"topic_id": "storage-decisions"}))
        seen["get_brick"] = structured(await client.call_tool("get_brick", {"brick_id": expected["brick_id"]}))
        seen["search"] = structured(await client.call_tool("search", {"query": "vault", "topics": ["storage-decisions"]}))
        seen["search_old_names"] = structured(await client.call_tool("search", {"q": "vault", "topic": "storage-decisions"}))
        seen["conflicts"] = structured(await client.call_tool("conflicts", {"topic_id": "nexus-server-sync"}))
        seen["recall"] = structured(await client.call_tool("recall", {"query": "where is the vault stored", "k": 3}))
        seen["ask"] = structured(await client.call_tool("ask", {"question": "where is the vault stored"}))
        seen["refused"] = structured(await client.call_tool("ask", {"question": "what is the capital of France"}))
        seen["by_speaker"] = structured(await client.call_tool("recall", {"query": "vault", "speaker": "assistant", "k": 3}))
        seen["bad_since"] = await client.call_tool("recall", {"query": "vault", "since": "yesterday"})
        seen["unknown_topic"] = await client.call_tool("get_bricks", {"topic_id": "no-such-topic"})
        seen["bad_k"] = await client.call_tool("recall", {"query": "vault", "k": 0})
        # Issue 59 item 3: a write tool on a read-only server says why it is not there.
        seen["write_sync"] = await client.call_tool("sync", {"topics": ["storage-decisions"]})
        seen["write_keep"] = await client.call_tool("keep", {"brick_id": expected["brick_id"]})
        seen["no_such_tool"] = await client.call_tool("summarise", {})
        seen["after"] = structured(await client.call_tool("list_topics", {}))
    return seen


def check(seen: dict, p: Project, capsys, *, writes_off: str = WRITES_OFF) -> None:
    assert set(seen["tools"]) == READ_TOOLS, "tools/list of a read-only server: the read tools only"
    for tool in seen["tools"].values():
        assert "verbatim" in (tool.description or "")
    assert_descriptions_for_agents(seen["tools"])
    assert seen["list_topics"] == cli(capsys, p, "topics") == seen["after"]
    assert seen["get_bricks"] == cli(capsys, p, "bricks", "storage-decisions")
    assert seen["search"] == seen["search_old_names"] == cli(capsys, p, "search", "vault", "--topic", "storage-decisions")
    assert seen["conflicts"] == cli(capsys, p, "conflicts", "nexus-server-sync")
    expected = cli(capsys, p, "recall", "where is the vault stored", "--k", "3")
    assert [r["brick_id"] for r in seen["recall"]["results"]] == [r["brick_id"] for r in expected["results"]]
    detail = seen["get_brick"]
    source = detail["sources"][0]
    assert source["quote"] == detail["brick"]["content"] and "before" in source and "after" in source
    assert detail["viewer_url"].endswith("#brick-" + detail["brick"]["brick_id"]) and detail["lineage"]["manifests"]
    assert seen["ask"]["outcome"] == "answered"
    # Nothing relevant enough: a refusal (not a tool error), audited like an answer.
    assert seen["refused"]["outcome"] == "refused" and seen["refused"]["reason"] and seen["refused"]["audit_id"]
    assert seen["by_speaker"]["results"] and all(
        any(s["speaker"] == "assistant" for s in r["sources"]) for r in seen["by_speaker"]["results"]
    )
    assert seen["bad_since"].is_error and "since" in seen["bad_since"].content[0].text
    audit = {r["audit_id"]: r for r in cli(capsys, p, "audit")}
    assert audit[seen["ask"]["audit_id"]]["agent"].startswith("mcp:")
    assert audit[seen["refused"]["audit_id"]]["outcome"] == "refused"
    assert seen["unknown_topic"].is_error and "topic_id" in seen["unknown_topic"].content[0].text
    assert seen["bad_k"].is_error and seen["bad_k"].content[0].text == "k: must be a whole number from 1 to 100, got 0"
    assert_writes_refused_by_name(seen, writes_off)


def assert_writes_refused_by_name(seen: dict, writes_off: str) -> None:
    """A write tool called on a read-only server is a tool error naming the tool and how to get it
    (not the SDK's bare "Unknown tool"); a tool that does not exist at all is still unknown, and
    nothing was written (the read that follows answers as before)."""
    for name in ("sync", "keep"):
        result = seen[f"write_{name}"]
        assert result.is_error and result.content[0].text == f"{name} is a write tool; {writes_off}"
        assert "--allow-writes" in result.content[0].text
    assert seen["no_such_tool"].is_error and seen["no_such_tool"].content[0].text == "Unknown tool: summarise"


def test_tools_over_stdio_answer_the_cli_json(synced: Project, capsys):
    brick = cli(capsys, synced, "bricks", "storage-decisions")[0]
    seen = anyio.run(exercise, stdio(synced), synced, brick)
    check(seen, synced, capsys)


def test_tools_over_http_behind_the_token(synced: Project, capsys):
    brick = cli(capsys, synced, "bricks", "storage-decisions")[0]
    token = "mcp-test-token"
    with api_server(synced, token=token) as api:

        async def run():
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
                return await exercise(Client(streamable_http_client(api.base + "/mcp", http_client=http)), synced, brick)

        seen = anyio.run(run)
        check(seen, synced, capsys, writes_off=API_WRITES_OFF)

        async def without_token():
            async with httpx2.AsyncClient(timeout=30) as http:
                async with Client(streamable_http_client(api.base + "/mcp", http_client=http)) as client:
                    await client.list_tools()

        with pytest.raises(BaseException):
            anyio.run(without_token)


def test_writes_only_with_allow_writes(synced: Project):
    async def run():
        async with stdio(synced, "--allow-writes") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            results = structured(await client.call_tool("sync", {"topics": ["storage-decisions"], "force_recompile": True}))
            unknown = await client.call_tool("forget", {"run_id": "no-such-run", "reason": "test"})
            return names, results, unknown

    names, results, unknown = anyio.run(run)
    assert names == READ_TOOLS | set(WRITE_TOOLS), "--allow-writes adds exactly the write tools a read-only server names"
    assert [r["topic_id"] for r in results] == ["storage-decisions"] and results[0]["success"]
    assert unknown.is_error and "run_id" in unknown.content[0].text


def assert_descriptions_for_agents(tools: dict) -> None:
    """Issue 50 item 6: each tool's description is its own (what it returns, when to use it), not one
    boilerplate sentence and a pointer at a CLI command; recall, search and ask say which is for what."""
    descriptions = {name: t.description or "" for name, t in tools.items()}
    firsts = [d.split(". ")[0] for d in descriptions.values()]
    assert len(set(firsts)) == len(firsts), "every tool opens with its own sentence"
    assert not [n for n, d in descriptions.items() if "`nexus " in d], "no pointing at CLI commands"
    for name, others in (("recall", ("search", "ask")), ("search", ("recall",)), ("ask", ("recall",))):
        assert all(o in descriptions[name] for o in others), (name, descriptions[name])
    assert "confidence" in descriptions["recall"] and "never rises" in descriptions["recall"]


def test_search_takes_query_and_topics_and_argument_errors_are_one_sentence_an_agent_can_act_on(synced: Project, capsys):
    async def run():
        async with stdio(synced) as client:
            calls = {
                "one_topic": await client.call_tool("search", {"query": "vault", "topics": "storage-decisions"}),
                "both_names": await client.call_tool("search", {"query": "vault", "q": "vault"}),
                "missing": await client.call_tool("recall", {"topics": ["storage-decisions"]}),
                "unknown": await client.call_tool("recall", {"query": "vault", "topic_ids": ["storage-decisions"]}),
                "too_long": await client.call_tool("search", {"query": "x" * 1001}),
                "bad_state": await client.call_tool("get_bricks", {"topic_id": "storage-decisions", "min_state": "DONE"}),
                "limit": await client.call_tool("get_bricks", {"topic_id": "storage-decisions", "limit": 100_001}),
                "after": await client.call_tool("list_topics", {}),
            }
            tools = {t.name: t for t in (await client.list_tools()).tools}
        return calls, tools

    calls, tools = anyio.run(run)
    assert structured(calls["one_topic"]) == cli(capsys, synced, "search", "vault", "--topic", "storage-decisions")
    texts = {name: r.content[0].text for name, r in calls.items() if r.is_error}
    assert texts == {
        "both_names": "search: give 'query' only ('q' is its old name), not both",
        "missing": "query: recall needs 'query' (text of 1 to 2000 characters)",
        "unknown": "recall: 'topic_ids' is not an argument of recall; its arguments are query, topics, k, speaker, since, until",
        "too_long": "query: must be text of 1 to 1000 characters, got str of 1001",
        "bad_state": "min_state: must be one of IMPROVISE, FORMING, FINAL, got 'DONE'",
        "limit": "limit: must be a whole number from 0 to 100000, got 100001",
    }
    assert all("pydantic" not in t and "\n" not in t for t in texts.values())
    assert structured(calls["after"]) == cli(capsys, synced, "topics"), "the server keeps answering"

    # The same bounds for the same argument in the API, the MCP tools and the CLI.
    from nexus_assets.api.app import create_app
    from nexus_assets.api.config import ApiConfig
    from nexus_assets.cli import build_parser

    openapi = create_app(ApiConfig(db=str(synced.db), runs_dir=str(synced.runs), topics_dir=str(synced.topics), warm=False, mcp=False)).openapi()

    def api_bounds(path: str, method: str, name: str) -> tuple:
        operation = openapi["paths"][path][method]
        if name in {p["name"] for p in operation.get("parameters", [])}:
            schema = next(p["schema"] for p in operation["parameters"] if p["name"] == name)
        else:
            ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].split("/")[-1]
            schema = openapi["components"]["schemas"][ref]["properties"][name]
        schema = next((s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"), schema)
        return schema.get("minimum", schema.get("minLength")), schema.get("maximum", schema.get("maxLength"))

    def mcp_bounds(tool: str, name: str) -> tuple:
        schema = tools[tool].input_schema["properties"][name]
        schema = next((s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"), schema)
        return schema.get("minimum", schema.get("minLength")), schema.get("maximum", schema.get("maxLength"))

    assert api_bounds("/v1/topics/{topic_id}/bricks", "get", "limit") == mcp_bounds("get_bricks", "limit") == (0, 100_000)
    assert api_bounds("/v1/topics/{topic_id}/bricks", "get", "offset") == mcp_bounds("get_bricks", "offset")
    assert api_bounds("/v1/recall", "post", "k") == mcp_bounds("recall", "k") == (1, 100)
    assert api_bounds("/v1/recall", "post", "query") == mcp_bounds("recall", "query") == mcp_bounds("ask", "question")
    assert api_bounds("/v1/search", "get", "limit") == mcp_bounds("search", "limit") == (1, 200)
    assert api_bounds("/v1/search", "get", "q") == mcp_bounds("search", "query")
    parser = build_parser()
    for argv in (["recall", "vault", "--k", "101"], ["recall", "vault", "--k", "0"], ["search", "vault", "--limit", "201"]):
        with pytest.raises(SystemExit) as refused:
            parser.parse_args(argv)
        assert refused.value.code == 2, argv
    assert parser.parse_args(["recall", "vault", "--k", "100"]).k == 100 and parser.parse_args(["search", "v", "--limit", "200"]).limit == 200
    from nexus_assets_tests.cli_helpers import run_cli

    for argv, line in (
        (["search", "x" * 1001], "nexus: the search text is 1001 characters; at most 1000 are taken"),
        (["recall", "x" * 2001], "nexus: the query is 2001 characters; at most 2000 are taken"),
        (["ask", "x" * 2001], "nexus: the question is 2001 characters; at most 2000 are taken"),
    ):
        code, _, err = run_cli(capsys, "--db", str(synced.db), *argv)
        assert (code, err.strip()) == (2, line)
