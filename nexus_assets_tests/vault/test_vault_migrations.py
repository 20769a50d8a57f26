"""A vault from the previous release opens, keeps every brick and hash, and replays without the LLM.

The fixture `fixtures/vault_release_0_1/` was written by release 0.1 (commit 2bebc12): the sample
Nexus runs compiled for the two sample topics with the embedded extractor, and for `vault-llm`
with the openai extractor against a scripted server on 127.0.0.1. It is stored as DuckDB's
`EXPORT DATABASE` (schema.sql, load.sql, CSV), so it is text a reviewer can read, and it is
imported here into a real DuckDB file exactly as that release laid it out.
"""

import shutil
from pathlib import Path

import duckdb
import pytest

from nexus_assets.vault.migrations import (
    LATEST,
    MIGRATIONS,
    STAGE_TABLES,
    VaultTooNew,
    schema_version,
)
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.manifest_helpers import listed_manifests
from nexus_assets_tests.llm_server import (
    DEFAULT_API_KEY,
    DEFAULT_MODEL,
    FakeOpenAIServer,
)
from nexus_assets_tests.project import FIXTURES, Project, nexus_run

FIXTURE = FIXTURES / "vault_release_0_1"
SAMPLE_TOPICS = ["nexus-server-sync", "storage-decisions"]
LLM_TOPIC = "vault-llm"


def release_vault(root: Path) -> Path:
    """Import the release-0.1 vault into `root`, moved there with its run files."""
    shutil.copytree(FIXTURE, root, dirs_exist_ok=True)
    export = root / "export"
    load = (export / "load.sql").read_text()
    generated_export = load.split("COPY ", 2)[1].split("'")[1].rsplit("/", 1)[0]
    (export / "load.sql").write_text(load.replace(generated_export, str(export)))
    db = root / "vault.duckdb"
    old_root = (root / "generated_at_root.txt").read_text().strip()
    with duckdb.connect(str(db)) as con:
        con.execute(f"IMPORT DATABASE '{export}'")
        # Moving a vault with its runs: only where the files live changes.
        con.execute("UPDATE runs SET source_file = replace(source_file, ?, ?)", [old_root, str(root)])
    return db


def snapshot(db: Path) -> dict:
    with duckdb.connect(str(db), read_only=True) as con:
        def rows(sql: str) -> list:
            return con.execute(sql).fetchall()

        return {
            "bricks": rows(
                "SELECT brick_id, topic_id, content, fingerprint, state, order_index, superseded_by, stale FROM bricks ORDER BY brick_id"
            ),
            "sources": rows(
                "SELECT brick_id, seq, run_id, json_path, start_offset, end_offset, node_checksum FROM brick_sources ORDER BY ALL"
            ),
            # As each manifest lists, whether its list is stored whole or per entry (migration 27).
            "manifests": sorted(listed_manifests(con)),
            "runs": rows("SELECT run_id, version_id, status, file_sha256, is_latest FROM runs ORDER BY ALL"),
            "llm_calls": rows("SELECT call_key, status, raw_response FROM llm_calls ORDER BY ALL"),
            "occurrences": rows(
                "SELECT topic_id, run_id, version_id, json_path, start_offset, end_offset, node_checksum, content, fingerprint, "
                "ts, position FROM occurrences ORDER BY ALL"
            ),
        }


@pytest.fixture
def old_vault(tmp_path, monkeypatch) -> Path:
    db = release_vault(tmp_path / "project")
    monkeypatch.chdir(tmp_path / "project")
    return db


def test_the_release_vault_is_recognised_as_version_1(old_vault):
    with duckdb.connect(str(old_vault)) as con:
        assert schema_version(con) == 1
        assert "schema_version" not in {r[0] for r in con.execute("SHOW TABLES").fetchall()}


