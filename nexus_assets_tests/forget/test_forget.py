"""Invariant 15: `nexus forget` removes every copy of a source's text, provably, and records a
tombstone in each affected topic's manifest chain; lineage runs both ways."""

import json
import re
import shutil
from pathlib import Path

import anyio
import pytest

from nexus_assets.core.sentences import sentences
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json, run_nexus
from nexus_assets_tests.project import REPO, Project
from nexus_assets_tests.mcp_server.test_mcp import stdio, structured  # at import: the SDK's stdio client keeps the real stderr

TOPIC = "nexus-server-sync"
RUN_ID = "run-2026-10-21-ordering-review"
RUN_FILE = "nexus/2026-10-21-ordering-review.json"
# An early run: its bricks come first in storage-decisions' manifest order, so its preview quotes them.
EARLY_RUN_ID = "run-2026-10-09-vault-design"
EARLY_RUN_FILE = "nexus/2026-10-09-vault-design.json"
STORAGE_TOPIC = "storage-decisions"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A persistent Dagster instance, as `dagster dev` and `nexus sync` share in a project."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def own_sentences(project: Project, run_file: str = RUN_FILE) -> list[str]:
    """Sentences of the run to forget that no other run file contains."""
    doc = json.loads((project.runs / run_file).read_text(encoding="utf-8"))
    others = "\n".join(p.read_text(encoding="utf-8") for p in project.runs.rglob("*.json") if not p.samefile(project.runs / run_file))
    found = [s for m in doc["messages"] for s in sentences(m["content"]) if len(s) >= 12]
    return [s for s in found if json.dumps(s)[1:-1] not in others and s not in others]


def bytes_containing(paths: list[Path], texts: list[str]) -> list[str]:
    hits = []
    for root in paths:
        for f in [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]:
            data = f.read_bytes()
            hits += [f"{f}: {t[:30]}" for t in texts if t.encode("utf-8") in data or json.dumps(t)[1:-1].encode() in data]
    return hits


