"""The openai extractor through the whole sync, against a real Chat Completions server on 127.0.0.1.

The server plays a hostile model: next to one true quote per node it returns paraphrases, wrong
paths, paths to objects, wildcards, empty quotes, other topics and malformed objects. Only the
true quotes may become bricks; every other pointer must be a rejection with its reason code.
"""

import json
from collections import Counter
from typing import Callable

import pytest

from nexus_assets.core.sentences import sentences
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.llm_server import (
    DEFAULT_API_KEY,
    DEFAULT_MODEL,
    ErrorReply,
    FakeOpenAIServer,
    Reply,
    request_topics_and_fragment,
)
from nexus_assets_tests.project import Project, nexus_run

TOPIC = "vault-notes"
HOSTILE_REASONS = [
    "quote_not_found",
    "path_not_found",
    "node_not_string",
    "path_not_singular",
    "empty_quote",
    "unknown_topic",
    "malformed_pointer",
    "malformed_pointer",
]


def fragment_of(body: dict) -> tuple[str, dict]:
    """The topic a request asks and its nodes, each named by its handle (prompt v3)."""
    topics, fragment = request_topics_and_fragment(body)
    (topic_id,) = topics
    return topic_id, fragment


def answering(lies: Callable[[str, str, str], list]) -> Callable[[dict], dict]:
    """A model answering each node it is shown with its first sentence, plus `lies(topic_id, path, first)`."""

    def model(body: dict) -> dict:
        topic_id, fragment = fragment_of(body)
        pointers = []
        for node in fragment["nodes"]:
            path, first = node["json_path"], sentences(node["text"])[0]
            pointers += [{"topic_id": topic_id, "json_path": path, "verbatim_quote": first}, *lies(topic_id, path, first)]
        return {"extracted_pointers": pointers}

    return model


hostile_model = answering(
    lambda topic_id, path, first: [
        {"topic_id": topic_id, "json_path": path, "verbatim_quote": "In other words, " + first.lower()},
        {"topic_id": topic_id, "json_path": "$.messages[99].content", "verbatim_quote": first},
        {"topic_id": topic_id, "json_path": "$['messages'][0]", "verbatim_quote": first},  # a real path, not to a string
        {"topic_id": topic_id, "json_path": "$..content", "verbatim_quote": first},
        {"topic_id": topic_id, "json_path": path, "verbatim_quote": "  "},
        {"topic_id": "some-other-topic", "json_path": path, "verbatim_quote": first},
        {"json_path": path},
        "just a string",
    ]
)


@pytest.fixture
def llm_project(empty_project: Project, monkeypatch) -> Project:
    p = empty_project
    p.write_topic(TOPIC, keywords=["vault"])
    p.write_run("a.json", nexus_run("run-a", [("user", "The vault is append-only. Nothing is deleted."), ("assistant", "Yes, the vault keeps history. It also keeps checksums.")]))
    p.write_run("b.json", nexus_run("run-b", [("user", "Our vault lives in DuckDB. One writer at a time."), ("user", "Unrelated small talk.")], status="OPEN"))
    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
    # Room for one of these runs a request, not both: these tests count requests and calls per run.
    monkeypatch.setenv("NEXUS_LLM_TOKEN_BUDGET", "64")
    return p


def sync(p: Project, capsys, *extra: str, expect: int = 0):
    return run_json(capsys, *p.sync_args(TOPIC), "--extractor", "openai", *extra, expect=expect)


