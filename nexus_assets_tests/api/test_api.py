"""`nexus api` (docs/agents.md) against a real uvicorn on 127.0.0.1: bodies are the CLI's --json
objects, a sync job is Dagster runs reported from their records, errors are problem+json, and
the door (token, Host, bounded requests) refuses before any route runs."""

from __future__ import annotations

import time

import pytest

from nexus_assets_tests.api_helpers import Api, api_server
from nexus_assets_tests.cli_helpers import run_json, run_nexus
from nexus_assets_tests.project import Project, sample_project

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def synced(tmp_path_factory) -> Project:
    from nexus_assets.cli import main

    p = sample_project(tmp_path_factory.mktemp("api") / "proj")
    assert main([*p.sync_args(), "--json"]) == 0
    return p


@pytest.fixture(scope="module")
def api(synced: Project):
    with api_server(synced) as server:
        yield server


def cli(capsys, p: Project, *argv: str):
    return run_json(capsys, "--db", str(p.db), *argv)


def test_health_names_the_vault_and_its_schema(api: Api, synced: Project):
    from nexus_assets.vault.migrations import LATEST

    status, _, body = api.get("/v1/health")
    assert status == 200 and body == {"status": "ok", "vault": str(synced.db), "schema_version": LATEST}


def test_read_endpoints_answer_exactly_the_cli_json(api: Api, synced: Project, capsys):
    assert api.get("/v1/topics")[2] == cli(capsys, synced, "topics")
    for topic in ("nexus-server-sync", "storage-decisions"):
        assert api.get(f"/v1/topics/{topic}/bricks")[2] == cli(capsys, synced, "bricks", topic)
        assert api.get(f"/v1/topics/{topic}/bricks?include_superseded=true")[2] == cli(capsys, synced, "bricks", topic, "--all")
        assert api.get(f"/v1/topics/{topic}/manifest")[2] == cli(capsys, synced, "manifest", topic)
        assert api.get(f"/v1/topics/{topic}/conflicts")[2] == cli(capsys, synced, "conflicts", topic)
    assert api.get("/v1/search?q=vault&topic=storage-decisions")[2] == cli(capsys, synced, "search", "vault", "--topic", "storage-decisions")
    brick = cli(capsys, synced, "bricks", "storage-decisions")[0]
    assert api.get(f"/v1/bricks/{brick['brick_id']}")[2] == brick
    assert api.get(f"/v1/bricks/{brick['brick_id']}/lineage")[2] == cli(capsys, synced, "lineage", brick["brick_id"])


def test_min_state_and_paging(api: Api, synced: Project, capsys):
    every = cli(capsys, synced, "bricks", "nexus-server-sync")
    forming = api.get("/v1/topics/nexus-server-sync/bricks?min_state=FORMING")[2]
    assert forming == [b for b in every if b["state"] in ("FORMING", "FINAL")] and 0 < len(forming) < len(every)
    assert api.get("/v1/topics/nexus-server-sync/bricks?min_state=FINAL")[2] == []
    assert api.get("/v1/topics/nexus-server-sync/bricks?offset=2&limit=3")[2] == every[2:5]


def test_recall_and_ask_over_http_match_the_cli(api: Api, synced: Project, capsys):
    status, _, out = api.post("/v1/recall", {"query": "where is the vault stored", "k": 3})
    assert status == 200
    expected = cli(capsys, synced, "recall", "where is the vault stored", "--k", "3")
    assert [(r["brick_id"], r["confidence"]) for r in out["results"]] == [(r["brick_id"], r["confidence"]) for r in expected["results"]]
    assert all(0 <= r["confidence"] <= 1 and r["reranker_used"] and r["sources"] for r in out["results"])

    status, _, answer = api.post("/v1/ask", {"question": "where is the vault stored", "agent": "test-agent"})
    assert status == 200 and answer["outcome"] == "answered" and answer["ccc"] >= 0.95
    assert all(s["brick_ids"] for s in answer["sentences"])
    audit = cli(capsys, synced, "audit")
    assert any(r["audit_id"] == answer["audit_id"] and r["agent"] == "test-agent" for r in audit)

    status, _, preview = api.post("/v1/ask/preview", {"question": "where is the vault stored"})
    assert status == 200 and {s["brick_id"] for s in answer["sources"]} <= {b["brick_id"] for b in preview["bricks"]}
    assert len(cli(capsys, synced, "audit")) == len(audit)  # the preview is not audited


def test_initiate_then_poll_then_bricks_equal_the_cli(api: Api, synced: Project, capsys):
    status, headers, accepted = api.post("/v1/sync/initiate", {"topic_ids": ["storage-decisions"], "force_recompile": True})
    assert status == 202 and accepted["status_url"] == f"/v1/sync/{accepted['sync_job_id']}"
    # A second sync of the same topics while the first is queued or running: 409 naming it.
    status, headers, busy = api.post("/v1/sync/initiate", {"topic_ids": ["storage-decisions"]})
    assert status == 409 and headers["content-type"] == PROBLEM and busy["sync_job_id"] == accepted["sync_job_id"]

    deadline = time.monotonic() + 300
    while True:
        status, _, job = api.get(accepted["status_url"])
        assert status == 200 and job["status"] in ("queued", "running", "succeeded"), job
        if job["status"] == "succeeded":
            break
        assert time.monotonic() < deadline, job
        time.sleep(0.5)
    assert job["topics"] == ["storage-decisions"] and job["error"] is None
    assert job["started_at"] and job["finished_at"] and len(job["dagster_run_ids"]) == 1  # one run: ingest, then the topic
    assert api.get("/v1/topics/storage-decisions/bricks")[2] == cli(capsys, synced, "bricks", "storage-decisions")

    assert api.get("/v1/sync/" + "0" * 32)[0] == 404


