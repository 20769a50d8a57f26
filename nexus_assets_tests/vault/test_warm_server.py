"""A warm server answers from warm state (docs/agents.md, issue 52): the vault stays open for reading
between requests (vault/warm.py) and what was read through it is kept, until a writer comes: a
sync, a push or `nexus forget` in another process or in the server itself. The next request then
reads the vault again, so it sees the change, and nothing forgotten stays in memory."""

from __future__ import annotations

import time

import pytest

from nexus_assets_tests.api_helpers import api_server
from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.project import Project, nexus_run, sample_project

NEW_TEXT = "We decided the DuckDB vault file and its checksums are stored in the Oslo bunker under the fjord."
QUERY = "where are the DuckDB vault file and its checksums stored"


@pytest.fixture
def synced(tmp_path) -> Project:
    p = sample_project(tmp_path / "proj")
    assert run_nexus(*p.sync_args()).returncode == 0
    return p


def add_run(p: Project, run_id: str = "warm-new") -> None:
    p.write_run(f"{run_id}.json", nexus_run(run_id, [("user", NEW_TEXT), ("assistant", "Noted.")], start="2026-06-01T00:00:00Z"))


def test_a_held_vault_is_opened_once_and_let_go_for_a_writer(synced: Project):
    from nexus_assets.services import queries
    from nexus_assets.services.requests import BricksPage, RecallRequest, SearchRequest
    from nexus_assets.vault import warm

    held = warm.hold(synced.db)
    try:
        before = queries.recall(synced.db, RecallRequest(query=QUERY, k=3))
        queries.topics(synced.db)
        queries.search(synced.db, SearchRequest(text="vault"))
        queries.bricks(synced.db, BricksPage(topic_id="storage-decisions"))
        assert held.opens == 1, "every read of a held vault is answered on the one connection"
        assert NEW_TEXT not in [r.content for r in before.results]

        add_run(synced)
        started = time.monotonic()
        done = run_nexus(*synced.sync_args())  # another process: it must get the vault while we hold it
        assert done.returncode == 0, done.stderr
        assert time.monotonic() - started < 100, "the writer was kept waiting by the held vault"
        assert held.generation >= 1, "the hold was let go for the writer"

        after = queries.recall(synced.db, RecallRequest(query=QUERY, k=3))
        assert after.results[0].content == NEW_TEXT, "the read after a sync sees what it wrote"
        assert held.opens == 2
        assert NEW_TEXT in [h.content for h in queries.search(synced.db, SearchRequest(text="Oslo bunker"))]
    finally:
        warm.release(synced.db)


def test_a_writer_of_the_same_process_takes_the_vault_at_once(synced: Project):
    from nexus_assets.services import queries
    from nexus_assets.core.actors import user_actor  # noqa: F401 (the writer below is the CLI's own)
    from nexus_assets.store import Vault
    from nexus_assets.vault import warm

    held = warm.hold(synced.db)
    try:
        queries.topics(synced.db)
        started = time.monotonic()
        with Vault.open(synced.db) as vault:  # the writer's intent lets the hold go before it connects
            vault.conn.execute("SELECT 1")
        assert time.monotonic() - started < 5
        assert held.generation == 1 and held.memo == {}
        queries.topics(synced.db)
        assert held.opens == 2
    finally:
        warm.release(synced.db)


def test_the_warm_state_is_refreshed_after_a_writer_before_any_request(synced: Project):
    from nexus_assets.services import queries
    from nexus_assets.store import Vault
    from nexus_assets.vault import warm

    refreshed = []
    held = warm.hold(synced.db, refresh=lambda: refreshed.append(queries.topics(synced.db)))
    try:
        queries.topics(synced.db)
        with Vault.open(synced.db):
            pass
        deadline = time.monotonic() + 30
        while not refreshed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert refreshed, "the watcher refreshes once the writer is done"
        assert held.opens == 2 and held.generation == 1
    finally:
        warm.release(synced.db)


def test_forgotten_text_is_not_kept_in_memory(synced: Project):
    from nexus_assets.services import queries
    from nexus_assets.services.requests import BrickLookup, RecallRequest, SearchRequest
    from nexus_assets.vault import warm

    add_run(synced)
    assert run_nexus(*synced.sync_args()).returncode == 0
    held = warm.hold(synced.db)
    try:
        found = queries.recall(synced.db, RecallRequest(query=QUERY, k=3)).results[0]
        assert found.content == NEW_TEXT
        queries.brick(synced.db, BrickLookup(brick_id=found.brick_id))
        assert NEW_TEXT in repr(held.memo), "read through the hold and remembered"
        assert "warm-new" in repr(held.lasting), "the run's name is kept across writers, by run version"

        forgot = run_nexus("--db", str(synced.db), "forget", "--run", "warm-new", "--reason", "test", "--yes")
        assert forgot.returncode == 0, forgot.stderr
        assert NEW_TEXT not in repr(held.memo)
        assert all(r.content != NEW_TEXT for r in queries.recall(synced.db, RecallRequest(query=QUERY, k=10)).results)
        assert NEW_TEXT not in [h.content for h in queries.search(synced.db, SearchRequest(text="Oslo bunker"))]
        with pytest.raises(queries.NotFound):
            queries.brick(synced.db, BrickLookup(brick_id=found.brick_id))
        assert NEW_TEXT not in repr(held.memo)
        assert "warm-new" not in repr(held.lasting), "a forgotten run's name is dropped on the first read after"
    finally:
        warm.release(synced.db)


def test_the_server_sees_a_sync_and_a_forget_made_between_requests(synced: Project):
    """A real uvicorn on 127.0.0.1; the sync and the forget are other processes (the CLI)."""
    with api_server(synced) as api:
        status, _, out = api.post("/v1/recall", {"query": QUERY, "k": 5})
        assert status == 200 and NEW_TEXT not in [r["content"] for r in out["results"]]
        topics_before = api.get("/v1/topics")[2]

        add_run(synced)
        done = run_nexus(*synced.sync_args())
        assert done.returncode == 0, done.stderr

        status, _, out = api.post("/v1/recall", {"query": QUERY, "k": 5})
        assert status == 200 and out["results"][0]["content"] == NEW_TEXT
        brick_id = out["results"][0]["brick_id"]
        assert api.get("/v1/topics")[2] != topics_before
        assert NEW_TEXT in [h["content"] for h in api.get("/v1/search?q=Oslo%20bunker")[2]]
        assert api.get(f"/v1/bricks/{brick_id}")[0] == 200

        forgot = run_nexus("--db", str(synced.db), "forget", "--run", "warm-new", "--reason", "test", "--yes")
        assert forgot.returncode == 0, forgot.stderr
        status, _, out = api.post("/v1/recall", {"query": QUERY, "k": 10})
        assert status == 200 and NEW_TEXT not in [r["content"] for r in out["results"]]
        assert NEW_TEXT not in [h["content"] for h in api.get("/v1/search?q=Oslo%20bunker")[2]]
        assert api.get(f"/v1/bricks/{brick_id}")[0] == 404
        for topic in api.get("/v1/topics")[2]:
            bricks = api.get(f"/v1/topics/{topic['topic_id']}/bricks?include_superseded=true")[2]
            assert NEW_TEXT not in [b["content"] for b in bricks]