def test_only_true_quotes_become_bricks_and_every_lie_is_a_rejection(llm_project: Project, capsys, monkeypatch):
    p = llm_project
    with FakeOpenAIServer(handler=hostile_model) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        (result,) = sync(p, capsys)
        assert result["success"] and all(result["checks"].values())
        assert server.request_count == 2  # one chunk per run; out-of-scope nodes never sent
        sent = json.dumps(server.requests)
        assert "Unrelated small talk" not in sent, "the keyword pre-filter skips nodes before any call"
        assert all(r["temperature"] == 0 and not r.get("stream") and "seed" in r for r in server.requests)

    bricks = run_json(capsys, *p.cli_args(), "bricks", TOPIC)
    assert sorted(b["content"] for b in bricks) == sorted(
        ["The vault is append-only.", "Yes, the vault keeps history.", "Our vault lives in DuckDB."]
    )
    rejections = run_json(capsys, *p.cli_args(), "rejections", TOPIC)
    assert Counter(r["reason"] for r in rejections) == Counter(HOSTILE_REASONS * 3)
    assert {r["run_id"] for r in rejections} == {"run-a", "run-b"}
    calls = run_json(capsys, *p.cli_args(), "calls", "--topic", TOPIC)
    assert len(calls) == 2 and all(c["status"] == "ok" and c["prompt_tokens"] for c in calls)


def test_a_second_sync_replays_from_the_vault_sending_nothing(llm_project: Project, capsys, monkeypatch):
    p = llm_project
    with FakeOpenAIServer(handler=hostile_model) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        sync(p, capsys)
        first = run_json(capsys, *p.cli_args(), "manifest", TOPIC)
        sent = server.request_count
        # A fresh vault would not help: drop the extraction cache so replay must come from llm_calls.
        from nexus_assets.store import Vault

        with Vault.open(p.db) as v:
            v.conn.execute("DELETE FROM extractions")
            v.conn.execute("DELETE FROM occurrences")
        sync(p, capsys, "--replay-only")
        assert server.request_count == sent, "replay sends zero requests"
    assert run_json(capsys, *p.cli_args(), "manifest", TOPIC)["manifest_hash"] == first["manifest_hash"]


def test_replay_only_fails_on_a_cache_miss_instead_of_calling(llm_project: Project, capsys, monkeypatch):
    p = llm_project
    with FakeOpenAIServer(handler=hostile_model) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        code, _, err = run_cli(capsys, *p.sync_args(TOPIC), "--extractor", "openai", "--replay-only")
        assert code == 1
        assert "no stored" in err.lower() or "cache miss" in err.lower() or "replay" in err.lower()
        assert server.request_count == 0


def test_a_refused_key_is_one_clear_line_and_nothing_is_compiled(llm_project: Project, capsys, monkeypatch):
    p = llm_project
    with FakeOpenAIServer(api_key="sk-other") as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        code, _, err = run_cli(capsys, *p.sync_args(TOPIC), "--extractor", "openai")
    assert code == 1
    assert "OPENAI_API_KEY was refused" in err and "(401)" in err
    assert run_json(capsys, *p.cli_args(), "bricks", TOPIC) == []


def test_failed_calls_are_recorded_never_cached_and_retried_next_sync(llm_project: Project, capsys, monkeypatch):
    p = llm_project
    # The scripted replies are handed out in arrival order: one request at a time keeps that order run by run.
    monkeypatch.setenv("NEXUS_LLM_CONCURRENCY", "1")
    with FakeOpenAIServer(handler=hostile_model) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        # run-a: a 500 storm outlasting the retries; run-b: 429 then a prose-wrapped answer... then not JSON.
        server.script(*[ErrorReply(500)] * 5, ErrorReply(429), Reply("Sure! I could not find anything, sorry."))
        (result,) = sync(p, capsys)
        assert result["success"]
        calls = run_json(capsys, *p.cli_args(), "calls")
        assert [c["status"] for c in calls] == ["failed", "failed"]
        assert "500" in calls[0]["error"] and "JSON" in calls[1]["error"]
        assert run_json(capsys, *p.cli_args(), "bricks", TOPIC) == []
        before = server.request_count
        sync(p, capsys)
        assert server.request_count == before + 2, "both failed runs are asked again"
    assert len(run_json(capsys, *p.cli_args(), "bricks", TOPIC)) == 3
    assert [c["status"] for c in run_json(capsys, *p.cli_args(), "calls")] == ["failed", "failed", "ok", "ok"]


