"""A passage id, or a unique prefix of one, opens wherever a brick id does (DESIGN §7, §10, §10.1;
issue 58 item 4): `nexus trace` shows the message it was said in with its text marked, its address,
the conversation, who said it and when, and whether the run file still holds it; `GET
/v1/passages/{id}`, MCP `get_brick` and the viewer's `/passages/<id>` answer the same passage. An
unknown, ambiguous or too short id is refused on every shell with one message naming it.

One real synced project (the shipped sample plus a few runs written here), the real command, a
real `nexus api` (uvicorn) with its MCP tools at /mcp through the SDK's client."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
import urllib.error
import urllib.request

import anyio
import httpx2
import pytest
from mcp.client.client import Client
from markupsafe import escape
from mcp.client.streamable_http import streamable_http_client

from nexus_assets_tests.api_helpers import api_server
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.project import Project, nexus_run, sample_project

TOPIC = "pantry"
SAID = "The oats go on the top shelf."
ASKED = "Where do the oats go?"
AFTER = "Keep the lid closed so nothing gets in."
NOTE = "The pantry shelf holds the flour and the oats."
ASSISTANT = "$['messages'][1]['content']"
WHEN = "2026-04-02T00:01:00.000000Z"  # the assistant's message of run `oats` (nexus_run stamps message i at 00:0i)
# Found by search over run ids (the ids are hashes): the passage SAID of runs shelf-4147 and
# shelf-4458 start with the same 6 hex digits, and so do the passage NOTE of run pantry-22534050 and
# the brick NOTE makes in the topic `pantry`. The tests check that they do.
TWINS = ("shelf-4147", "shelf-4458")
BRICK_TWIN = "pantry-22534050"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def passage_id(run_id: str, json_path: str, start: int, end: int) -> str:
    """DESIGN §1, written out here rather than imported from the code under test."""
    return sha256(f"{run_id}:{json_path}:{start}:{end}")


def brick_id(topic_id: str, text: str) -> str:
    normalized = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()
    return sha256(f"{topic_id}:{sha256(normalized)}")


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> Project:
    from nexus_assets.cli import main

    p = sample_project(tmp_path_factory.mktemp("passages") / "proj")
    p.write_topic(TOPIC, keywords=["pantry"])
    p.write_run("kitchen/oats.json", nexus_run("oats", [("user", ASKED), ("assistant", f"{SAID} {AFTER}")], start="2026-04-02T09:00:00Z")
                | {"title": "Pantry notes"})
    for run_id in TWINS:
        p.write_run(f"kitchen/{run_id}.json", nexus_run(run_id, [("user", ASKED), ("assistant", SAID)], start="2026-04-03T09:00:00Z"))
    p.write_run(f"kitchen/{BRICK_TWIN}.json", nexus_run(BRICK_TWIN, [("user", "Where does the flour go?"), ("assistant", NOTE)],
                                                        start="2026-04-04T09:00:00Z"))
    assert main([*p.sync_args(), "--json"]) == 0
    return p


def oats() -> str:
    return passage_id("oats", ASSISTANT, 0, len(SAID))


def cli(capsys, p: Project, *argv: str):
    return run_json(capsys, *p.cli_args(), *argv)


def test_trace_of_a_passage_marks_its_text_in_its_message_with_who_said_it_and_when(record: Project, capsys):
    pid = oats()
    code, out, err = run_cli(capsys, *record.cli_args(), "trace", pid[:12])
    assert (code, err) == (0, "")
    lines = out.splitlines()
    # The message's time, as the vault stores every timestamp (microseconds, UTC).
    assert lines[0] == f"passage {pid[:12]}  said by assistant at {WHEN}"
    assert lines[1] == f"\u201c{SAID}\u201d"
    assert lines[3] == "runs/kitchen/oats.json" or lines[3].endswith("kitchen/oats.json")
    assert "conversation \u201cPantry notes\u201d (2026-04-02) · oats" in out
    assert f"assistant message  {ASSISTANT}" in out
    assert f"\u27e6{SAID}\u27e7 {AFTER}" in out
    assert f"characters [0:{len(SAID)}] of the message" in out and "matches the run file now" in out

    traced = cli(capsys, record, "trace", pid)
    # The message as the run file on disk holds it, read here without the code under test.
    on_disk = json.loads((record.runs / "kitchen" / "oats.json").read_text(encoding="utf-8"))["messages"][1]
    assert traced["node_text"] == on_disk["content"] and traced["content"] == SAID
    (source,) = traced["sources"]
    assert traced["node_text"][source["start"] : source["end"]] == SAID
    assert source == {
        "run_id": "oats", "json_path": ASSISTANT, "start": 0, "end": len(SAID), "node_checksum": sha256(on_disk["content"]),
        "node_type": "assistant_message", "branch": "current", "stale": False, "speaker": "assistant", "time": WHEN,
        "run_title": "Pantry notes", "run_date": "2026-04-02",
    }
    assert (traced["kind"], traced["passage_id"], traced["speaker"], traced["time"]) == ("passage", pid, "assistant", WHEN)
    assert (traced["current"], traced["problem"], traced["run_status"]) == (True, None, "CLOSED")
    assert traced["source_file"].endswith("kitchen/oats.json") and traced["viewer_url"].endswith(f"/passages/{pid}")
    # The text around it: the passages of its message, in order, itself among them.
    assert [(a["content"], a["start"]) for a in traced["around"]] == [(SAID, 0), (AFTER, len(SAID) + 1)]
    assert traced["around"][0]["passage_id"] == pid

    # A brick id still traces the brick, as before.
    brick = cli(capsys, record, "bricks", "storage-decisions")[0]
    assert cli(capsys, record, "trace", brick["brick_id"][:12])["brick_id"] == brick["brick_id"]


def test_a_passage_opens_the_same_through_the_api_mcp_and_the_viewer(record: Project, capsys):
    pid = oats()
    traced = cli(capsys, record, "trace", pid)
    expected = {k: v for k, v in traced.items() if k != "node_text"}
    with api_server(record) as api:
        for given in (pid, pid[:12], pid[:6]):
            status, headers, body = api.get(f"/v1/passages/{given}")
            assert (status, headers["content-type"], body) == (200, "application/json", expected), given

        async def agent():
            async with httpx2.AsyncClient(timeout=120) as http:
                async with Client(streamable_http_client(api.base + "/mcp", http_client=http)) as client:
                    tools = {t.name: t for t in (await client.list_tools()).tools}
                    return tools["get_brick"], [await client.call_tool("get_brick", {"brick_id": g}) for g in (pid, pid[:8])]

        tool, answers = anyio.run(agent)
        assert "passage" in tool.description and "verbatim" in tool.description
        for answer in answers:
            assert not answer.is_error, answer.content
            assert answer.structured_content == expected

        with urllib.request.urlopen(f"{api.base}/passages/{pid[:12]}", timeout=60) as response:
            page = response.read().decode("utf-8")
    # The passage marked in its message, then its address, speaker, time and conversation.
    assert f'<mark class="hit">{SAID}</mark> {AFTER}</blockquote>' in page
    for shown in ("assistant said", traced["time"], "“Pantry notes” (2026-04-02)", str(escape(ASSISTANT)), f"[0, {len(SAID)})",
                  "✓ matches the run file", pid):
        assert shown in page, shown


def test_unknown_ambiguous_and_too_short_ids_are_named_on_every_shell(record: Project, capsys):
    twins = [passage_id(r, ASSISTANT, 0, len(SAID)) for r in TWINS]
    brick, passage = brick_id(TOPIC, NOTE), passage_id(BRICK_TWIN, ASSISTANT, 0, len(NOTE))
    assert twins[0][:6] == twins[1][:6] and twins[0][:7] != twins[1][:7]
    assert brick[:6] == passage[:6] and brick[:7] != passage[:7]
    assert brick in {b["brick_id"] for b in cli(capsys, record, "bricks", TOPIC)}, "the note is a brick of its topic"
    unknown, ambiguous, both, short = "0" * 64, twins[0][:6], brick[:6], oats()[:5]

    said = {}
    for given in (unknown, ambiguous, both, short):
        code, out, err = run_cli(capsys, *record.cli_args(), "trace", given)
        assert code == 2 and out == "" and len(err.splitlines()) == 1 and repr(given) in err, (given, err)
        said[given] = err.strip()
    assert said[unknown].startswith(f"nexus: no brick or passage {unknown!r}")
    assert said[ambiguous] == f"nexus: passage id prefix {ambiguous!r} names more than one passage; give more characters"
    assert said[both] == f"nexus: id prefix {both!r} starts a brick's id and a passage's; give more characters"
    # Shorter than a brick prefix may be: only a brick can be named so (the sample has none with this prefix).
    assert said[short].startswith(f"nexus: no brick {short!r}") and "at least 6 characters" in said[short]
    # One more character names each one.
    assert cli(capsys, record, "trace", twins[0][:7])["passage_id"] == twins[0]
    assert cli(capsys, record, "trace", brick[:7])["brick_id"] == brick
    assert cli(capsys, record, "trace", passage[:7])["passage_id"] == passage

    with api_server(record) as api:
        for given in (unknown, ambiguous):
            status, headers, body = api.get(f"/v1/passages/{given}")
            assert (status, headers["content-type"]) == (404, "application/problem+json") and repr(given) in body["detail"], body
        status, headers, body = api.get(f"/v1/passages/{short}")
        assert (status, headers["content-type"]) == (422, "application/problem+json")
        assert body["detail"] == "path.passage_id: String should have at least 6 characters"
        assert api.get(f"/v1/bricks/{short}")[0] == 422, "refused as a brick id of that length is"

        async def agent():
            async with httpx2.AsyncClient(timeout=120) as http:
                async with Client(streamable_http_client(api.base + "/mcp", http_client=http)) as client:
                    return {g: await client.call_tool("get_brick", {"brick_id": g}) for g in (unknown, ambiguous, both, short)}

        tools = anyio.run(agent)
        pages = {}
        for given in (unknown, ambiguous, short):
            try:
                urllib.request.urlopen(f"{api.base}/passages/{given}", timeout=60)
            except urllib.error.HTTPError as exc:
                pages[given] = (exc.code, exc.read().decode("utf-8"))
    # The message the CLI prints, naming the argument (the SDK puts its own words before a tool's error).
    for given, answer in tools.items():
        assert answer.is_error and "\n" not in answer.content[0].text
    for given in (unknown, ambiguous, both):
        assert tools[given].content[0].text.endswith("brick_id: " + said[given].removeprefix("nexus: ")), given
    assert tools[short].content[0].text == f"brick_id: must be text of 6 to 64 characters, got {short!r}"
    for given, (status, page) in pages.items():
        assert status == 404 and str(escape(repr(given))) in page, given
    assert "names more than one passage" in pages[ambiguous][1] and "at least 6 characters" in pages[short][1]


def test_a_passage_its_run_no_longer_holds_is_traced_as_drifted(tmp_path, capsys):
    from nexus_assets.cli import main

    p = Project(tmp_path / "proj")
    p.write_topic(TOPIC, keywords=["pantry"])
    run = nexus_run("oats", [("user", ASKED), ("assistant", f"{SAID} {AFTER}")], start="2026-04-02T09:00:00Z")
    path = p.write_run("oats.json", run)
    assert main([*p.sync_args(), "--json"]) == 0
    pid = oats()
    assert cli(capsys, p, "trace", pid)["current"] is True

    edited = "Oats now live on the lowest shelf of the pantry."
    run["messages"][1]["content"] = f"{edited} {AFTER}"
    path.write_text(json.dumps(run), encoding="utf-8")
    assert main([*p.sync_args(), "--json"]) == 0
    traced = cli(capsys, p, "trace", pid)
    # Shown as the run version it was said in reads it, with why the file no longer holds it.
    assert (traced["content"], traced["current"], traced["sources"][0]["stale"]) == (SAID, False, True)
    assert traced["problem"] == "run oats was read again and its latest version no longer holds this text at this place"
    assert [a["content"] for a in traced["around"]] == [SAID, AFTER]
    code, out, _ = run_cli(capsys, *p.cli_args(), "trace", pid[:12])
    assert code == 0 and out.splitlines()[0].startswith(f"passage {pid[:12]}  STALE")
    assert f"DRIFTED: {traced['problem']}" in out
    # What the file says now is a passage of its own, and current.
    now = cli(capsys, p, "trace", passage_id("oats", ASSISTANT, 0, len(edited)))
    assert (now["content"], now["current"]) == (edited, True)
