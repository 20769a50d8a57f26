"""Runs pushed live (docs/agents.md, issue 42 item 2) through a real `nexus api` on 127.0.0.1 and the
MCP `remember` tool over stdio: what arrives is a run file under the runs folder first, a retried
message adds nothing, a CLOSED run refuses appends (409), a sync of the topics that read the run is
queued, and the run then compiles and is recalled. (`test_pushed_runs.py` tests the writer itself,
kill -9 included.)"""

from __future__ import annotations

import json
import time

import anyio
import yaml

from nexus_assets.ingest.push import run_path
from nexus_assets_tests.api_helpers import Api, api_server
from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.project import Project

PROBLEM = "application/problem+json"
TOPIC = {
    "topic_id": "agent-memory",
    "display_name": "What the coding agent decided",
    "extraction_policy": {"scope_description": "Decisions the agent and its user made about the deploy and the database.",
                          "required_keywords": ["deploy", "database"]},
    "state": "ACTIVE",
    "min_relevance": 0,  # relevance is test_worth_keeping's business
}


def project(tmp_path) -> Project:
    p = Project(tmp_path / "proj")
    p.runs.mkdir(parents=True)
    p.topics.mkdir(parents=True)
    (p.topics / "agent-memory.yaml").write_text(yaml.safe_dump(TOPIC), encoding="utf-8")
    assert run_nexus(*p.sync_args()).returncode == 0  # an empty vault that knows its folders
    return p


def wait_for(api: Api, job_id: str) -> dict:
    deadline = time.monotonic() + 300
    while True:
        status, _, job = api.get(f"/v1/sync/{job_id}")
        assert status == 200, job
        if job["status"] in ("succeeded", "failed"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.5)


def test_an_agent_run_grows_message_by_message_is_compiled_and_recalled(tmp_path):
    p = project(tmp_path)
    first = {"id": "m1", "role": "user", "content": "We deploy the service to Cloud Run every Friday.", "timestamp": "2026-11-20T10:00:00Z"}
    second = {"id": "m2", "role": "assistant", "content": "The database stays on Cloud SQL with nightly backups.",
              "timestamp": "2026-11-20T10:01:00Z"}
    with api_server(p) as api:
        status, _, pushed = api.post("/v1/runs/agent-42/messages", {"messages": [first]})
        assert status == 200 and (pushed["run_id"], pushed["status"], pushed["messages"], pushed["added"]) == ("agent-42", "OPEN", 1, 1)
        assert pushed["sync_job_id"], "a sync of the topics that read the run is queued"
        # The file under the runs folder is the source of truth, written before the answer.
        path = run_path(p.runs, "agent-42")
        assert json.loads(path.read_text())["messages"] == [first]

        # A retried request (same message id) adds nothing and queues nothing.
        status, _, retried = api.post("/v1/runs/agent-42/messages", {"messages": [first]})
        assert status == 200 and (retried["messages"], retried["added"], retried["sync_job_id"]) == (1, 0, None)

        assert wait_for(api, pushed["sync_job_id"])["status"] == "succeeded"
        status, _, grown = api.post("/v1/runs/agent-42/messages", {"messages": [first, second]})
        assert status == 200 and (grown["messages"], grown["added"]) == (2, 1)
        assert wait_for(api, grown["sync_job_id"])["status"] == "succeeded"

        bricks = api.get("/v1/topics/agent-memory/bricks")[2]
        assert [(b["content"], b["state"]) for b in bricks] == [
            (first["content"], "IMPROVISE"), (second["content"], "IMPROVISE"),
        ], "an OPEN run's bricks are IMPROVISE"
        status, _, recalled = api.post("/v1/recall", {"query": "where does the database live", "topics": ["agent-memory"], "k": 1})
        assert status == 200 and recalled["results"][0]["content"] == second["content"]

        status, _, closed = api.post("/v1/runs/agent-42/close")
        assert status == 200 and closed["status"] == "CLOSED"
        assert wait_for(api, closed["sync_job_id"])["status"] == "succeeded"
        assert {b["state"] for b in api.get("/v1/topics/agent-memory/bricks")[2]} == {"FORMING"}

        # A CLOSED run refuses appends and replacement; nothing is written.
        before = path.read_bytes()
        status, headers, refused = api.post("/v1/runs/agent-42/messages", {"messages": [{"id": "m3", "role": "user", "content": "x"}]})
        assert status == 409 and headers["content-type"] == PROBLEM and "CLOSED" in refused["detail"]
        assert api.call("PUT", "/v1/runs/agent-42", {"status": "OPEN", "messages": []})[0] == 409
        assert path.read_bytes() == before


def test_put_writes_a_whole_run_and_bad_pushes_are_refused_by_name(tmp_path):
    p = project(tmp_path)
    run = {"status": "CLOSED", "started_at": "2026-11-01T09:00:00Z",
           "messages": [{"role": "user", "content": "The database moves to Postgres before we deploy."}]}
    with api_server(p) as api:
        status, _, created = api.call("PUT", "/v1/runs/handover-1", run)
        assert status == 201 and (created["status"], created["messages"]) == ("CLOSED", 1)
        assert api.call("PUT", "/v1/runs/handover-1", run)[0] == 200, "the same run again is no change"
        assert wait_for(api, created["sync_job_id"])["status"] == "succeeded"
        assert [b["content"] for b in api.get("/v1/topics/agent-memory/bricks")[2]] == [run["messages"][0]["content"]]

        cases = [
            (api.call("PUT", "/v1/runs/other", {**run, "run_id": "not-other"}), 422, "run_id"),
            (api.call("PUT", "/v1/runs/other", {"status": "SHUT", "messages": []}), 422, None),
            (api.post("/v1/runs/other/messages", {"messages": [{"role": "user", "content": "no id"}]}), 422, "id"),
            (api.post("/v1/runs/other/messages", {"messages": []}), 422, None),
            (api.post("/v1/runs/never-pushed/close"), 404, "never-pushed"),
        ]
        for (status, headers, body), expected, named in cases:
            assert status == expected and headers["content-type"] == PROBLEM, body
            assert named is None or named in json.dumps(body)
    assert not run_path(p.runs, "other").exists(), "a refused push writes nothing"