def test_opening_upgrades_in_place_and_keeps_every_brick_source_and_hash(old_vault, capsys):
    before = snapshot(old_vault)
    assert before["bricks"] and before["llm_calls"] and before["manifests"]
    with Vault.open(old_vault) as v:
        assert schema_version(v.conn) == LATEST
        history = v.conn.execute("SELECT version, description FROM schema_version ORDER BY version").fetchall()
    assert history[0] == (1, "release 0.1 schema (found in place)")
    assert [h[0] for h in history] == [m.version for m in MIGRATIONS]
    assert snapshot(old_vault) == before
    # And through the outside surface, the same ids and hashes.
    for topic in [*SAMPLE_TOPICS, LLM_TOPIC]:
        listed = run_json(capsys, "--db", str(old_vault), "bricks", topic, "--all")
        assert sorted(b["brick_id"] for b in listed) == sorted(r[0] for r in before["bricks"] if r[1] == topic)
        manifest = run_json(capsys, "--db", str(old_vault), "manifest", topic)
        assert manifest["manifest_hash"] == max((m for m in before["manifests"] if m[0] == topic), key=lambda m: m[1])[2]


def test_a_read_only_command_upgrades_an_old_vault_once(old_vault, capsys):
    topics = run_json(capsys, "--db", str(old_vault), "topics")
    assert {t["topic_id"] for t in topics} >= {*SAMPLE_TOPICS, LLM_TOPIC}
    with duckdb.connect(str(old_vault), read_only=True) as con:
        assert schema_version(con) == LATEST


def test_a_replay_resync_sends_nothing_and_leaves_every_manifest_hash(old_vault, capsys, monkeypatch):
    before = snapshot(old_vault)
    base = ["--db", str(old_vault), "sync", "--runs-dir", "runs", "--topics-dir", "topics"]
    results = run_json(capsys, *base, *sum((["--topic", t] for t in SAMPLE_TOPICS), []))
    assert all(r["success"] for r in results)
    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        (result,) = run_json(capsys, *base, "--topic", LLM_TOPIC, "--extractor", "openai", "--replay-only")
        assert result["success"]
        assert server.request_count == 0, "every answer replays from the stored LLM calls"
    after = snapshot(old_vault)
    latest = lambda snap: {t: max((m for m in snap["manifests"] if m[0] == t), key=lambda m: m[1])[2] for t in (*SAMPLE_TOPICS, LLM_TOPIC)}
    assert latest(after) == latest(before)
    assert after["bricks"] == before["bricks"]
    assert after["sources"] == before["sources"]
    assert after["llm_calls"] == before["llm_calls"]


def test_a_vault_from_a_newer_release_is_refused_not_damaged(tmp_path):
    db = tmp_path / "future.duckdb"
    with Vault.open(db):
        pass
    with duckdb.connect(str(db)) as con:
        con.execute("INSERT INTO schema_version VALUES (?, 'from the future', now())", [LATEST + 1])
    with pytest.raises(VaultTooNew, match="newer than this Nexus Sync"):
        with Vault.open(db):
            pass


def test_a_vault_from_before_the_stage_opens_and_resyncs_unchanged(tmp_path, capsys):
    """A vault the previous main wrote (schema 12: resolved bricks went between steps in memory)
    gets the stage tables on open, keeps everything, and re-syncs to the same hashes."""

    def back_to_12(con):
        for table in STAGE_TABLES:
            con.execute(f"DROP TABLE {table}")
        con.execute("DELETE FROM schema_version WHERE version >= 13")
        assert schema_version(con) == 12

    _opens_and_resyncs_through_the_stage(tmp_path, capsys, back_to_12)


@pytest.mark.parametrize("counted", [True, False], ids=["with-brick-count", "without"])
def test_a_schema_13_vault_opens_and_resyncs_through_the_stage(tmp_path, capsys, counted):
    """Migration 13 first shipped with a brick count in the stage's header and later landed without
    it: a schema-13 vault of either kind is brought to the same stage on open and syncs as usual."""

    def back_to_13(con):
        if counted:
            con.execute("DROP TABLE staged_resolutions")
            con.execute(
                "CREATE TABLE staged_resolutions (topic_id TEXT NOT NULL, inputs_digest TEXT, bricks INTEGER NOT NULL, "
                "staged_at TIMESTAMPTZ NOT NULL)"
            )
        con.execute("DELETE FROM schema_version WHERE version >= 14")
        assert schema_version(con) == 13

    _opens_and_resyncs_through_the_stage(tmp_path, capsys, back_to_13)


