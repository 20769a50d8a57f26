"""`nexus mcp` (DESIGN §10.1) through the official SDK's own client: over stdio (as a desktop agent
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

from nexus_assets_tests.api_helpers import api_server
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.project import REPO, Project, sample_project

READ_TOOLS = {"list_topics", "get_bricks", "get_brick", "recall", "ask", "search", "conflicts"}


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
        seen["search"] = structured(await client.call_tool("search", {"q": "vault", "topic": "storage-decisions"}))
        seen["conflicts"] = structured(await client.call_tool("conflicts", {"topic_id": "nexus-server-sync"}))
        seen["recall"] = structured(await client.call_tool("recall", {"query": "where is the vault stored", "k": 3}))
        seen["ask"] = structured(await client.call_tool("ask", {"question": "where is the vault stored"}))
        seen["refused"] = structured(await client.call_tool("ask", {"question": "what is the capital of France"}))
        seen["by_speaker"] = structured(await client.call_tool("recall", {"query": "vault", "speaker": "assistant", "k": 3}))
        seen["bad_since"] = await client.call_tool("recall", {"query": "vault", "since": "yesterday"})
        seen["unknown_topic"] = await client.call_tool("get_bricks", {"topic_id": "no-such-topic"})
        seen["bad_k"] = await client.call_tool("recall", {"query": "vault", "k": 0})
        seen["after"] = structured(await client.call_tool("list_topics", {}))
    return seen


def check(seen: dict, p: Project, capsys) -> None:
    assert READ_TOOLS <= set(seen["tools"]) and not {"sync", "forget"} & set(seen["tools"])
    for tool in seen["tools"].values():
        assert "verbatim" in (tool.description or "")
    assert seen["list_topics"] == cli(capsys, p, "topics") == seen["after"]
    assert seen["get_bricks"] == cli(capsys, p, "bricks", "storage-decisions")
    assert seen["search"] == cli(capsys, p, "search", "vault", "--topic", "storage-decisions")
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
    assert seen["bad_k"].is_error and "k" in seen["bad_k"].content[0].text


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
        check(seen, synced, capsys)

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
    assert {"sync", "forget"} <= names
    assert [r["topic_id"] for r in results] == ["storage-decisions"] and results[0]["success"]
    assert unknown.is_error and "run_id" in unknown.content[0].text
