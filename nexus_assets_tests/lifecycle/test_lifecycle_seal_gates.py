"""Seal gates: a seal is refused (exit 1) naming the gate and the offending runs or bricks, and changes nothing."""

import json

from nexus_assets.lifecycle.step import sealed_manifest
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.lifecycle_helpers import (
    CLOSED_RUN,
    OPEN_RUN,
    TOPIC,
    seal_args,
    write_walk_project,
)
from nexus_assets_tests.project import Project, nexus_run


def refused(capsys, p: Project, topic: str = TOPIC) -> tuple[dict[str, dict], str]:
    code, out, err = run_cli(capsys, *seal_args(p, topic), "--json")
    assert code == 1, err
    data = json.loads(out)
    assert data["sealed"] is False
    return {g["gate"]: g for g in data["failed_gates"]}, err


def assert_untouched(p: Project, topic: str = TOPIC, state: str = "ACTIVE") -> None:
    with Vault.open(p.db, read_only=True) as v:
        assert v.topic_state(topic) == state
        assert not any(b.state == "FINAL" for b in v.bricks.select(topic))
        assert sealed_manifest(v, topic) is None


def active_walk(p: Project, capsys, *, close: bool = True) -> None:
    write_walk_project(p)
    run_json(capsys, *p.cli_args(), "activate", TOPIC, "--topics-dir", str(p.topics))
    if close:
        p.write_run("open.json", json.loads((p.runs / "open.json").read_text()) | {"status": "CLOSED"})
    run_json(capsys, *p.sync_args(TOPIC))


def test_an_open_source_run_refuses_the_seal(project: Project, capsys):
    run_json(capsys, *project.sync_args("nexus-server-sync"))
    gates, err = refused(capsys, project, "nexus-server-sync")
    assert set(gates) == {"open_runs"}
    assert gates["open_runs"]["offending"] == ["run-2026-11-18-open-brainstorm"]
    assert "seal of 'nexus-server-sync' refused" in err
    assert "gate open_runs: 1 source run(s) of its bricks are still OPEN: run-2026-11-18-open-brainstorm" in err
    assert "nexus close RUN_ID" in err
    assert_untouched(project, "nexus-server-sync")


def test_a_stale_brick_refuses_the_seal(empty_project: Project, capsys):
    p = empty_project
    active_walk(p, capsys)
    brick = next(b for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC) if b["sources"][0]["run_id"] == CLOSED_RUN)
    # The source changes under the brick: the next sync ingests the new version and flags it.
    p.write_run("closed.json", nexus_run(CLOSED_RUN, [("user", "A sync may be anything. Nothing else here.")], start="2026-01-01T00:00:00Z"))
    code, _, _ = run_cli(capsys, *p.sync_args(TOPIC))
    assert code == 1  # the drift check fails the sync
    gates, err = refused(capsys, p)
    assert set(gates) == {"stale_bricks"}, gates
    assert gates["stale_bricks"]["offending"] == [brick["brick_id"]]
    assert "gate stale_bricks: 1 brick(s) are stale" in err and brick["brick_id"][:12] in err
    assert "restore the source text" in err
    assert_untouched(p)


def test_a_source_file_changed_since_the_sync_is_stale_too(empty_project: Project, capsys):
    p = empty_project
    active_walk(p, capsys)
    p.write_run("closed.json", nexus_run(CLOSED_RUN, [("user", "Rewritten.")], start="2026-01-01T00:00:00Z"))
    gates, err = refused(capsys, p)
    assert {"stale_bricks", "sync_out_of_date"} <= set(gates)
    assert str(p.runs / "closed.json") in gates["sync_out_of_date"]["offending"]
    assert "run files not ingested yet" in err
    assert_untouched(p)


def test_runs_ingested_after_the_last_sync_refuse_the_seal(empty_project: Project, capsys):
    p = empty_project
    active_walk(p, capsys)
    # Another topic's sync ingests a new run; this topic has not looked at it yet.
    p.write_topic("other", keywords=["elsewhere"])
    p.write_run("new.json", nexus_run("r-new", [("user", "The sync should also page someone.")], start="2026-02-01T00:00:00Z"))
    run_json(capsys, *p.sync_args("other"))
    gates, err = refused(capsys, p)
    assert set(gates) == {"sync_out_of_date"}
    assert gates["sync_out_of_date"]["offending"] == ["r-new"]
    assert f"gate sync_out_of_date: the latest sync of '{TOPIC}' does not reflect the current inputs" in err
    assert "runs ingested after it: r-new" in err and f"nexus sync --topic {TOPIC}" in err
    assert_untouched(p)

    run_json(capsys, *p.sync_args(TOPIC))
    assert run_json(capsys, *seal_args(p))["state"] == "LOCKED"


def test_a_run_closed_after_the_last_sync_refuses_the_seal(empty_project: Project, capsys):
    p = empty_project
    active_walk(p, capsys, close=False)
    run_json(capsys, *p.cli_args(), "close", OPEN_RUN)
    gates, err = refused(capsys, p)
    assert set(gates) == {"sync_out_of_date"}
    assert gates["sync_out_of_date"]["offending"] == [OPEN_RUN]
    assert f"runs closed after it: {OPEN_RUN}" in err
    assert_untouched(p)