def test_a_sync_whose_llm_calls_failed_says_so_in_its_progress_and_summary(llm_project: Project, capsys, monkeypatch):
    # Nothing listens on port 9 (discard): every call fails to connect and is given up after retries.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    code, out, err = run_cli(capsys, *llm_project.sync_args(TOPIC), "--extractor", "openai")
    assert code == 0, "failed calls are asked again next sync; the sync itself ran"
    assert f"{TOPIC}: 2 runs not extracted: their LLM calls failed" in err
    assert "2 runs not extracted (failed LLM calls, asked again next sync)" in out


def test_chunking_a_run_two_ways_gives_the_same_bricks(llm_project: Project, capsys, monkeypatch, tmp_path):
    p = llm_project
    long_run = [("user" if i % 2 else "assistant", f"Message {i}: the vault stores item {i} safely. Filler {'x' * 300}.") for i in range(12)]
    p.write_run("long.json", nexus_run("run-long", long_run))
    hashes, contents = [], []
    for budget, db in (("100000", "one-chunk.duckdb"), ("150", "many-chunks.duckdb")):
        monkeypatch.setenv("NEXUS_LLM_TOKEN_BUDGET", budget)
        with FakeOpenAIServer(handler=hostile_model) as server:
            monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
            args = ["--db", str(tmp_path / db)]
            run_json(capsys, *args, *p.sync_args(TOPIC)[2:], "--extractor", "openai")
            hashes.append(run_json(capsys, *args, "manifest", TOPIC)["manifest_hash"])
            contents.append(run_json(capsys, *args, "bricks", TOPIC))
            if budget == "150":
                assert server.request_count > 6, "the small budget really split the run"
    assert hashes[0] == hashes[1]
    assert contents[0] == contents[1]


# Pointers no UTF-8 store can hold, beside each true quote: lone surrogates (JSON allows `\ud800`).
lone_surrogates_model = answering(
    lambda topic_id, path, first: [
        {"topic_id": topic_id, "json_path": path, "verbatim_quote": "\ud800"},
        {"topic_id": topic_id, "json_path": path, "verbatim_quote": first + "\udfff"},
        {"topic_id": topic_id, "json_path": path + "\ud83d", "verbatim_quote": first},
        {"topic_id": "\udc00", "json_path": path, "verbatim_quote": first},
    ]
)


def test_lone_surrogates_from_the_model_are_rejections_and_the_true_quotes_compile(llm_project: Project, capsys, monkeypatch):
    p = llm_project
    with FakeOpenAIServer(handler=lone_surrogates_model) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        (result,) = sync(p, capsys)
        assert result["success"] and all(result["checks"].values())
        # Replayed from the stored call, the same verdicts: nothing was lost in storing it.
        first = run_json(capsys, *p.cli_args(), "manifest", TOPIC)
        from nexus_assets.store import Vault

        with Vault.open(p.db) as v:
            v.conn.execute("DELETE FROM extractions")
            v.conn.execute("DELETE FROM occurrences")
            v.conn.execute("DELETE FROM rejections")
        sent = server.request_count
        sync(p, capsys, "--replay-only")
        assert server.request_count == sent
    assert run_json(capsys, *p.cli_args(), "manifest", TOPIC)["manifest_hash"] == first["manifest_hash"]
    bricks = run_json(capsys, *p.cli_args(), "bricks", TOPIC)
    assert sorted(b["content"] for b in bricks) == sorted(
        ["The vault is append-only.", "Yes, the vault keeps history.", "Our vault lives in DuckDB."]
    )
    rejections = run_json(capsys, *p.cli_args(), "rejections", TOPIC)
    assert Counter(r["reason"] for r in rejections) == Counter(["quote_not_found", "quote_not_found", "malformed_pointer", "unknown_topic"] * 3)
    # Stored as escapes, so they can be read and shown: never as text no file holds.
    assert "\\ud800" in {r["verbatim_quote"] for r in rejections}
    assert all(json.dumps(r, ensure_ascii=False).encode("utf-8") for r in rejections)
    assert all(c["status"] == "ok" for c in run_json(capsys, *p.cli_args(), "calls", "--topic", TOPIC))


