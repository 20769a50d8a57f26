"""`nexus export` in each format, read back and compared with the manifest; `nexus plan
--explain-cache` after changing the prompt version, the model, the topic and a run."""

import json
import os
import stat

import duckdb
import pytest

from nexus_assets.llm.prompt import PROMPT_VERSION
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.llm_server import (
    DEFAULT_API_KEY,
    DEFAULT_MODEL,
    FakeOpenAIServer,
)
from nexus_assets_tests.project import Project, nexus_run
from nexus_assets_tests.llm.test_openai_sync import hostile_model

TOPIC = "storage-decisions"


@pytest.fixture
def synced(project: Project, capsys) -> Project:
    run_json(capsys, *project.sync_args())
    return project


def expected(p: Project, capsys) -> list[dict]:
    manifest = run_json(capsys, *p.cli_args(), "manifest", TOPIC)
    bricks = {b["brick_id"]: b for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC)}
    return [{**bricks[e["brick_id"]], "order_index": e["order_index"], "manifest_hash": manifest["manifest_hash"]} for e in manifest["bricks"]]


def test_jsonl_export_is_the_manifest_in_order_with_sources(synced: Project, capsys, tmp_path):
    out = tmp_path / "t.jsonl"
    code, _, err = run_cli(capsys, *synced.cli_args(), "export", TOPIC, "--format", "jsonl", "--out", str(out))
    assert code == 0 and "wrote" in err
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    want = expected(synced, capsys)
    assert [r["brick_id"] for r in rows] == [w["brick_id"] for w in want]
    for r, w in zip(rows, want):
        assert (r["order_index"], r["content"], r["fingerprint"], r["state"], r["manifest_hash"]) == (
            w["order_index"], w["content"], w["fingerprint"], w["state"], w["manifest_hash"])
        # `nexus bricks --json` also names each source's conversation (run_title, run_date) for reading.
        named = {"run_title", "run_date"}
        assert r["sources"] == [{k: v for k, v in s.items() if k not in named} for s in w["sources"]]
    # Without --out it goes to standard output, byte for byte the same.
    code, printed, _ = run_cli(capsys, *synced.cli_args(), "export", TOPIC, "--format", "jsonl")
    assert code == 0 and printed == out.read_text(encoding="utf-8")


def test_parquet_export_reads_back_through_duckdb(synced: Project, capsys, tmp_path):
    out = tmp_path / "deep" / "t.parquet"
    run_cli(capsys, *synced.cli_args(), "export", TOPIC, "--format", "parquet", "--out", str(out))
    con = duckdb.connect()
    rows = con.execute(f"SELECT order_index, brick_id, content, state, sources FROM read_parquet('{out}') ORDER BY order_index").fetchall()
    types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{out}')").fetchall()}
    want = expected(synced, capsys)
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [(w["order_index"], w["brick_id"], w["content"], w["state"]) for w in want]
    assert [[s["run_id"], s["json_path"], s["start"], s["end"], s["node_checksum"]] for s in rows[0][4]] == [
        [s["run_id"], s["json_path"], s["start"], s["end"], s["node_checksum"]] for s in want[0]["sources"]]
    assert types["order_index"] == "INTEGER" and types["sources"].startswith("STRUCT(")
    assert not list(out.parent.glob("*.partial")) and not list(out.parent.glob("*.jsonl"))


def test_markdown_export_reads_in_manifest_order_with_each_source_address(synced: Project, capsys, tmp_path):
    out = tmp_path / "t.md"
    run_cli(capsys, *synced.cli_args(), "export", TOPIC, "--format", "markdown", "--out", str(out))
    text = out.read_text(encoding="utf-8")
    want = expected(synced, capsys)
    assert text.startswith("# Storage and Vault Decisions")
    assert "source-run order" in text and "order order" not in text
    positions = [text.index(f"> {w['content']}") for w in want]
    assert positions == sorted(positions), "bricks appear in manifest order"
    for w in want:
        s = w["sources"][0]
        assert f"`{s['run_id']}` `{s['json_path']}` [{s['start']}:{s['end']}]" in text