def test_an_unsynced_run_file_refuses_the_seal(empty_project: Project, capsys):
    p = empty_project
    active_walk(p, capsys)
    new = p.write_run("later/new.json", nexus_run("r-new", [("user", "More about the vault.")]))
    gates, err = refused(capsys, p)
    assert set(gates) == {"sync_out_of_date"}
    assert gates["sync_out_of_date"]["offending"] == [str(new)]
    assert "run files not ingested yet" in err
    assert_untouched(p)


def test_a_topic_file_changed_since_the_last_sync_refuses_the_seal(empty_project: Project, capsys):
    p = empty_project
    active_walk(p, capsys)
    path = p.topics / f"{TOPIC}.yaml"
    path.write_text(path.read_text().replace("[sync, vault]", "[sync, vault, bricks]"))
    gates, err = refused(capsys, p)
    assert set(gates) == {"sync_out_of_date"}
    assert f"its topic file {path} changed" in err
    assert_untouched(p)


def test_a_topic_without_bricks_is_not_sealed(empty_project: Project, capsys):
    p = empty_project
    active_walk(p, capsys)
    p.write_topic("empty", keywords=["zeppelin"])
    run_json(capsys, *p.sync_args("empty"))
    gates, err = refused(capsys, p, "empty")
    assert set(gates) == {"no_bricks"}
    assert "nothing to seal" in err
    assert_untouched(p, "empty")


def test_every_failed_gate_is_reported_at_once(empty_project: Project, capsys):
    p = empty_project
    active_walk(p, capsys, close=False)
    p.write_run("later/new.json", nexus_run("r-new", [("user", "More about the vault.")]))
    gates, _ = refused(capsys, p)
    assert set(gates) == {"open_runs", "sync_out_of_date"}


def test_seal_usage_errors_exit_2(empty_project: Project, capsys):
    p = empty_project
    code, _, err = run_cli(capsys, *seal_args(p))
    assert code == 2 and "no vault" in err
    write_walk_project(p)
    p.write_topic("other", keywords=["sync"])
    run_json(capsys, *p.sync_args("other"))
    code, _, err = run_cli(capsys, *seal_args(p))
    assert code == 2 and f"topic '{TOPIC}' is DRAFT" in err and f"nexus activate {TOPIC}" in err
    code, _, err = run_cli(capsys, *seal_args(p, "nope"))
    assert code == 2 and "unknown topic 'nope'" in err


def test_an_altered_manifest_history_refuses_the_seal(empty_project: Project, capsys):
    from nexus_assets_tests.lifecycle_helpers import tamper

    p = empty_project
    active_walk(p, capsys)
    tamper(p, "UPDATE manifests SET bricks_json = '[]' WHERE topic_id = ? AND seq = 0", [TOPIC])
    gates, err = refused(capsys, p)
    assert set(gates) == {"manifest_chain"}
    assert "manifest #0 of walk was altered" in err and "nexus verify" in err
    assert_untouched(p)


def honest_model(body: dict) -> dict:
    """Points at every node it is shown, verbatim."""
    from nexus_assets_tests.llm_server import request_topics_and_fragment

    (topic_id,), fragment = request_topics_and_fragment(body)
    return {"extracted_pointers": [{"topic_id": topic_id, "node": n["node"], "verbatim_quote": n["text"]} for n in fragment["nodes"]]}


def test_runs_the_extractor_never_answered_for_refuse_the_seal(empty_project: Project, capsys, monkeypatch):
    from nexus_assets_tests.llm_server import (
        DEFAULT_API_KEY,
        DEFAULT_MODEL,
        ErrorReply,
        FakeOpenAIServer,
    )

    p = empty_project
    p.write_topic("vault-notes", keywords=["vault"])
    p.write_run("a.json", nexus_run("run-a", [("user", "The vault is append-only.")]))
    p.write_run("b.json", nexus_run("run-b", [("user", "Our vault lives in DuckDB.")]))
    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
    monkeypatch.setenv("NEXUS_LLM_CONCURRENCY", "1")  # the scripted replies go to requests in arrival order
    monkeypatch.setenv("NEXUS_LLM_TOKEN_BUDGET", "32")  # one run a request: run-a's fails, run-b's does not
    with FakeOpenAIServer(handler=honest_model) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        server.script(*[ErrorReply(500)] * 5)  # run-a's call outlasts every retry; the sync still succeeds
        (result,) = run_json(capsys, *p.sync_args("vault-notes"), "--extractor", "openai")
        assert result["success"]
        gates, err = refused(capsys, p, "vault-notes")
        assert set(gates) == {"sync_out_of_date"}
        assert gates["sync_out_of_date"]["offending"] == ["run-a"]
        assert "runs not extracted and validated for it yet: run-a" in err
        assert_untouched(p, "vault-notes")

        run_json(capsys, *p.sync_args("vault-notes"), "--extractor", "openai")
    sealed = run_json(capsys, *seal_args(p, "vault-notes"))
    assert sealed["state"] == "LOCKED" and sealed["bricks"] == 2
