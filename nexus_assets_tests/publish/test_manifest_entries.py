"""Manifests whose list is stored once per entry (issue 61, migration 27): recording a manifest
writes only the entries that changed, every recorded manifest still lists byte for byte what its
hash was taken over, an edited entry is reported by `nexus verify`, and a vault of the previous
release is converted, keeps every hash, and survives a migration killed halfway."""

import json
import os
import subprocess
import sys
import textwrap

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexus_assets.core.listing import canonical_entries
from nexus_assets.core.models import Manifest, ManifestEntry

from nexus_assets.store import Vault
from nexus_assets.vault.migrations import LATEST, schema_version
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.manifest_helpers import listed_manifests
from nexus_assets_tests.project import Project, nexus_run

TOPIC = "vault-notes"
RUNS = 4


@pytest.fixture
def grown(tmp_path, capsys, monkeypatch) -> Project:
    """A topic synced once per new run: manifests #0..#3 listing 1..4 bricks."""
    monkeypatch.setenv("NEXUS_NO_RECALL", "1")
    p = Project(tmp_path / "proj")
    p.write_topic(TOPIC, keywords=["vault"])
    for i in range(RUNS):
        p.write_run(f"r{i}.json", nexus_run(f"run-{i}", [("user", f"The vault keeps version {i} of every file.")],
                                            start=f"2026-01-0{i + 1}T00:00:00Z"))
        assert all(r["success"] for r in run_json(capsys, *p.sync_args()))
    return p


def table(p: Project, sql: str) -> list[tuple]:
    with duckdb.connect(str(p.db), read_only=True) as con:
        return con.execute(sql).fetchall()


def as_previous_release(p: Project, *, spaced_seq: int | None = None) -> None:
    """The vault as schema 26 stored it: every list whole in `bricks_json` (one written with
    spaces, as no release writes, with `spaced_seq`), no `manifest_entries`."""
    with duckdb.connect(str(p.db)) as con:
        for t, n, _, _, listed, _ in listed_manifests(con):
            if n == spaced_seq:
                listed = json.dumps(json.loads(listed))
            con.execute("UPDATE manifests SET bricks_json = ? WHERE topic_id = ? AND seq = ?", [listed, t, n])
        con.execute("DROP TABLE manifest_entries")
        con.execute("ALTER TABLE manifests ALTER COLUMN bricks_json SET NOT NULL")
        con.execute("DELETE FROM schema_version WHERE version >= 27")
        assert schema_version(con) == 26


def test_each_manifest_writes_only_what_changed_and_lists_as_its_hash_reads(grown: Project, capsys):
    listed = table(grown, "SELECT seq, bricks_json, entry_count FROM manifests ORDER BY seq")
    assert [(n, b, c) for n, b, c in listed] == [(n, None, n + 1) for n in range(RUNS)], "no list is stored whole"
    # Four bricks, each listed from the manifest that brought it and never closed: four rows for
    # the ten entries the four manifests list between them.
    assert table(grown, "SELECT count(*), count(valid_to) FROM manifest_entries") == [(RUNS, 0)]
    with Vault.open(grown.db, read_only=True) as v:
        manifests = v.bricks.manifests(TOPIC)
        oracle = listed_manifests(v.conn, TOPIC)
        assert v.bricks.latest_hash_problems(TOPIC, RUNS - 1) == []
    assert [len(m.bricks) for m in manifests] == [1, 2, 3, 4]
    assert ["[" + ",".join(json.dumps(e.model_dump(), sort_keys=True, separators=(",", ":")) for e in m.bricks) + "]" for m in manifests] == [
        row[4] for row in oracle
    ]
    assert [m.manifest_hash for m in manifests] == [row[2] for row in oracle]
    code, out, _ = run_cli(capsys, *grown.cli_args(), "verify", "--json")
    assert code == 0 and json.loads(out)["chain_problems"] == []
    shown = run_json(capsys, *grown.cli_args(), "manifest", TOPIC)
    assert shown["manifest_hash"] == manifests[-1].manifest_hash and len(shown["bricks"]) == RUNS


