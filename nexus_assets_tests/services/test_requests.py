"""A request's bounds are defined once, in the services' typed requests (services/requests.py,
issue 51 item 2): the HTTP API's bodies and parameters, the MCP tools' arguments and the CLI's
checks meet exactly the bounds the models declare, and a value out of them is refused on each
surface with its own clear error (a problem document, a one-sentence tool error, one line and exit 2).

Everything here runs in process on an empty vault: the app through its ASGI interface, the MCP
server through the SDK's in-memory client, the CLI through `main`."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp.client.client import Client

from nexus_assets.api.app import create_app
from nexus_assets.api.config import ApiConfig
from nexus_assets.cli import build_parser
from nexus_assets.mcp_server.tools import build_server
from nexus_assets.services.requests import (
    AskRequest,
    BrickLookup,
    BricksPage,
    ForgetRequest,
    PassageLookup,
    RecallRequest,
    RememberRequest,
    SearchRequest,
    StartSync,
    TeachRequest,
    bounds_of,
    limits,
)
from nexus_assets_tests.cli_helpers import run_cli

# (request, field) -> where each shell takes it: the API's (operation, parameter or body field),
# the MCP tool's (tool, argument); None where that shell has no such argument.
BOUNDED = {
    (RecallRequest, "query"): (("/v1/recall", "post", "query"), ("recall", "query")),
    (RecallRequest, "topics"): (("/v1/recall", "post", "topics"), ("recall", "topics")),
    (RecallRequest, "k"): (("/v1/recall", "post", "k"), ("recall", "k")),
    (RecallRequest, "speaker"): (("/v1/recall", "post", "speaker"), ("recall", "speaker")),
    (AskRequest, "question"): (("/v1/ask", "post", "question"), ("ask", "question")),
    (AskRequest, "topics"): (("/v1/ask/preview", "post", "topics"), ("ask", "topics")),
    (AskRequest, "user"): (("/v1/ask", "post", "user"), None),
    (AskRequest, "agent"): (("/v1/ask", "post", "agent"), None),
    (SearchRequest, "text"): (("/v1/search", "get", "q"), ("search", "query")),
    (SearchRequest, "topics"): (("/v1/search", "get", "topic"), ("search", "topics")),
    (SearchRequest, "limit"): (("/v1/search", "get", "limit"), ("search", "limit")),
    (BricksPage, "topic_id"): (None, ("get_bricks", "topic_id")),
    (BricksPage, "limit"): (("/v1/topics/{topic_id}/bricks", "get", "limit"), ("get_bricks", "limit")),
    (BricksPage, "offset"): (("/v1/topics/{topic_id}/bricks", "get", "offset"), ("get_bricks", "offset")),
    (BrickLookup, "brick_id"): (None, ("get_brick", "brick_id")),
    (PassageLookup, "passage_id"): (("/v1/passages/{passage_id}", "get", "passage_id"), None),
}


def declared(model, name: str) -> tuple:
    """(lowest, highest) the request declares for a field, whether on it or on its non-null type."""
    return seen(model.model_json_schema()["properties"][name])


def seen(schema: dict) -> tuple:
    """(lowest, highest) of a JSON-schema property: a number's range, a text's or a list's length."""
    schema = next((s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"), schema)
    low = schema.get("minimum", schema.get("minLength", schema.get("minItems", 0)))
    return low, schema.get("maximum", schema.get("maxLength", schema.get("maxItems")))


@pytest.fixture
def config(tmp_path: Path) -> ApiConfig:
    """A server's configuration over an empty vault (made as `nexus sync` would, with nothing to sync)."""
    from nexus_assets.store import Vault

    db = tmp_path / "vault.duckdb"
    with Vault.open(str(db)):
        pass
    return ApiConfig(db=str(db), runs_dir=str(tmp_path / "runs"), topics_dir=str(tmp_path / "topics"), warm=False, mcp=False)


def mcp_calls(config: ApiConfig, calls: list[tuple[str, dict]]) -> tuple[dict, list]:
    async def run():
        async with Client(build_server(config)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            return tools, [await client.call_tool(name, arguments) for name, arguments in calls]

    return anyio.run(run)


def test_the_api_and_the_mcp_tools_meet_the_bounds_the_requests_declare(config: ApiConfig):
    openapi = create_app(config).openapi()
    tools, _ = mcp_calls(config, [])

    def api(path: str, method: str, name: str) -> tuple:
        operation = openapi["paths"][path][method]
        for parameter in operation.get("parameters", []):
            if parameter["name"] == name:
                return seen(parameter["schema"])
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].split("/")[-1]
        return seen(openapi["components"]["schemas"][ref]["properties"][name])

    for (model, name), (api_at, mcp_at) in BOUNDED.items():
        expected = declared(model, name)
        assert expected[1] is not None, (model.__name__, name)
        if api_at is not None:
            assert api(*api_at) == expected, (model.__name__, name, api_at)
        if mcp_at is not None:
            tool, argument = mcp_at
            assert seen(tools[tool].input_schema["properties"][argument]) == expected, (model.__name__, name, mcp_at)
    # The bodies are the requests themselves, under the names the OpenAPI document has always had.
    assert openapi["paths"]["/v1/recall"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/RecallBody")
    assert openapi["components"]["schemas"]["RecallBody"]["properties"].keys() == RecallRequest.model_fields.keys()
    assert openapi["components"]["schemas"]["AskBody"]["properties"].keys() == AskRequest.model_fields.keys()


def test_the_cli_meets_the_bounds_the_requests_declare(config: ApiConfig, capsys):
    parser = build_parser()
    for argv, (model, name) in ((["recall", "v", "--k"], (RecallRequest, "k")), (["search", "v", "--limit"], (SearchRequest, "limit"))):
        low, high = limits(model, name)
        for value in (low, high):
            assert getattr(parser.parse_args([*argv, str(value)]), name) == value
        for value in (low - 1, high + 1):
            with pytest.raises(SystemExit) as refused:
                parser.parse_args([*argv, str(value)])
            assert refused.value.code == 2
    db = ["--db", config.db]
    most = {field: limits(model, field)[1] for model, field in ((RecallRequest, "query"), (AskRequest, "question"), (SearchRequest, "text"))}
    for argv, line in (
        (["recall", "x" * (most["query"] + 1)], f"nexus: the query is {most['query'] + 1} characters; at most {most['query']} are taken"),
        (["ask", "x" * (most["question"] + 1)], f"nexus: the question is {most['question'] + 1} characters; at most {most['question']} are taken"),
        (["search", "x" * (most["text"] + 1)], f"nexus: the search text is {most['text'] + 1} characters; at most {most['text']} are taken"),
    ):
        code, _, err = run_cli(capsys, *db, *argv)
        assert (code, err.strip()) == (2, line)
    # At the bound the request is made and the query answers (an empty vault: no bricks).
    code, out, err = run_cli(capsys, *db, "search", "x" * most["text"])
    assert (code, err) == (0, ""), err


def test_a_value_out_of_bounds_is_refused_by_the_api_as_a_problem(config: ApiConfig):
    k = limits(RecallRequest, "k")[1]
    search_limit = limits(SearchRequest, "limit")[1]
    with TestClient(create_app(config), base_url="http://127.0.0.1") as client:
        recall = client.post("/v1/recall", json={"query": "vault", "k": k + 1})
        search = client.get("/v1/search", params={"q": "vault", "limit": search_limit + 1})
        at_bound = client.get("/v1/search", params={"q": "vault", "limit": search_limit})
    assert (recall.status_code, recall.headers["content-type"]) == (422, "application/problem+json")
    assert recall.json()["detail"] == f"body.k: Input should be less than or equal to {k}"
    assert recall.json()["errors"] == [{"loc": ["body", "k"], "msg": f"Input should be less than or equal to {k}", "type": "less_than_equal"}]
    assert (search.status_code, search.json()["detail"]) == (422, f"query.limit: Input should be less than or equal to {search_limit}")
    assert (at_bound.status_code, at_bound.json()) == (200, [])


def test_a_value_out_of_bounds_is_refused_by_the_mcp_tools_in_one_sentence(config: ApiConfig):
    low, high = limits(RecallRequest, "k")
    most_topics = limits(RecallRequest, "topics")[1]
    _, (k, topics, offset, short_id) = mcp_calls(config, [
        ("recall", {"query": "vault", "k": high + 1}),
        ("search", {"query": "vault", "topics": ["ops"] * (most_topics + 1)}),
        ("get_bricks", {"topic_id": "ops", "offset": -1}),
        ("get_brick", {"brick_id": "abc"}),
    ])
    assert all(r.is_error for r in (k, topics, offset, short_id))
    assert k.content[0].text == f"k: must be a whole number from {low} to {high}, got {high + 1}"
    assert topics.content[0].text.startswith(f"topics: must be a list of at most {most_topics} ")
    offset_low, offset_high = limits(BricksPage, "offset")
    assert offset.content[0].text == f"offset: must be a whole number from {offset_low} to {offset_high}, got -1"
    id_low, id_high = limits(BrickLookup, "brick_id")
    assert short_id.content[0].text == f"brick_id: must be text of {id_low} to {id_high} characters, got 'abc'"


def test_a_value_out_of_bounds_is_one_line_and_exit_2_on_the_cli(config: ApiConfig, capsys):
    db = ["--db", config.db]
    most_topics, most_name = limits(RecallRequest, "topics")[1], limits(RecallRequest, "speaker")[1]
    many = [arg for _ in range(most_topics + 1) for arg in ("--topic", "ops")]
    code, _, err = run_cli(capsys, *db, "search", "vault", *many)
    assert (code, err.strip()) == (2, f"nexus: {most_topics + 1} topics given; at most {most_topics} are taken")
    code, _, err = run_cli(capsys, *db, "recall", "vault", "--speaker", "s" * (most_name + 1))
    assert (code, err.strip()) == (2, f"nexus: the speaker is {most_name + 1} characters; at most {most_name} are taken")
    code, _, err = run_cli(capsys, *db, "ask", "why?", "--speaker", "")
    assert (code, err.strip()) == (2, "nexus: give a speaker")
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(["recall", "vault", "--k", str(limits(RecallRequest, "k")[1] + 1)])
    assert refused.value.code == 2
    assert f"must be from 1 to {limits(RecallRequest, 'k')[1]}, got" in capsys.readouterr().err


def test_bounds_of_gives_the_keywords_a_shell_declares_an_argument_with():
    assert bounds_of(RecallRequest, "k") == {"ge": 1, "le": 100}
    assert bounds_of(SearchRequest, "text") == {"min_length": 1, "max_length": 1000}
    assert bounds_of(BricksPage, "limit") == {"ge": 0, "le": 100_000}
    assert bounds_of(AskRequest, "speaker") == {"min_length": 1, "max_length": 200}, "on the type it takes when not None"
    with pytest.raises(KeyError, match="RecallRequest.since declares no bounds"):
        bounds_of(RecallRequest, "since")


# The writing tools (`nexus mcp --allow-writes`) and the API bodies that write: (request, field) ->
# (API schema component and field, or None; MCP tool and argument).
WRITING = {
    (StartSync, "topics"): (("SyncInitiate", "topic_ids"), ("sync", "topics")),
    (RememberRequest, "run_id"): (None, ("remember", "run_id")),
    (RememberRequest, "messages"): (("RunMessages", "messages"), ("remember", "messages")),
    (ForgetRequest, "reason"): (None, ("forget", "reason")),
    (ForgetRequest, "run_id"): (None, ("forget", "run_id")),
    (ForgetRequest, "file"): (None, ("forget", "file")),
    (TeachRequest, "reason"): (("TeachBody", "reason"), ("keep", "reason")),
}


def test_the_writing_requests_bounds_are_the_ones_the_api_and_the_mcp_tools_meet(config: ApiConfig):
    """A sync's topics, a push's messages, a forget's reason and a teaching's reason: one number
    each, the same on the API's bodies and the MCP write tools, and a push past it is refused."""
    openapi = create_app(config).openapi()

    async def run():
        async with Client(build_server(config, allow_writes=True)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            too_many = await client.call_tool("remember", {"run_id": "agent-1", "messages": [
                {"id": f"m{i}", "role": "user", "content": "x"} for i in range(limits(RememberRequest, "messages")[1] + 1)]})
            long_reason = await client.call_tool("drop", {"brick_id": "abcdef", "reason": "r" * (limits(TeachRequest, "reason")[1] + 1)})
            return tools, too_many, long_reason

    tools, too_many, long_reason = anyio.run(run)
    for (model, name), (api_at, (tool, argument)) in WRITING.items():
        expected = declared(model, name)
        assert expected[1] is not None, (model.__name__, name)
        assert seen(tools[tool].input_schema["properties"][argument]) == expected, (model.__name__, name, tool)
        if api_at is not None:
            component, field = api_at
            assert seen(openapi["components"]["schemas"][component]["properties"][field]) == expected, (component, field)
    assert seen(tools["drop"].input_schema["properties"]["reason"]) == declared(TeachRequest, "reason")
    assert too_many.is_error and too_many.content[0].text.startswith("messages: ")
    assert long_reason.is_error and long_reason.content[0].text.startswith("reason: ")
    assert not (Path(config.runs_dir) / "pushed").exists() or not list((Path(config.runs_dir) / "pushed").iterdir()), "a refused push writes nothing"