def _opens_and_resyncs_through_the_stage(tmp_path, capsys, downgrade):
    from nexus_assets_tests.project import sample_project

    p = sample_project(tmp_path / "proj")
    first = run_json(capsys, *p.sync_args())
    with duckdb.connect(str(p.db)) as con:
        downgrade(con)
    before = snapshot(p.db)
    with Vault.open(p.db) as v:
        assert schema_version(v.conn) == LATEST
    assert snapshot(p.db) == before
    # A new run makes one topic resolve and publish through the stage; the other stays as it was.
    p.write_run("later.json", nexus_run("run-later", [("user", "The vault keeps every checksum of every run.")]))
    again = {r["topic_id"]: r for r in run_json(capsys, *p.sync_args())}
    hashes = {r["topic_id"]: r["manifest_hash"] for r in first}
    assert again["nexus-server-sync"]["manifest_hash"] == hashes["nexus-server-sync"]
    assert again["storage-decisions"]["manifest_hash"] != hashes["storage-decisions"]
    after = snapshot(p.db)
    assert set(before["bricks"]) <= set(after["bricks"]) and len(after["bricks"]) == len(before["bricks"]) + 1


def test_a_file_the_previous_reader_refused_is_read_again_once(tmp_path, capsys):
    """Migration 15. The previous release made a `null` message cost its whole run; a vault it wrote
    holds that file as read, with one error and no run. The next sync reads the file again with
    this reader, which keeps the rest of the run; the sync after that reads nothing again."""
    from nexus_assets.core.fingerprint import sha256_hex
    from nexus_assets.ingest.runfiles import file_stat
    from nexus_assets_tests.project import sample_project

    p = sample_project(tmp_path / "proj")
    run_json(capsys, *p.sync_args())
    run = nexus_run("run-null", [("user", "The vault keeps a checksum of every run."), ("user", "dropped")])
    run["messages"][1] = None
    path = p.write_run("null.json", run)
    sha = sha256_hex(path.read_bytes())
    size, mtime, ctime, inode = file_stat(path)
    old_problem = "not a valid Nexus run: messages[1]: input should be an object"
    with duckdb.connect(str(p.db)) as con:
        con.execute("ALTER TABLE run_files DROP COLUMN reader_version")
        con.execute("DELETE FROM schema_version WHERE version >= 15")
        assert schema_version(con) == 14
        con.execute("INSERT INTO run_files VALUES (?, ?, 0, 1, now())", [sha, "runs/null.json"])
        con.execute("INSERT INTO ingestion_errors VALUES ('runs/null.json', ?, NULL, ?, now())", [sha, old_problem])
        con.execute(
            "INSERT INTO file_stats (path, size, mtime_ns, ctime_ns, inode, file_sha256, recorded_at) VALUES (?, ?, ?, ?, ?, ?, now())",
            [str(path.resolve()), size, mtime, ctime, inode, sha],
        )
    before = snapshot(p.db)

    assert all(r["success"] for r in run_json(capsys, *p.sync_args()))
    contents = [b["content"] for b in run_json(capsys, *p.cli_args(), "bricks", "storage-decisions")]
    assert "The vault keeps a checksum of every run." in contents
    problems = [e["problem"] for e in run_json(capsys, *p.cli_args(), "errors")]
    # The old verdict stays on record (invariant 8); the new one names the skipped message only.
    assert problems[0] == old_problem and len(problems) == 2 and problems[1].startswith("warning: messages[1] is null")
    after = snapshot(p.db)
    assert set(before["bricks"]) <= set(after["bricks"]) and len(after["bricks"]) == len(before["bricks"]) + 1

    assert all(r["success"] for r in run_json(capsys, *p.sync_args()))
    assert len(run_json(capsys, *p.cli_args(), "errors")) == 2, "read once: no second verdict"
    assert snapshot(p.db) == after