def test_export_refuses_bad_usage_with_exit_2(synced: Project, capsys, tmp_path):
    code, _, err = run_cli(capsys, *synced.cli_args(), "export", "no-such-topic", "--format", "jsonl")
    assert code == 2 and "unknown topic" in err
    code, _, err = run_cli(capsys, *synced.cli_args(), "export", "team-rituals", "--format", "jsonl")
    assert code == 2 and "no manifest yet" in err
    code, _, err = run_cli(capsys, *synced.cli_args(), "export", TOPIC, "--format", "markdown", "--out", str(tmp_path))
    assert code == 2 and "is a directory" in err
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, _, err = run_cli(capsys, *synced.cli_args(), "export", TOPIC, "--format", "jsonl", "--out", str(fifo))
    assert code == 2 and "not a regular file" in err
    assert stat.S_ISFIFO(fifo.stat().st_mode), "left as it was, not replaced by a file"


LLM_TOPIC = "vault-notes"


def explain(p: Project, capsys) -> dict[str, dict]:
    data = run_json(capsys, *p.cli_args(), "plan", "--topic", LLM_TOPIC, "--runs-dir", str(p.runs), "--topics-dir", str(p.topics), "--explain-cache")
    return {e["run_id"]: e for e in data["cache"]}


def test_explain_cache_names_why_each_run_will_be_called(empty_project: Project, capsys, monkeypatch):
    p = empty_project
    p.write_topic(LLM_TOPIC, keywords=["vault"])
    p.write_run("a.json", nexus_run("run-a", [("user", "The vault is append-only. Nothing is deleted.")]))
    p.write_run("b.json", nexus_run("run-b", [("user", "Our vault lives in DuckDB. One writer at a time.")]))
    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
    assert {e["status"] for e in explain(p, capsys).values()} == {"will_call"}
    assert all(e["reasons"] == ["new run: no call for this run and topic yet"] for e in explain(p, capsys).values())

    with FakeOpenAIServer(handler=hostile_model) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run_json(capsys, *p.sync_args(LLM_TOPIC), "--extractor", "openai")
    cached = explain(p, capsys)
    assert {r: e["status"] for r, e in cached.items()} == {"run-a": "cached", "run-b": "cached"}

    monkeypatch.setenv("NEXUS_LLM_MODEL", "another-model")
    assert all(e["status"] == "will_call" and e["reasons"] == [f"model changed: {DEFAULT_MODEL} → another-model"]
               for e in explain(p, capsys).values())
    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)

    # Calls recorded under an older prompt version no longer match any planned key.
    con = duckdb.connect(str(p.db))
    con.execute("UPDATE llm_calls SET prompt_version = 'pointer-v0', call_key = call_key || '-v0' WHERE run_id = 'run-a'")
    con.close()
    after = explain(p, capsys)
    assert after["run-a"]["reasons"] == [f"prompt version changed: pointer-v0 → {PROMPT_VERSION}"]
    assert after["run-b"]["status"] == "cached"

    p.write_run("b.json", nexus_run("run-b", [("user", "Our vault lives in DuckDB. Two writers never.")]))
    assert explain(p, capsys)["run-b"]["reasons"] == ["new run version: the run's text changed since its last call"]
    p.write_run("b.json", nexus_run("run-b", [("user", "Our vault lives in DuckDB. One writer at a time.")]))
    assert explain(p, capsys)["run-b"]["status"] == "cached"

    topic_file = p.topics / f"{LLM_TOPIC}.yaml"
    topic_file.write_text(topic_file.read_text(encoding="utf-8").replace("Everything about", "All that concerns"), encoding="utf-8")
    changed = explain(p, capsys)
    assert changed["run-b"]["reasons"] == ["topic definition changed (its name, scope or exclusions are part of the prompt)"]