def test_remember_appends_the_agents_messages_over_mcp(tmp_path):
    from nexus_assets_tests.mcp_server.test_mcp import stdio, structured

    p = project(tmp_path)
    message = {"id": "note-1", "role": "assistant", "content": "We deploy from the main branch only."}

    async def run():
        async with stdio(p, "--allow-writes") as client:
            first = structured(await client.call_tool("remember", {"run_id": "agent-7", "messages": [message]}))
            again = structured(await client.call_tool("remember", {"run_id": "agent-7", "messages": [message]}))
            bad = await client.call_tool("remember", {"run_id": "agent-7", "messages": [{"role": "user", "content": "no id"}]})
            still = structured(await client.call_tool("list_topics", {}))
        async with stdio(p) as client:
            names = {t.name for t in (await client.list_tools()).tools}
        return first, again, bad, still, names

    first, again, bad, still, names = anyio.run(run)
    assert (first["messages"], first["added"], again["added"]) == (1, 1, 0)
    assert bad.is_error and "messages" in bad.content[0].text
    assert [t["topic_id"] for t in still] == ["agent-memory"], "the server keeps answering after a bad call"
    assert "remember" not in names, "read-only unless --allow-writes"
    assert json.loads(run_path(p.runs, "agent-7").read_text())["messages"] == [message]


def test_what_remember_writes_is_compiled_and_recalled_without_a_sync_call(tmp_path):
    """Issue 52: an agent over MCP pushes with `remember` as one over HTTP pushes with PUT: the
    server compiles what it added into the topics that read the run, so a later `recall` in the
    same session finds it, and no `sync` call is needed; a retry queues nothing."""
    from nexus_assets_tests.mcp_server.test_mcp import stdio, structured

    p = project(tmp_path)
    text = "We deploy the database migrations from the main branch only, after the backup."
    message = {"id": "m-1", "role": "user", "content": text}

    async def run():
        async with stdio(p, "--allow-writes") as client:
            pushed = structured(await client.call_tool("remember", {"run_id": "agent-9", "messages": [message]}))
            again = structured(await client.call_tool("remember", {"run_id": "agent-9", "messages": [message]}))
            deadline = time.monotonic() + 120
            while True:
                found = await client.call_tool("recall", {"query": text, "topics": ["agent-memory"], "k": 1})
                results = [] if found.is_error else structured(found)["results"]
                if results and results[0]["content"] == text:
                    return pushed, again, results
                assert time.monotonic() < deadline, "what remember wrote was never recalled"
                await anyio.sleep(0.2)

    pushed, again, results = anyio.run(run)
    assert pushed["added"] == 1 and pushed["sync_job_id"], "the compile of what was added is queued"
    assert again["added"] == 0 and again["sync_job_id"] is None, "a retry adds and queues nothing"
    assert results[0]["sources"][0]["run_id"] == "agent-9"
    verify = run_nexus("--db", str(p.db), "verify", "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_refused_push_over_http_names_the_rule_or_the_id_and_leaves_no_file(tmp_path):
    """Issue 50 item 3: an id outside the rule is 422 naming it; a close of an unknown run is 404
    and leaves nothing (no lock file); a known message id with other content is 409 naming the id."""
    from nexus_assets.ingest.push import RUN_ID_RULE

    p = project(tmp_path)
    listing = lambda: sorted(f.relative_to(p.runs).as_posix() for f in p.runs.rglob("*"))  # noqa: E731
    first = {"id": "m1", "role": "user", "content": "We deploy on Fridays after the database backup."}
    with api_server(p) as api:
        for method, path, body in (
            ("PUT", "/v1/runs/%C3%A9t%C3%A9", {"status": "OPEN", "messages": []}),
            ("POST", "/v1/runs/%C3%A9t%C3%A9/messages", {"messages": [first]}),
            ("POST", "/v1/runs/.hidden/messages", {"messages": [first]}),
        ):
            status, headers, problem = api.call(method, path, body)
            assert (status, headers["content-type"]) == (422, PROBLEM), problem
            assert RUN_ID_RULE in problem["detail"], problem
        status, _, problem = api.post("/v1/runs/unknown/close")
        assert status == 404 and "unknown" in problem["detail"]
        assert listing() == [], "a refused request leaves no file, not even a lock"

        assert api.post("/v1/runs/agent-9/messages", {"messages": [first]})[0] == 200
        status, headers, problem = api.post("/v1/runs/agent-9/messages", {"messages": [{**first, "content": "We never deploy."}]})
        assert (status, headers["content-type"]) == (409, PROBLEM), problem
        assert "message id 'm1' is already in run 'agent-9' with other content; the first is kept" in problem["detail"]
        assert api.post("/v1/runs/agent-9/messages", {"messages": [first]})[2]["added"] == 0, "the same message again is a retry"
    assert [m["content"] for m in json.loads(run_path(p.runs, "agent-9").read_text())["messages"]] == [first["content"]]
    assert listing() == ["pushed", "pushed/agent-9.json"]