def test_a_forgotten_brick_closes_its_entries_and_every_manifest_still_lists_as_hashed(grown: Project, capsys):
    """Forgetting writes its tombstone manifest through the other writer (a list built in Python)."""
    run_json(capsys, *grown.cli_args(), "forget", "--run", "run-0", "--reason", "the author asked", "--yes")
    with Vault.open(grown.db, read_only=True) as v:
        manifests = v.bricks.manifests(TOPIC)
        oracle = listed_manifests(v.conn, TOPIC)
        lineage = v.forgetting.forward_lineage(["run-1"])
    assert manifests[-1].tombstone is not None and len(manifests[-1].bricks) == RUNS - 1
    assert [m.manifest_hash for m in manifests] == [row[2] for row in oracle]
    assert table(grown, "SELECT count(*) FROM manifests WHERE bricks_json IS NOT NULL") == [(0,)]
    # Every brick after the forgotten one moved up a place: those entries closed and reopened.
    assert table(grown, f"SELECT count(*) FROM manifest_entries WHERE valid_to = {RUNS}") == [(RUNS,)]
    # run-1's brick is listed from manifest #1 on, the tombstone manifest included.
    assert [m["seq"] for m in lineage["manifests"]] == list(range(1, RUNS + 1))
    code, out, _ = run_cli(capsys, *grown.cli_args(), "verify", "--json")
    assert code == 0, out


def test_an_edited_entry_is_named_by_verify_and_nothing_is_rewritten(grown: Project, capsys):
    with duckdb.connect(str(grown.db)) as con:
        con.execute("UPDATE manifest_entries SET fingerprint = ? WHERE valid_from = 2", ["0" * 64])
    before = (table(grown, "SELECT * FROM manifests ORDER BY seq"), table(grown, "SELECT * FROM manifest_entries ORDER BY ALL"))
    code, out, _ = run_cli(capsys, *grown.cli_args(), "verify", "--json")
    problems = json.loads(out)["chain_problems"]
    assert code == 1
    assert any(f"manifest #2 of {TOPIC} was altered" in p for p in problems), problems
    assert any(f"manifest #3 of {TOPIC} was altered" in p for p in problems), "the entry is listed by #3 too"
    assert not any("#0 " in p or "#1 " in p for p in problems), problems
    code, out, _ = run_cli(capsys, *grown.cli_args(), "verify")
    assert code == 1 and "CHAIN manifest #2" in out
    assert (table(grown, "SELECT * FROM manifests ORDER BY seq"), table(grown, "SELECT * FROM manifest_entries ORDER BY ALL")) == before


def test_a_vault_of_the_previous_release_moves_its_lists_and_keeps_every_hash(grown: Project, capsys):
    as_previous_release(grown, spaced_seq=1)
    with duckdb.connect(str(grown.db), read_only=True) as con:
        before = listed_manifests(con)
        bricks = con.execute("SELECT brick_id, fingerprint, state, order_index FROM bricks ORDER BY ALL").fetchall()
    with Vault.open(grown.db) as v:
        assert schema_version(v.conn) == LATEST
        assert [m.manifest_hash for m in v.bricks.manifests(TOPIC)] == [row[2] for row in before]
    with duckdb.connect(str(grown.db), read_only=True) as con:
        assert listed_manifests(con) == before, "every manifest lists byte for byte as before"
        stored_whole = con.execute("SELECT seq FROM manifests WHERE bricks_json IS NOT NULL").fetchall()
        assert con.execute("SELECT brick_id, fingerprint, state, order_index FROM bricks ORDER BY ALL").fetchall() == bricks
    assert stored_whole == [(1,)], "a list the entries cannot give back byte for byte stays whole"
    code, out, _ = run_cli(capsys, *grown.cli_args(), "verify", "--json")
    assert code == 0, out
    again = run_json(capsys, *grown.sync_args())
    assert all(r.get("unchanged") for r in again), again
    # The entries went on from the converted ones: a new run writes its one entry.
    grown.write_run("r9.json", nexus_run("run-9", [("user", "The vault keeps the newest version too.")], start="2026-01-09T00:00:00Z"))
    run_json(capsys, *grown.sync_args())
    assert table(grown, "SELECT count(*) FROM manifest_entries WHERE valid_from = 4") == [(1,)]
    with duckdb.connect(str(grown.db), read_only=True) as con:
        assert listed_manifests(con)[:RUNS] == before