def test_a_true_quote_from_a_node_the_model_was_not_shown_compiles_nothing(llm_project: Project, capsys, monkeypatch):
    p = llm_project

    def guessing_model(body: dict) -> dict:
        topic_id, fragment = fragment_of(body)
        pointers = [{"topic_id": topic_id, "json_path": n["json_path"], "verbatim_quote": sentences(n["text"])[0]} for n in fragment["nodes"]]
        # run-b's second message has no keyword, so it is never sent; its text is still true.
        pointers.append({"topic_id": topic_id, "json_path": "$.messages[1].content", "verbatim_quote": "Unrelated small talk."})
        pointers.append({"topic_id": topic_id, "json_path": "$.run_id", "verbatim_quote": "run"})
        return {"extracted_pointers": pointers}

    with FakeOpenAIServer(handler=guessing_model) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        (result,) = sync(p, capsys)
        assert result["success"] and all(result["checks"].values())
        assert "Unrelated small talk" not in json.dumps(server.requests)
    bricks = run_json(capsys, *p.cli_args(), "bricks", TOPIC)
    assert sorted(b["content"] for b in bricks) == sorted(
        ["The vault is append-only.", "Yes, the vault keeps history.", "Our vault lives in DuckDB."]
    )
    rejections = run_json(capsys, *p.cli_args(), "rejections", TOPIC)
    verdicts = {(r["run_id"], r["verbatim_quote"]): r["reason"] for r in rejections}
    assert verdicts == {
        ("run-b", "Unrelated small talk."): "out_of_scope",
        ("run-a", "Unrelated small talk."): "quote_not_found",  # run-a's second message is in scope
        ("run-a", "run"): "out_of_scope",
        ("run-b", "run"): "out_of_scope",
    }


def test_a_missing_model_setting_is_a_usage_error_before_anything_runs(llm_project: Project, capsys, monkeypatch):
    p = llm_project
    monkeypatch.delenv("NEXUS_LLM_MODEL")
    code, _, err = run_cli(capsys, *p.sync_args(TOPIC), "--extractor", "openai")
    assert code == 2
    assert "NEXUS_LLM_MODEL" in err and "Traceback" not in err and "dagster" not in err.lower()
    assert not p.db.exists(), "nothing was opened, let alone compiled"


def vault_tables(db) -> dict[str, list[tuple]]:
    """Every table of the vault, every row (as text, so any column type compares)."""
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        names = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]
        return {t: [tuple(map(str, row)) for row in con.execute(f'SELECT * FROM "{t}"').fetchall()] for t in names}


def listed(db) -> list[tuple]:
    import duckdb

    from nexus_assets_tests.manifest_helpers import listed_manifests

    with duckdb.connect(str(db), read_only=True) as con:
        return listed_manifests(con)


def lost(before: list[tuple], after: list[tuple]) -> list[tuple]:
    return list((Counter(before) - Counter(after)).elements())


# Tables that hold what is true now (a brick's state, a file's last stat, the stage between two
# steps): a sync rewrites their rows, and the history those rows had is kept elsewhere (manifests,
# source_status_history, syncs, topic_transitions). Every other table is a record: a sync only adds.
CURRENT_STATE = {
    "bricks", "brick_relations", "relation_builds", "clean_syncs", "file_stats", "resolution_inputs",
    "source_status", "staged_bricks", "staged_brick_sources", "staged_resolution_inputs", "staged_resolutions",
    "topics", "vault_sources",
}
# A manifest's entries (issue 61) are each written once and closed once: `valid_to` goes from NULL to
# the first manifest that no longer lists the entry. The record they keep is every manifest as it
# lists, compared whole below; an entry row otherwise never changes.
CLOSED_ONCE = "manifest_entries"