def test_a_brick_the_previous_rules_gave_the_edited_text_is_put_right_by_the_next_sync(tmp_path, capsys, monkeypatch):
    """The previous main ranked two versions of one node at one place by their text, so a
    case-only edit ("keep" to "Keep") made the edited version canonical: the brick took the edited
    text and was not stale, though its source had changed. Such a vault needs no migration: the
    topic's digest names the resolution rules, so the next sync resolves it again and the oldest
    version is canonical. Same ids and manifests, nothing lost."""
    import nexus_assets.resolve.records as store
    from nexus_assets_tests.project import Project

    p = Project(tmp_path / "proj")
    topic = "vault-notes"
    p.write_topic(topic, keywords=["vault"])
    p.write_run("a.json", nexus_run("run-a", [("user", "keep the vault append-only.")]))
    run_json(capsys, *p.sync_args())
    p.write_run("a.json", nexus_run("run-a", [("user", "Keep the vault append-only.")]))
    run_json(capsys, *p.sync_args(), expect=1)
    (right,) = run_json(capsys, *p.cli_args(), "bricks", topic)
    assert (right["content"], right["stale"]) == ("keep the vault append-only.", True)

    # What the previous main stored: the edited version first, the brick current, a clean sync,
    # and its digest, which named no rules.
    with Vault.open(p.db) as v:
        monkeypatch.setattr(store, "RESOLUTION_RULES", "")
        old_digest = v.stage.topic_inputs_digest(topic)
        monkeypatch.undo()
        bid = right["brick_id"]
        v.conn.execute("UPDATE brick_sources SET seq = 1 - seq WHERE brick_id = ?", [bid])
        v.conn.execute("UPDATE bricks SET content = 'Keep the vault append-only.', stale = false WHERE brick_id = ?", [bid])
        v.conn.execute(
            "UPDATE syncs SET inputs_digest = ? WHERE topic_id = ? AND finished_at = (SELECT max(finished_at) FROM syncs WHERE topic_id = ?)",
            [old_digest, topic, topic],
        )
        # Nor did it keep what each resolution read per run (migration 19): it resolves in full.
        v.conn.execute("DELETE FROM resolution_inputs")
    (wrong,) = run_json(capsys, *p.cli_args(), "bricks", topic)
    assert (wrong["content"], wrong["stale"]) == ("Keep the vault append-only.", False)
    before = snapshot(p.db)

    (result,) = run_json(capsys, *p.sync_args(), expect=1)
    assert result["checks"]["checksum_drift"] is False
    (now,) = run_json(capsys, *p.cli_args(), "bricks", topic)
    assert now == right
    after = snapshot(p.db)
    assert after["manifests"] == before["manifests"], "no new manifest: brick order and states did not change"
    assert after["occurrences"] == before["occurrences"] and after["runs"] == before["runs"]