def announced_too_large(api: Api):
    """A request whose Content-Length passes the limit: refused on its headers, before any body is
    read (sending the body first would race the server's early answer)."""
    import http.client
    import json
    from urllib.parse import urlsplit

    url = urlsplit(api.base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        conn.putrequest("POST", "/v1/recall")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", "2000000")
        conn.endheaders()
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(response.read())
    finally:
        conn.close()


def test_errors_are_problem_details_without_internals(api: Api):
    cases = [
        (api.get("/v1/topics/no-such-topic/bricks"), 404),
        (api.get("/v1/bricks/abcdef012345"), 404),
        (api.get("/v1/topics/nexus-server-sync/bricks?min_state=DONE"), 422),
        (api.get("/v1/topics/nexus-server-sync/bricks?limit=-1"), 422),
        (api.get("/v1/search?q="), 422),
        (api.post("/v1/recall", {"query": "x", "k": 0}), 422),
        (api.post("/v1/recall", {"query": "x", "unknown": 1}), 422),
        (api.call("POST", "/v1/recall", raw=b"{not json"), 422),
        (api.post("/v1/sync/initiate", {"topic_ids": ["no-such-topic"]}), 422),
        (api.post("/v1/sync/initiate", {"topic_ids": ["team-rituals"]}), 422),  # DRAFT
        (announced_too_large(api), 413),
        (api.get("/v1/search?q=" + "a" * 5000), 414),
        (api.get("/v1/nothing-here"), 404),
        (api.call("DELETE", "/v1/topics"), 405),
    ]
    for (status, headers, body), expected in cases:
        assert status == expected, body
        assert headers["content-type"] == PROBLEM, body
        assert body["status"] == expected and body["title"] and "Traceback" not in str(body)


def test_a_foreign_host_header_is_refused_without_a_token(api: Api):
    status, headers, body = api.get("/v1/health", headers={"Host": "evil.example"})
    assert status == 400 and headers["content-type"] == PROBLEM


def test_openapi_and_docs_without_a_token_on_loopback(api: Api):
    status, _, spec = api.get("/openapi.json")
    assert status == 200
    assert {"/v1/health", "/v1/sync/initiate", "/v1/sync/{sync_job_id}", "/v1/topics", "/v1/topics/{topic_id}/bricks",
            "/v1/topics/{topic_id}/manifest", "/v1/bricks/{brick_id}", "/v1/bricks/{brick_id}/lineage", "/v1/recall",
            "/v1/ask", "/v1/ask/preview", "/v1/search", "/v1/topics/{topic_id}/conflicts"} <= set(spec["paths"])
    assert api.get("/docs")[0] == 200
    # CORS is off unless configured.
    assert "access-control-allow-origin" not in api.get("/v1/health", headers={"Origin": "http://example.com"})[1]


def test_with_a_token_every_request_needs_it(synced: Project):
    token = "s3cret-token-for-tests"
    origin = "http://app.example"
    with api_server(synced, token=token, extra_env={"NEXUS_API_CORS_ORIGINS": origin}) as api:
        for path in ("/v1/health", "/openapi.json", "/docs", "/v1/topics"):
            for wrong in ("", "wrong", token + "x"):
                status, headers, body = api.get(path, token=wrong)
                assert status == 401 and headers["content-type"] == PROBLEM and headers["www-authenticate"] == "Bearer", path
            assert api.get(path)[0] == 200, path
        assert api.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"}, token="wrong")[0] == 401
        # A configured origin: the browser's preflight (which carries no token) is answered, and so is the call.
        status, headers, _ = api.call("OPTIONS", "/v1/topics", token="", headers={"Origin": origin, "Access-Control-Request-Method": "GET"})
        assert status == 200 and headers["access-control-allow-origin"] == origin
        assert api.get("/v1/topics", headers={"Origin": origin})[1]["access-control-allow-origin"] == origin
        assert "access-control-allow-origin" not in api.get("/v1/topics", headers={"Origin": "http://other.example"})[1]


def test_another_host_without_a_token_is_refused_before_starting(synced: Project):
    proc = run_nexus("--db", str(synced.db), "api", "--host", "0.0.0.0", "--port", "1", env={"NEXUS_API_TOKEN": ""})
    assert proc.returncode == 2 and "NEXUS_API_TOKEN" in proc.stderr


def test_the_trace_viewer_is_served_by_the_same_app(api: Api):
    from nexus_assets.web.server import CSP

    status, headers, body = api.get("/topics/storage-decisions")
    assert status == 200 and headers["content-security-policy"] == CSP and "storage-decisions" in body
    status, headers, body = api.get("/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert api.get("/static/viewer.css")[0] == 200
    assert api.get("/topics/storage-decisions", headers={"Host": "attacker.example"})[0] == 400