def test_a_sync_that_fixes_a_bad_file_and_gets_new_answers_deletes_no_record(llm_project: Project, capsys, monkeypatch):
    """Invariant 8: nothing stored is deleted by a sync. The second sync meets a fixed file (its
    old ingestion error stays), a changed topic scope (every answer is asked again, and the model
    now answers differently: the old rejections and LLM calls stay beside the new ones)."""
    p = llm_project
    bad = p.write_bytes("c.json", b'{"run_id": "run-c", "status": "CLOSED", "messages": [{"role": "user", "content": "the vault is')
    rounds = {"n": 1}

    def model(body: dict) -> dict:
        topic_id, fragment = fragment_of(body)
        pointers = []
        for node in fragment["nodes"]:
            said = sentences(node["text"])
            quote = said[0] if rounds["n"] == 1 else said[-1]
            lie = f"Round {rounds['n']} says: " + quote.lower()
            pointers += [{"topic_id": topic_id, "json_path": node["json_path"], "verbatim_quote": q} for q in (quote, lie)]
        return {"extracted_pointers": pointers}

    with FakeOpenAIServer(handler=model) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        sync(p, capsys)
        first_requests = server.request_count
        before = vault_tables(p.db)
        listed_before = listed(p.db)
        assert len(before["ingestion_errors"]) == 1 and "c.json" in before["ingestion_errors"][0][0]
        assert len(before["llm_calls"]) == first_requests == 2
        assert len(before["rejections"]) == 3  # one lie per node in scope
        assert {r["reason"] for r in run_json(capsys, *p.cli_args(), "rejections", TOPIC)} == {"quote_not_found"}

        bad.write_text(json.dumps(nexus_run("run-c", [("user", "The vault was fixed. The vault file now reads.")])), encoding="utf-8")
        topic_file = p.topics / f"{TOPIC}.yaml"
        topic_file.write_text(topic_file.read_text(encoding="utf-8").replace("Everything about", "All that is known about"), encoding="utf-8")
        rounds["n"] = 2
        sync(p, capsys)
        # Three runs' answers asked again; the two small ones (run-b's one node in scope, the fixed
        # run-c) share a request.
        assert server.request_count == first_requests + 2, "the changed scope asks again, and the fixed run is asked"
    after = vault_tables(p.db)

    assert set(after) >= set(before), "no table is dropped"
    for table in sorted(set(before) - CURRENT_STATE - {CLOSED_ONCE}):
        assert lost(before[table], after[table]) == [], f"{table}: a sync deleted or rewrote a record"
    # An entry row keeps all it said but its end, and a closed one stays as it was.
    as_opened = lambda rows: [r[:-1] for r in rows]  # noqa: E731 (valid_to is the last column)
    assert lost(as_opened(before[CLOSED_ONCE]), as_opened(after[CLOSED_ONCE])) == []
    assert lost([r for r in before[CLOSED_ONCE] if r[-1] != "None"], after[CLOSED_ONCE]) == []
    assert set(listed_before) <= set(listed(p.db)), "every manifest recorded before lists as it did"
    # What this test is about, named: the old records are there beside the new ones.
    assert before["ingestion_errors"][0] in after["ingestion_errors"], "the fixed file's old error is kept"
    assert "run-c" in {row[0] for row in after["runs"]}, "the fixed file was ingested"
    assert len(after["llm_calls"]) == len(before["llm_calls"]) + 3
    assert len(after["rejections"]) == len(before["rejections"]) + 4
    rejected = {r["verbatim_quote"] for r in run_json(capsys, *p.cli_args(), "rejections", TOPIC)}
    assert any(q.startswith("Round 1 says") for q in rejected) and any(q.startswith("Round 2 says") for q in rejected)
    calls = run_json(capsys, *p.cli_args(), "calls", "--topic", TOPIC)
    assert len(calls) == 5 and all(c["status"] == "ok" for c in calls)
    # A brick made from the first answers is never deleted either (its state may change).
    bricks_before = {row[0] for row in before["bricks"]}
    assert bricks_before <= {row[0] for row in after["bricks"]}
    errors = run_json(capsys, *p.cli_args(), "errors")
    assert any(e["file"].endswith("c.json") and "not valid JSON" in e["problem"] for e in errors)