def test_a_release_vault_resolves_in_full_once_then_follows_the_change(old_vault, capsys):
    """Migration 19: bricks from before it have no place keys and no record of what their
    resolution read, so the first sync resolves each topic in full (keeping every id and hash) and
    records both; a new run after that is resolved incrementally, and equals a full resolution."""
    before = snapshot(old_vault)
    base = ["--db", str(old_vault), "sync", "--runs-dir", "runs", "--topics-dir", "topics", "--no-recall"]
    topics = sum((["--topic", t] for t in SAMPLE_TOPICS), [])
    assert all(r["success"] for r in run_json(capsys, *base, *topics))
    after = snapshot(old_vault)
    assert after["bricks"] == before["bricks"] and after["manifests"] == before["manifests"]
    with duckdb.connect(str(old_vault), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM bricks WHERE topic_id IN ? AND first_key IS NULL", [SAMPLE_TOPICS]).fetchone()[0] == 0
        assert con.execute("SELECT count(DISTINCT topic_id) FROM resolution_inputs").fetchone()[0] >= 2

    run = nexus_run("run-after-upgrade", [("user", "The sync reads new runs; the storage keeps every brick.")])
    (old_vault.parent / "runs" / "after-upgrade.json").write_text(__import__("json").dumps(run))
    full = old_vault.with_name("full.duckdb")
    shutil.copy(old_vault, full)
    with duckdb.connect(str(full)) as con:
        con.execute("DELETE FROM resolution_inputs")
    assert all(r["success"] for r in run_json(capsys, *base, *topics))
    assert all(r["success"] for r in run_json(capsys, *base[:1], str(full), *base[2:], *topics))
    incremental, reference = snapshot(old_vault), snapshot(full)
    assert incremental["bricks"] == reference["bricks"] and incremental["manifests"] == reference["manifests"]
    assert len(incremental["manifests"]) > len(after["manifests"])


def test_a_vault_from_before_relations_opens_keeps_everything_relates_once_and_replays_without_the_llm(tmp_path, capsys, monkeypatch):
    """Migration 20 (related bricks): a vault the previous release wrote (schema 18, no relation
    tables) opens with every brick and hash, a re-sync relates its bricks once without changing a
    hash, and its LLM topic replays with no request."""
    root = tmp_path / "proj"
    db = release_vault(root)  # release 0.1, then brought to the previous release's schema
    monkeypatch.chdir(root)
    with Vault.open(db):
        pass
    with duckdb.connect(str(db)) as con:
        for table in ("brick_relations", "relation_builds"):
            con.execute(f"DROP TABLE {table}")
        con.execute("DELETE FROM schema_version WHERE version >= 19")
        assert schema_version(con) == 18
    before = snapshot(db)
    with Vault.open(db) as v:
        assert schema_version(v.conn) == LATEST >= 20
    assert snapshot(db) == before

    base = ["--db", str(db), "sync", "--runs-dir", "runs", "--topics-dir", "topics"]
    assert all(r["success"] for r in run_json(capsys, *base, *sum((["--topic", t] for t in SAMPLE_TOPICS), [])))
    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        (result,) = run_json(capsys, *base, "--topic", LLM_TOPIC, "--extractor", "openai", "--replay-only")
        assert result["success"] and server.request_count == 0
    after = snapshot(db)
    latest = lambda snap: {t: max((m for m in snap["manifests"] if m[0] == t), key=lambda m: m[1])[2] for t in (*SAMPLE_TOPICS, LLM_TOPIC)}
    assert latest(after) == latest(before)
    assert (after["bricks"], after["sources"], after["llm_calls"]) == (before["bricks"], before["sources"], before["llm_calls"])
    with duckdb.connect(str(db), read_only=True) as con:
        related = con.execute("SELECT count(*) FROM relation_builds").fetchone()[0]
        visible = con.execute("SELECT count(*) FROM bricks WHERE state <> 'SUPERSEDED'").fetchone()[0]
    assert related == visible, "every visible brick was related once"


def test_a_vault_that_recorded_absolute_folders_records_them_relative_to_itself_once_upgraded(tmp_path, capsys, monkeypatch):
    """Migration 21 (a self-contained vault folder): the previous release (schema 20) recorded the
    runs and topics folders as absolute paths. Opened, a folder inside the vault's folder becomes
    relative to it and one outside stays absolute; then a copy of the folder syncs its own runs."""
    monkeypatch.setenv("NEXUS_NO_RECALL", "1")
    p = Project(tmp_path / "proj")
    p.write_topic("vault-notes", keywords=["vault"])
    p.write_run("a.json", nexus_run("run-a", [("user", "The vault is one DuckDB file.")]))
    shared_topics = tmp_path / "shared-topics"
    shutil.copytree(p.topics, shared_topics)
    run_json(capsys, *p.sync_args())
    with duckdb.connect(str(p.db)) as con:
        con.execute("UPDATE vault_sources SET path = ? WHERE kind = 'runs_dir'", [str(p.runs.resolve())])
        con.execute("UPDATE vault_sources SET path = ? WHERE kind = 'topics_dir'", [str(shared_topics.resolve())])
        con.execute("DELETE FROM schema_version WHERE version >= 21")
        assert schema_version(con) == 20
    before = snapshot(p.db)

    with Vault.open(p.db) as v:
        assert schema_version(v.conn) == LATEST
        assert dict(v.conn.execute("SELECT kind, path FROM vault_sources").fetchall()) == {
            "runs_dir": "runs",
            "topics_dir": str(shared_topics.resolve()),
        }
        assert v.recorded_sources() == {"runs_dir": str(p.runs.resolve()), "topics_dir": str(shared_topics.resolve())}
    assert snapshot(p.db) == before, "no brick, source, manifest or run changed"

    copy = Project(tmp_path / "copy")
    shutil.copytree(p.root, copy.root)
    copy.write_run("b.json", nexus_run("run-b", [("user", "The vault keeps every version.")]))
    monkeypatch.chdir(tmp_path)
    run_json(capsys, *copy.cli_args(), "sync")
    listed = run_json(capsys, *copy.cli_args(), "bricks", "vault-notes")
    assert {b["content"] for b in listed} == {"The vault is one DuckDB file.", "The vault keeps every version."}
    assert len(run_json(capsys, *p.cli_args(), "bricks", "vault-notes")) == 1, "the original is untouched"


def test_a_vault_of_the_previous_release_gets_the_marks_table_and_keeps_everything(tmp_path, capsys, monkeypatch):
    """Migration 22 (vault_marks, for `nexus vault copy`): a schema-21 vault opens, keeps every brick,
    source and manifest hash, and a sync of the same inputs afterwards changes nothing."""
    monkeypatch.setenv("NEXUS_NO_RECALL", "1")
    p = Project(tmp_path / "proj")
    p.write_topic("vault-notes", keywords=["vault"])
    p.write_run("a.json", nexus_run("run-a", [("user", "The vault is one DuckDB file.")]))
    run_json(capsys, *p.sync_args())
    with duckdb.connect(str(p.db)) as con:
        con.execute("DROP TABLE vault_marks")
        con.execute("DELETE FROM schema_version WHERE version >= 22")
        assert schema_version(con) == 21
    before = snapshot(p.db)
    with Vault.open(p.db) as v:
        assert schema_version(v.conn) == LATEST
        assert v.unfinished_copy() is None
    assert snapshot(p.db) == before
    again = run_json(capsys, *p.sync_args())
    assert all(r.get("unchanged") for r in again), again


def test_a_release_vault_keeps_exact_keywords_until_reselect_moves_a_topic(old_vault, capsys):
    """Keywords match their plurals from this release on (core/keywords.py), but a topic the vault
    compiled before keeps exact words on a plain sync: its bricks and manifests stay as they were, its
    definition is stored without the rule, and the sync says what `--reselect` would do. `--reselect --topic` moves that
    topic alone: the release's runs say "parallel syncs" and "failed syncs", which it now reads."""
    from nexus_assets_tests.cli_helpers import run_cli

    before = snapshot(old_vault)
    base = ["--db", str(old_vault), "sync", "--runs-dir", "runs", "--topics-dir", "topics", "--no-recall"]
    topics = sum((["--topic", t] for t in SAMPLE_TOPICS), [])
    code, _, err = run_cli(capsys, *base, *topics)
    assert code == 0, err
    after = snapshot(old_vault)
    assert after["bricks"] == before["bricks"] and after["manifests"] == before["manifests"]
    with duckdb.connect(str(old_vault), read_only=True) as con:
        # Stored as a release before the rule stored it (topics/records.py), so it reads back as exact.
        stored = dict(con.execute("SELECT topic_id, definition_json FROM topics").fetchall())
    assert all("keyword_forms" not in stored[t] for t in (*SAMPLE_TOPICS, LLM_TOPIC))
    assert '"keyword_forms":"inflected"' in stored["team-rituals"]  # a DRAFT was never compiled: nothing to keep
    notes = [line for line in err.splitlines() if "matches its keywords as exact words" in line]
    assert [n.split(": ")[1] for n in notes] == SAMPLE_TOPICS
    assert "nexus sync --reselect --topic nexus-server-sync" in notes[0]

    code, _, err = run_cli(capsys, *base, "--reselect", "--topic", "nexus-server-sync")
    assert code == 0, err
    with Vault.open(old_vault, read_only=True) as v:
        assert v.topics.topic("nexus-server-sync").keyword_forms == "inflected"
        assert v.topics.topic("storage-decisions").keyword_forms == "exact"
        quotes = {q for (q,) in v.conn.execute("SELECT content FROM occurrences WHERE topic_id = 'nexus-server-sync'").fetchall()}
    assert {q for q in quotes if "syncs" in q}, "a sentence that says only 'syncs' is read now"
    code, _, err = run_cli(capsys, *base, *topics)
    assert [line.split(": ")[1] for line in err.splitlines() if "as exact words" in line] == ["storage-decisions"]