def test_forget_a_run_that_shares_one_brick_and_alone_backs_others(project: Project, home: Path, capsys):
    p = project
    run_json(capsys, *p.sync_args())
    texts = own_sentences(p)
    assert texts
    assert bytes_containing([p.db, home], texts), "before forgetting, the text is in the vault and in Dagster's storage"
    before = {b["brick_id"]: b for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")}

    # Forwards lineage = the plan; without --yes nothing changes.
    forward = run_json(capsys, *p.cli_args(), "lineage", "--run", RUN_ID)
    (shared,) = forward["bricks_shared"]
    alone = {b["brick_id"] for b in forward["bricks_alone"]}
    assert alone and shared["other_runs"] == ["run-2026-10-03-sync-kickoff"]
    planned = run_json(capsys, *p.cli_args(), "forget", "--run", RUN_ID, "--reason", "the author asked")
    assert planned["changed"] is False and planned["plan"]["bricks_alone"] == forward["bricks_alone"]
    assert run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all") == list(before.values())

    report = run_json(capsys, *p.cli_args(), "forget", "--run", RUN_ID, "--reason", "the author asked", "--yes")
    assert report["proof"]["text_gone"] is True and report["proof"]["pieces_checked"] > 0
    assert set(report["bricks_removed"]) == alone
    assert report["dagster"]["dagster_runs"] > 0

    after = {b["brick_id"]: b for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")}
    assert not alone & set(after), "bricks it alone backed are gone"
    kept = after[shared["brick_id"]]
    assert [s["run_id"] for s in kept["sources"]] == ["run-2026-10-03-sync-kickoff"], "the shared brick keeps its other source"
    assert set(after) == set(before) - alone

    with Vault.open(p.db, read_only=True) as v:
        chain = v.bricks.manifests(TOPIC)
        stone = chain[-1].tombstone
    assert stone is not None and stone.run_ids == (RUN_ID,) and set(stone.brick_ids) == alone
    assert stone.reason == "the author asked" and "nexus forget" in stone.actor
    assert run_json(capsys, *p.cli_args(), "verify")["ok"] is True

    # A later sync with the file still there does not bring it back, and says why.
    code, out, err = run_cli(capsys, *p.sync_args(), "--json")
    assert f"skipped run {RUN_ID}" in err and report["tombstone_id"] in err
    assert set(b["brick_id"] for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")) == set(after)

    # Byte search after the command returned: the vault file, its WAL, Dagster's storage.
    assert (p.runs / RUN_FILE).exists()
    places = [p.db, home, *p.db.parent.glob(p.db.name + ".wal"), *p.db.parent.glob(p.db.stem + ".search")]
    assert bytes_containing(places, texts) == []


def test_lineage_backwards_names_file_version_extraction_occurrence_and_manifests(project: Project, capsys):
    run_json(capsys, *project.sync_args())
    brick = run_json(capsys, *project.cli_args(), "bricks", TOPIC)[0]
    data = run_json(capsys, *project.cli_args(), "lineage", brick["brick_id"][:10])
    assert data["brick"]["brick_id"] == brick["brick_id"]
    (src, *_) = data["sources"]
    assert src["canonical"] and src["run_id"] == brick["sources"][0]["run_id"]
    assert Path(src["file"]).exists() and re.fullmatch(r"[0-9a-f]{64}", src["file_sha256"])
    assert src["run_version"] and src["extraction"]["extractor"].startswith("embedded")
    assert (src["occurrence"]["start"], src["occurrence"]["end"]) == (brick["sources"][0]["start"], brick["sources"][0]["end"])
    manifest = run_json(capsys, *project.cli_args(), "manifest", TOPIC)
    assert data["manifests"][-1]["manifest_hash"] == manifest["manifest_hash"]
    assert data["answers"] == [] and data["sealed"] is False


def test_forget_refuses_bad_usage_and_changes_nothing(project: Project, capsys):
    run_json(capsys, *project.sync_args())
    code, _, err = run_cli(capsys, *project.cli_args(), "forget", "--run", "no-such-run", "--reason", "x", "--yes")
    assert code == 2 and "no run 'no-such-run'" in err
    code, _, err = run_cli(capsys, *project.cli_args(), "forget", "--run", RUN_ID, "--file", "x", "--reason", "x")
    assert code == 2 and "exactly one" in err
    code, _, err = run_cli(capsys, *project.cli_args(), "forget", "--file", str(project.runs / "nope.json"), "--reason", "x")
    assert code == 2 and "holds nothing read from" in err


def test_forget_a_file_with_delete_file_in_a_sealed_topic(empty_project: Project, capsys):
    """A FINAL brick is forgotten too: the one exception to immutability, recorded in the sealed chain."""
    from nexus_assets_tests.project import nexus_run

    p = empty_project
    p.write_topic("walk", keywords=["vault"])
    p.write_run("keep.json", nexus_run("run-keep", [("user", "The vault keeps history forever.")]))
    p.write_run("drop.json", nexus_run("run-drop", [("user", "The vault also stores my secret garden plan.")]))
    run_json(capsys, *p.sync_args())
    run_json(capsys, *p.cli_args(), "seal", "walk", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics))
    assert {b["state"] for b in run_json(capsys, *p.cli_args(), "bricks", "walk")} == {"FINAL"}
    report = run_json(capsys, *p.cli_args(), "forget", "--file", str(p.runs / "drop.json"), "--reason", "erasure request", "--yes", "--delete-file")
    assert report["proof"]["text_gone"] and report["files_deleted"] and not (p.runs / "drop.json").exists()
    left = run_json(capsys, *p.cli_args(), "bricks", "walk")
    assert [b["content"] for b in left] == ["The vault keeps history forever."] and left[0]["state"] == "FINAL"
    with Vault.open(p.db, read_only=True) as v:
        assert v.bricks.latest_manifest("walk", sealed=True).tombstone is not None
    assert run_json(capsys, *p.cli_args(), "verify")["ok"] is True
    assert b"secret garden" not in p.db.read_bytes()


def test_forget_drops_a_waiting_stage_that_quotes_the_run(project: Project, home: Path, capsys):
    """A resolution staged and never published (a sync stopped between resolving and publishing)
    holds the run's text too; forgetting removes that stage with the rest."""
    from nexus_assets.resolve.step import stage_resolution

    p = project
    run_json(capsys, *p.sync_args())
    texts = own_sentences(p)
    with Vault.open(p.db) as v:
        stage_resolution(v, v.topics.topic("storage-decisions"), v.bricks.select(TOPIC), inputs_digest="interrupted")
        assert v.conn.execute("SELECT count(*) FROM staged_brick_sources WHERE run_id = ?", [RUN_ID]).fetchone()[0] > 0
    run_json(capsys, *p.cli_args(), "forget", "--run", RUN_ID, "--reason", "the author asked", "--yes")
    with Vault.open(p.db, read_only=True) as v:
        assert v.conn.execute("SELECT count(*) FROM staged_brick_sources WHERE run_id = ?", [RUN_ID]).fetchone()[0] == 0
        assert not v.stage.waiting("storage-decisions", "interrupted")
    assert bytes_containing([p.db, *p.db.parent.glob(p.db.name + ".wal")], texts) == []


def test_forget_a_run_quoted_in_the_manifest_preview_clears_dagsters_cached_events(project: Project, home: Path, capsys):
    """Dagster keeps copies of a materialization outside its run: the asset key's cached latest
    materialization (its metadata preview quotes the first bricks) and the check results. Deleting
    the runs left those, so the text survived. Through Dagster's public API only: the cached one is
    replaced by a runless materialization naming the tombstone; check results quote no text, so
    those of deleted runs may stay. Another topic's Dagster history stays (a run of its own; a sync's
    one run over several topics is deleted whole when it holds the text, docs/forgetting.md)."""
    import dagster as dg

    p = project
    run_json(capsys, *p.sync_args())
    p.write_topic("on-call", keywords=["on-call"])  # not touched by the forgotten run
    run_json(capsys, *p.sync_args("on-call"))
    texts = own_sentences(p, EARLY_RUN_FILE)
    manifest_key = dg.AssetKey("topic_manifest")
    with dg.DagsterInstance.get() as instance:
        (latest,) = instance.fetch_materializations(dg.AssetRecordsFilter(manifest_key, asset_partitions=[STORAGE_TOPIC]), limit=1).records
        preview = [r.data["text"] for r in latest.asset_materialization.metadata["preview"].records]
        assert any(t in row for row in preview for t in texts), "the preview quotes the run to forget"
        kept_runs = {r.run_id for r in instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": "on-call"}))}
    assert kept_runs

    code, out, err = run_cli(capsys, *p.cli_args(), "forget", "--run", EARLY_RUN_ID, "--reason", "erasure request", "--yes", "--json")
    report = json.loads(out)
    assert report["proof"]["leftovers"] == [] and code == 0, err
    assert report["proof"]["text_gone"] is True and report["dagster"]["dagster_runs"] > 0
    assert bytes_containing([p.db, home], texts) == []

    with dg.DagsterInstance.get() as instance:
        assert all(instance.has_run(r) for r in kept_runs)
        assert instance.fetch_materializations(dg.AssetRecordsFilter(manifest_key, asset_partitions=["on-call"]), limit=1).records
        # What is left of the forgotten topic's partition is forget's own runless report, naming the tombstone.
        left = instance.fetch_materializations(dg.AssetRecordsFilter(manifest_key, asset_partitions=[STORAGE_TOPIC]), limit=10).records
        assert all(not r.run_id for r in left)
        assert all(r.asset_materialization.metadata["forgotten_by_tombstone"].value == report["tombstone_id"] for r in left)
        for record in instance.get_asset_records():
            last = record.asset_entry.last_materialization_record
            assert last is None or not last.run_id or instance.has_run(last.run_id), f"{record.asset_entry.asset_key} caches a deleted run's event"
        check = dg.AssetCheckKey(manifest_key, "checksum_drift")
        executions = instance.event_log_storage.get_asset_check_execution_history(check, limit=100)
        assert {e.run_id for e in executions} & kept_runs
        stored = [dg.serialize_value(e.event) for e in executions if e.event is not None]
        assert not [t for t in texts for s in stored if t in s or json.dumps(t)[1:-1] in s], "a check result quotes the text"


@pytest.mark.parametrize("point", ["committed", "compacted"])
def test_a_forget_killed_after_its_commit_is_finished_by_a_rerun_and_reported_by_verify(project: Project, home: Path, capsys, point):
    """kill -9 after the commit (before the vault file is rewritten, or with the rewritten copy not yet
    in place) leaves the text in the vault's bytes: `verify` says so, and the same command finishes it."""
    p = project
    run_json(capsys, *p.sync_args())
    texts = own_sentences(p)
    forget = ["--db", str(p.db), "forget", "--run", RUN_ID, "--reason", "the author asked", "--yes"]
    killed = run_nexus(*forget, env={"NEXUS_TEST_KILL_FORGET_AT": point})
    assert killed.returncode == -9, killed.stderr
    compact = p.db.with_name(p.db.name + ".compact")
    assert bytes_containing([p.db], texts) or compact.exists(), "the erasure is unfinished"

    line = (
        f"forgetting {RUN_ID} (tombstone {{}}) was interrupted after its commit: its text may still be in the vault's "
        "bytes and indexes; run `nexus forget` for it with --yes again to finish erasing it"
    )
    report = run_json(capsys, *p.cli_args(), "verify", expect=1)
    (tombstone,) = [t["tombstone_id"] for t in tombstones_of(p)]
    assert report["unfinished_forget"] == line.format(tombstone)
    code, out, err = run_cli(capsys, *p.cli_args(), "verify")
    assert code == 1 and f"FORGET {line.format(tombstone)}" in out.splitlines()

    again = run_nexus(*forget, "--json")
    assert again.returncode == 0, again.stderr
    done = json.loads(again.stdout)
    assert (done["resumed"], done["tombstone_id"], done["proof"]["text_gone"]) == (True, tombstone, True)
    assert bytes_containing([p.db, home], texts) == []
    assert not compact.exists() and not p.db.with_name(p.db.name + ".forgetting").exists()
    assert run_json(capsys, *p.cli_args(), "verify")["ok"] is True
    code, _, err = run_cli(capsys, *forget)
    assert (code, err.strip()) == (2, f"nexus: run {RUN_ID!r} was already forgotten (tombstone {tombstone})")


def tombstones_of(p: Project) -> list[dict]:
    with Vault.open(p.db, read_only=True) as v:
        return v.forgetting.tombstones()


def test_forget_with_the_llm_path_leaves_none_of_the_runs_text_in_requests_replies_or_rejections(
    empty_project: Project, home: Path, capsys, monkeypatch
):
    """Invariant 15 through the openai extractor (a real Chat Completions server on 127.0.0.1): the
    run's text reaches the vault in the LLM requests, their raw replies and the rejected quotes (a
    model's near-miss holds the run's words). After `nexus forget`, none of it is in any byte."""
    from nexus_assets_tests.llm_server import DEFAULT_API_KEY, DEFAULT_MODEL, FakeOpenAIServer
    from nexus_assets_tests.project import nexus_run
    from nexus_assets_tests.llm.test_openai_sync import fragment_of

    p = empty_project
    p.write_topic("garden", keywords=["vault"])
    secret = ["The vault holds the walled garden plan for Elm Street.", "Our vault key is taped under the blue bench."]
    p.write_run("keep.json", nexus_run("run-a-keep", [("user", "The vault keeps history forever.")]))
    p.write_run("drop.json", nexus_run("run-drop", [("user", " ".join(secret)), ("assistant", "Noted: the vault plan stays private.")]))
    secret.append("Noted: the vault plan stays private.")

    def model(body: dict) -> dict:
        # Each node's first sentence (a brick) and a near-miss of it (a rejection quoting the run).
        topic_id, fragment = fragment_of(body)
        pointers = []
        for node in fragment["nodes"]:
            first = sentences(node["text"])[0]
            for quote in (first, f"{first} (or so I recall)"):
                pointers.append({"topic_id": topic_id, "json_path": node["json_path"], "verbatim_quote": quote})
        return {"extracted_pointers": pointers}

    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
    with FakeOpenAIServer(handler=model) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run_json(capsys, *p.sync_args(), "--extractor", "openai")
        # Both small runs in one request, filed under its first run (run-a-keep): forgetting
        # run-drop must erase that shared request as well.
        assert server.request_count == 1
    # Before: the run's text is in each of the places this test is about, not only in bricks.
    with Vault.open(p.db, read_only=True) as v:
        # A request (with its raw reply) is stored once per chunk; each topic's answer (the quotes) per call.
        requests, replies = map(" ".join, zip(*v.conn.execute("SELECT request_json, raw_response FROM llm_requests").fetchall()))
        answers = " ".join(a for (a,) in v.conn.execute("SELECT pointers_json FROM llm_calls").fetchall())
        quotes = [q for (q,) in v.conn.execute("SELECT verbatim_quote FROM rejections WHERE run_id = 'run-drop'").fetchall()]
    assert all(json.dumps(s)[1:-1] in requests for s in secret)
    assert json.dumps(secret[0])[1:-1] in replies and json.dumps(secret[2])[1:-1] in replies
    assert secret[0] in answers and secret[2] in answers
    assert sorted(quotes) == sorted(f"{s} (or so I recall)" for s in (secret[0], secret[2]))
    places = [p.db, home, *p.db.parent.glob(p.db.name + ".wal"), *p.db.parent.glob(p.db.stem + ".search")]
    assert len(bytes_containing(places, secret)) >= len(secret)

    report = run_json(capsys, *p.cli_args(), "forget", "--run", "run-drop", "--reason", "erasure request", "--yes")
    assert report["proof"]["text_gone"] is True
    with Vault.open(p.db, read_only=True) as v:
        assert v.conn.execute("SELECT count(*) FROM rejections WHERE run_id = 'run-drop'").fetchone() == (0,)
        for table in ("llm_calls", "llm_requests"):
            assert v.conn.execute(f"SELECT count(*) FROM {table} WHERE run_id = 'run-drop'").fetchone() == (0,)
        assert v.conn.execute("SELECT count(*) FROM llm_calls WHERE run_id = 'run-a-keep'").fetchone() == (1,), "other runs' answers stay"
        # The request that carried both runs held run-drop's text: it is gone, whichever run it is filed under.
        assert v.conn.execute("SELECT count(*) FROM llm_requests").fetchone() == (0,)
    assert bytes_containing(places, secret) == []
    assert [b["content"] for b in run_json(capsys, *p.cli_args(), "bricks", "garden")] == ["The vault keeps history forever."]


def test_a_forget_through_mcp_finishes_the_erasure_a_killed_cli_forget_committed_and_no_journal_is_overwritten(
    project: Project, home: Path, capsys
):
    """Issue 50 item 4: one forgetting service for every shell. `nexus forget` is killed after its
    commit (its physical erasure pending, in its journal); a forget of another run through the MCP
    `forget` tool writes its own journal beside it, finishes the first erasure, then its own: both
    runs' text is gone from every byte Nexus keeps (vault, WAL, indexes, Dagster's storage)."""
    p = project
    run_json(capsys, *p.sync_args())
    texts = own_sentences(p) + own_sentences(p, EARLY_RUN_FILE)
    assert own_sentences(p) and own_sentences(p, EARLY_RUN_FILE)
    forget = ["--db", str(p.db), "forget", "--run", RUN_ID, "--reason", "the author asked", "--yes"]
    killed = run_nexus(*forget, env={"NEXUS_TEST_KILL_FORGET_AT": "committed"})
    assert killed.returncode == -9, killed.stderr
    (first,) = [t["tombstone_id"] for t in tombstones_of(p)]
    journals = lambda: sorted(f.name for f in p.db.parent.glob(p.db.name + ".forgetting*"))  # noqa: E731
    assert journals() == [f"{p.db.name}.forgetting.{first}"], "the journal is named by its tombstone"

    async def through_mcp():
        async with stdio(p, "--allow-writes") as client:
            planned = structured(await client.call_tool("forget", {"run_id": EARLY_RUN_ID, "reason": "asked too"}))
            done = structured(await client.call_tool("forget", {"run_id": EARLY_RUN_ID, "reason": "asked too", "confirm": True}))
        return planned, done

    planned, done = anyio.run(through_mcp)
    assert (planned["changed"], planned["unfinished"]) == (False, [first])
    assert done["changed"] is True and done["report"]["run_ids"] == [EARLY_RUN_ID] and done["report"]["proof"]["text_gone"]
    (finished,) = done["finished_first"]
    assert (finished["tombstone_id"], finished["resumed"], finished["proof"]["text_gone"]) == (first, True, True)
    assert {t["tombstone_id"] for t in tombstones_of(p)} == {first, done["report"]["tombstone_id"]}
    assert journals() == [], "each journal was removed once its erasure was proven"

    derived = [f for f in p.root.iterdir() if f.name not in ("runs", "topics", "gold")]
    assert p.db in derived and bytes_containing([*derived, home], texts) == []
    assert run_json(capsys, *p.cli_args(), "verify")["ok"] is True


def test_a_second_forget_never_writes_over_a_pending_journal(project: Project, home: Path):
    """The journal of a committed, unfinished forget survives any later forget until its own erasure is proven."""
    import os

    from nexus_assets.forget.step import _write_journal, journal_path

    p = project
    p.db.write_bytes(b"")  # only the journal's place beside it matters here
    journal = {"tombstone_id": "0123456789abcdef", "pieces": ["the first forget's text"]}
    _write_journal(p.db, journal)
    path = journal_path(p.db, journal["tombstone_id"])
    assert json.loads(path.read_text()) == journal and oct(os.stat(path).st_mode & 0o777) == "0o600"
    with pytest.raises(FileExistsError):
        _write_journal(p.db, {**journal, "pieces": ["another"]})
    assert json.loads(path.read_text()) == journal
    _write_journal(p.db, {**journal, "tombstone_id": "fedcba9876543210"})
    assert sorted(f.name for f in p.db.parent.glob(p.db.name + ".forgetting*")) == [
        f"{p.db.name}.forgetting.0123456789abcdef", f"{p.db.name}.forgetting.fedcba9876543210"
    ]