def test_a_migration_killed_halfway_leaves_the_old_vault_and_resumes(grown: Project):
    as_previous_release(grown)
    with duckdb.connect(str(grown.db), read_only=True) as con:
        before = listed_manifests(con)
    # The conversion dies (SIGKILL) after writing its entries and emptying the lists, before its commit.
    script = textwrap.dedent(f"""
        import os, signal
        import nexus_assets.vault.migrations as migrations
        real = migrations.store_manifest_entries
        def dying(conn, insert):
            def insert_then_die(rows):
                insert(rows)
                os.kill(os.getpid(), signal.SIGKILL)
            real(conn, insert_then_die)
        migrations.store_manifest_entries = dying
        from nexus_assets.store import Vault
        with Vault.open({str(grown.db)!r}):
            pass
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert proc.returncode == -9, proc.stderr
    with duckdb.connect(str(grown.db), read_only=True) as con:
        assert schema_version(con) == 26
        assert listed_manifests(con) == before
        assert con.execute("SELECT count(*) FROM manifests WHERE bricks_json IS NULL").fetchone()[0] == 0
    with Vault.open(grown.db) as v:
        assert schema_version(v.conn) == LATEST
    with duckdb.connect(str(grown.db), read_only=True) as con:
        assert listed_manifests(con) == before
        assert con.execute("SELECT count(*) FROM manifests WHERE bricks_json IS NOT NULL").fetchone()[0] == 0


def test_a_postgresql_vault_of_the_previous_release_moves_its_lists_too(tmp_path, capsys, postgres_url, monkeypatch):
    """PostgreSQL's migration 6 runs the same conversion in its upgrade's transaction."""
    import psycopg

    from nexus_assets.vault.postgres.migrations import LATEST as PG_LATEST

    monkeypatch.setenv("NEXUS_NO_RECALL", "1")
    p = Project(tmp_path / "proj", postgres_url)
    p.write_topic(TOPIC, keywords=["vault"])
    for i in range(3):
        p.write_run(f"r{i}.json", nexus_run(f"run-{i}", [("user", f"The vault keeps version {i}.")], start=f"2026-01-0{i + 1}T00:00:00Z"))
        run_json(capsys, *p.sync_args())
    with Vault.open(postgres_url, read_only=True) as v:
        before = listed_manifests(v.conn)
    assert [row[1] for row in before] == [0, 1, 2]
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # as PostgreSQL schema 5 stored it
        for t, n, _, _, listed, _ in before:
            conn.execute("UPDATE manifests SET bricks_json = %s WHERE topic_id = %s AND seq = %s", [listed, t, n])
        conn.execute("DROP TABLE manifest_entries")
        conn.execute("ALTER TABLE manifests ALTER COLUMN bricks_json SET NOT NULL")
        conn.execute("DELETE FROM schema_version WHERE version >= 6")
    with Vault.open(postgres_url) as v:
        assert v.conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] == PG_LATEST
        assert listed_manifests(v.conn) == before
        assert v.conn.execute("SELECT count(*) FROM manifests WHERE bricks_json IS NOT NULL").fetchone()[0] == 0
        assert v.conn.execute("SELECT count(*) FROM manifest_entries").fetchone()[0] == 3
    code, out, _ = run_cli(capsys, *p.cli_args(), "verify")
    assert code == 0, out


_IDS = [f"{i:02x}" * 32 for i in range(6)]
_entry = st.builds(
    lambda b, f, o, s: ManifestEntry(brick_id=b, fingerprint=f, order_index=o, state=s),
    st.sampled_from(_IDS + ["not-hex"]), st.sampled_from(_IDS[:3]), st.integers(0, 4), st.sampled_from(["IMPROVISE", "FORMING", "FINAL"]),
)
# Mostly lists as the vault writes them (manifest order, each brick once); now and then one it does
# not (unsorted, a brick twice, an id to escape), which must stay whole and still list exactly.
_listing = st.one_of(
    st.lists(_entry, max_size=6).map(lambda es: sorted({e.brick_id: e for e in es}.values(), key=lambda e: (e.order_index, e.brick_id))),
    st.lists(_entry, max_size=6),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=st.lists(_listing, min_size=1, max_size=6))
def test_any_history_of_lists_is_listed_back_exactly_and_its_hashes_reprove(tmp_path_factory, history):
    """Invariant 1 (a manifest's hash re-proves its list) over the stored form, whatever came before."""
    from datetime import datetime, timezone

    from nexus_assets.publish.manifest import hash_problems, manifest_hash

    db = tmp_path_factory.mktemp("lists") / "vault.duckdb"
    previous = None
    written = []
    with Vault.open(db) as v:
        for entries in history:
            entries = tuple(entries)
            m = Manifest(topic_id=TOPIC, manifest_hash=manifest_hash(TOPIC, previous, entries), previous_hash=previous, bricks=entries)
            with v.transaction():
                v.bricks._insert_manifest(TOPIC, m, False, None, datetime.now(timezone.utc))
            written.append(m)
            previous = m.manifest_hash
        read = v.bricks.manifests(TOPIC)
        assert read == written
        assert all(hash_problems(n, m) == [] for n, m in enumerate(read))
        assert v.bricks.latest_hash_problems(TOPIC, len(written) - 1) in ([], None)
        oracle = listed_manifests(v.conn, TOPIC)
    assert [row[4] for row in oracle] == ["[" + canonical_entries(m.bricks) + "]" for m in written]
