"""The vault on PostgreSQL (docs/deployment.md): the same inputs give byte-identical results on DuckDB and
on a real PostgreSQL whose default collation is ICU en-US, not bytewise; `verify` is clean on both.

The server is Debian's, started by the `postgres_server` fixture as a non-root user on 127.0.0.1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.project import Project, nexus_run, sample_project

SAMPLE_TOPICS = ("nexus-server-sync", "storage-decisions")


def outcome(capsys, project: Project, topics=SAMPLE_TOPICS) -> dict:
    """Everything a person or a tool reads of a vault, as JSON: bricks (superseded too), manifests,
    rejections, and each brick's lineage-free trace."""
    seen: dict = {"topics": run_json(capsys, *project.cli_args(), "topics")}
    for t in topics:
        seen[t] = {
            "bricks": run_json(capsys, *project.cli_args(), "bricks", t, "--all"),
            "manifest": run_json(capsys, *project.cli_args(), "manifest", t),
            "rejections": run_json(capsys, *project.cli_args(), "rejections", t),
        }
    return seen


def synced(capsys, project: Project, *topics: str, partial: bool = False) -> None:
    """A sync that succeeds; `partial`: only some runs are there, so the gold check may fail (exit 1)."""
    code, _, err = run_cli(capsys, *project.sync_args(*topics))
    assert code in ((0, 1) if partial else (0,)), err


def test_server_collation_is_not_bytewise(postgres_url):
    """The server these tests use sorts as a typical one does, so a lucky order cannot pass."""
    with psycopg.connect(postgres_url) as conn:
        order = conn.execute("SELECT x FROM (VALUES ('a'), ('B'), ('_'), ('b')) v(x) ORDER BY x").fetchall()
    assert [r[0] for r in order] != sorted(["a", "B", "_", "b"])


def test_sample_corpus_is_byte_identical_on_both_backends(tmp_path, capsys, postgres_url):
    embedded = sample_project(tmp_path / "duck")
    served = sample_project(tmp_path / "pg", vault_url=postgres_url)
    for p in (embedded, served):
        synced(capsys, p)
    a, b = outcome(capsys, embedded), outcome(capsys, served)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    for p in (embedded, served):
        code, out, err = run_cli(capsys, *p.cli_args(), "verify")
        assert code == 0, out + err


def test_mixed_case_and_unicode_order_identically(tmp_path, capsys, postgres_url):
    """Texts, run ids and paths whose ICU order differs from their bytewise one."""
    projects = [Project(tmp_path / "duck"), Project(tmp_path / "pg", postgres_url)]
    words = ["Zebra", "apple", "_under", "Éclair", "éclair", "b-side", "B side", "a.b", "A_b", "ß", "ss", "Ω", "z9", "Z10"]
    for p in projects:
        for i, w in enumerate(words):
            run_id = f"{w.replace(' ', '-').replace('.', '-')}-{i:02d}"
            p.write_run(
                f"{run_id}.json",
                nexus_run(run_id, [("user", f"The widget {w} setting is {i} units."), ("assistant", f"Noted: widget {w} keeps {i} units.")],
                          start=f"2026-01-{1 + i % 3:02d}T00:00:00Z"),
            )
        p.write_topic("widgets-a", keywords=["widget"], ordering_rule="source-run-order")
        p.write_topic("widgets-b", keywords=["widget"], ordering_rule="chronological")
        synced(capsys, p)
    a, b = (outcome(capsys, p, ("widgets-a", "widgets-b")) for p in projects)
    assert a["widgets-a"]["bricks"], "the corpus made no bricks"
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("backend", ["duckdb", "postgresql"])
def test_incremental_equals_full(tmp_path, capsys, postgres_server, backend):
    """Runs arriving one sync at a time give the vault one sync of them all gives, on each backend."""
    url = postgres_server.database if backend == "postgresql" else (lambda: None)
    full = sample_project(tmp_path / "full", vault_url=url())
    step = sample_project(tmp_path / "step", vault_url=url())
    files = sorted(p for p in step.runs.rglob("*.json"))
    hold = tmp_path / "held"
    hold.mkdir()
    for f in files[1:]:
        f.rename(hold / f.name)
    synced(capsys, step, partial=True)
    for f in files[1:]:
        (hold / f.name).rename(f)
        synced(capsys, step, partial=True)
    synced(capsys, full)
    a, b = outcome(capsys, full), outcome(capsys, step)
    for t in SAMPLE_TOPICS:
        assert a[t]["manifest"]["bricks"] == b[t]["manifest"]["bricks"]


def test_a_new_database_gets_its_schema_once(postgres_url):
    """Two opens of an empty database: the schema is made once, and reads find it."""
    from nexus_assets.vault.postgres.migrations import LATEST, MIGRATIONS, schema_version

    with Vault.open(postgres_url, read_only=True) as v:
        assert schema_version(v.conn) == LATEST
        assert v.topic_summaries() == []
    with Vault.open(postgres_url) as v:
        # One row per migration, each once (the numbers follow DuckDB's and may have gaps).
        assert v.conn.execute("SELECT count(*) FROM schema_version").fetchone()[0] == len(MIGRATIONS)


def test_an_unreachable_server_is_one_clear_line(capsys, tmp_path):
    code, out, err = run_cli(capsys, "--db", "postgresql://nexus@127.0.0.1:1/none", "topics")
    assert code == 2
    assert "cannot reach the vault postgresql://nexus@127.0.0.1:1/none" in err
    assert "Traceback" not in err


# ---- nexus vault copy ------------------------------------------------------------------------


def test_a_vault_copied_to_postgres_and_back_is_the_same_vault(tmp_path, capsys, postgres_url, monkeypatch):
    """DuckDB → PostgreSQL → DuckDB: every manifest re-hashed on arrival, the same bricks and
    manifests read from all three, `verify` clean on each, and each copy syncs the same inputs
    as a no-op (nothing is extracted again)."""
    original = sample_project(tmp_path / "duck")
    synced(capsys, original)
    back = Project(original.root, None)
    back_db = tmp_path / "back" / "vault.duckdb"
    first = run_json(capsys, "vault", "copy", str(original.db), postgres_url)
    assert first["verified"] and first["manifests_checked"] >= 2 and first["rows"]["bricks"] > 0
    second = run_json(capsys, "vault", "copy", postgres_url, f"duckdb://{back_db}")
    assert second["verified"] and second["rows"] == first["rows"]
    served = Project(original.root, postgres_url)
    back = Project(original.root, str(back_db))
    a, b, c = (outcome(capsys, p) for p in (original, served, back))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) == json.dumps(c, sort_keys=True)
    for p in (served, back):
        code, out, err = run_cli(capsys, *p.cli_args(), "verify")
        assert code == 0, out + err
        # The copy recorded the folders it was synced from: a bare sync reads them, and finds nothing new.
        again = run_json(capsys, *p.cli_args(), "sync")
        assert all(r.get("unchanged") for r in again), again


def test_a_copy_into_a_vault_that_holds_one_is_refused(tmp_path, capsys, postgres_url):
    p = sample_project(tmp_path / "pg", vault_url=postgres_url)
    synced(capsys, p)
    before = outcome(capsys, p)
    other = sample_project(tmp_path / "duck")
    synced(capsys, other)
    code, _, err = run_cli(capsys, "vault", "copy", str(other.db), postgres_url)
    assert code == 2 and "already holds a vault" in err
    code, _, err = run_cli(capsys, "vault", "copy", str(other.db), str(other.db))
    assert code == 2 and "same vault" in err
    assert outcome(capsys, p) == before


@pytest.mark.parametrize("point", ["marked", "copied", "arrived"])
def test_a_copy_killed_midway_leaves_the_destination_marked_unusable(tmp_path, capsys, postgres_url, point):
    """A real SIGKILL at each point: the destination is refused by every command (exit 2, one
    line) until a copy completes; the source is untouched."""
    from nexus_assets_tests.cli_helpers import run_nexus

    source = sample_project(tmp_path / "duck")
    synced(capsys, source)
    before = outcome(capsys, source)
    killed = run_nexus("vault", "copy", str(source.db), postgres_url, env={"NEXUS_TEST_KILL_COPY_AT": point})
    assert killed.returncode == -9
    for command in (["topics"], ["bricks", "storage-decisions"], ["sync"]):
        code, _, err = run_cli(capsys, "--db", postgres_url, *command)
        assert code == 2 and "not usable: a copy from" in err, (command, err)
    again = run_json(capsys, "vault", "copy", str(source.db), postgres_url)
    assert again["verified"]
    assert outcome(capsys, Project(source.root, postgres_url)) == before == outcome(capsys, source)


# ---- topics in parallel ----------------------------------------------------------------------


def test_parallel_topics_equal_sequential(tmp_path, capsys, postgres_server):
    """`nexus sync --parallel 2` on PostgreSQL (each topic in a process of its own) gives the vault
    a sequential sync gives: concurrent equals sequential."""
    at_once = sample_project(tmp_path / "at-once", vault_url=postgres_server.database())
    in_turn = sample_project(tmp_path / "in-turn", vault_url=postgres_server.database())
    code, _, err = run_cli(capsys, *at_once.sync_args(), "--parallel", "2")
    assert code == 0, err
    synced(capsys, in_turn)
    assert json.dumps(outcome(capsys, at_once), sort_keys=True) == json.dumps(outcome(capsys, in_turn), sort_keys=True)


def test_parallel_on_duckdb_compiles_one_topic_at_a_time(tmp_path, capsys):
    p = sample_project(tmp_path / "duck")
    code, _, err = run_cli(capsys, *p.sync_args(), "--parallel", "4")
    assert code == 0, err
    assert "topics compile one at a time" in err


def test_killing_one_of_two_parallel_topic_syncs_leaves_the_other_and_the_vault_whole(tmp_path, capsys, postgres_server):
    """Two `nexus sync --topic` processes on one PostgreSQL vault; one gets SIGKILL midway. The other
    finishes with its result, `verify` is clean, and a re-run of the killed topic completes with the
    bricks and manifest a clean sync gives."""
    import signal
    import subprocess
    import sys
    import time

    from nexus_assets_tests.cli_helpers import REPO

    url = postgres_server.database()
    p = sample_project(tmp_path / "pg", vault_url=url)
    synced(capsys, p, "storage-decisions")  # the runs are ingested; both syncs below compile
    (p.runs / "nexus" / "extra.json").write_text(
        json.dumps(nexus_run("run-extra", [("user", "The vault is PostgreSQL now; the sync takes a topic lock.")] * 3))
    )

    def start(topic: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "nexus_assets.cli", *p.sync_args(topic)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        )

    survivor, victim = start("storage-decisions"), start("nexus-server-sync")
    try:
        # Killed once it is compiling its topic (past ingestion), while the other one works too.
        deadline = time.monotonic() + 120
        seen = ""
        while "syncing nexus-server-sync" not in seen and time.monotonic() < deadline and victim.poll() is None:
            seen += victim.stderr.readline()
        time.sleep(1.0)
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        out, err = survivor.communicate(timeout=300)
        assert survivor.returncode == 0, err
    finally:
        for proc in (survivor, victim):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for stream in (proc.stdout, proc.stderr):
                stream.close()
    assert victim.returncode == -9
    code, out, err = run_cli(capsys, *p.cli_args(), "verify")
    assert code == 0, out + err
    synced(capsys, p, "nexus-server-sync")
    clean = sample_project(tmp_path / "clean", vault_url=postgres_server.database())
    shutil.copy(p.runs / "nexus" / "extra.json", clean.runs / "nexus" / "extra.json")
    synced(capsys, clean)
    a, b = outcome(capsys, p), outcome(capsys, clean)
    for t in SAMPLE_TOPICS:
        assert a[t]["manifest"]["bricks"] == b[t]["manifest"]["bricks"]
        assert a[t]["bricks"] == b[t]["bricks"]


# ---- property: any corpus, both backends -------------------------------------------------------

_WORDS = st.sampled_from(["Widget", "widget", "WIDGET", "Zeta", "alpha", "_x", "Ärger", "ärger", "ß", "Ω", "z9", "Z10", "a-b", "A b"])


@st.composite
def _corpus(draw):
    runs = []
    for i in range(draw(st.integers(1, 4))):
        messages = []
        for j in range(draw(st.integers(1, 3))):
            words = draw(st.lists(_WORDS, min_size=2, max_size=6))
            n = draw(st.integers(0, 9))
            messages.append(("user" if j % 2 == 0 else "assistant", f"The widget {' '.join(words)} setting is {n} units."))
        day = draw(st.integers(1, 3))
        runs.append((draw(st.sampled_from(["Run", "run", "_run", "Éa"])) + f"-{i}", messages, f"2026-01-0{day}T00:00:00Z"))
    return runs


@settings(max_examples=4, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
@given(corpus=_corpus(), rule=st.sampled_from(["chronological", "source-run-order", "ingestion-order"]))
def test_any_corpus_is_byte_identical_on_both_backends(tmp_path_factory, capsys, postgres_server, corpus, rule):
    """Invariant 3 across backends: whatever the texts, ids and order, DuckDB and PostgreSQL (ICU
    collation) give the same bricks, ids, states, order and manifest hashes."""
    root = tmp_path_factory.mktemp("corpus")
    projects = [Project(root / "duck"), Project(root / "pg", postgres_server.database())]
    for p in projects:
        for run_id, messages, start in corpus:
            p.write_run(f"{run_id}.json", nexus_run(run_id, messages, start=start))
        p.write_topic("widgets", keywords=["widget"], ordering_rule=rule)
        synced(capsys, p)
    a, b = (outcome(capsys, p, ("widgets",)) for p in projects)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_a_nul_in_a_message_is_kept_on_postgres_too(tmp_path, capsys, postgres_url):
    """PostgreSQL's text cannot hold NUL; the vault keeps it anyway (as a stand-in, read back as NUL),
    so the bricks, offsets and hashes are DuckDB's."""
    projects = [Project(tmp_path / "duck"), Project(tmp_path / "pg", postgres_url)]
    for p in projects:
        p.write_run("nul.json", nexus_run("run-nul", [("user", "The widget has a NUL \x00 inside and is 5 units.")]))
        p.write_topic("widgets", keywords=["widget"])
        synced(capsys, p)
    a, b = (outcome(capsys, p, ("widgets",)) for p in projects)
    assert "\x00" in a["widgets"]["bricks"][0]["content"]
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_two_syncs_of_one_topic_take_turns(tmp_path, capsys, postgres_server):
    """Two processes syncing the same topic of one PostgreSQL vault at once: both finish, and the
    vault is the one a single sync makes (they took turns on the topic's advisory lock)."""
    import subprocess
    import sys

    from nexus_assets_tests.cli_helpers import REPO

    p = sample_project(tmp_path / "pg", vault_url=postgres_server.database())
    procs = [
        subprocess.Popen([sys.executable, "-m", "nexus_assets.cli", *p.sync_args("storage-decisions")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
        for _ in range(2)
    ]
    try:
        errors = [proc.communicate(timeout=300)[1] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0, 0], errors
    once = sample_project(tmp_path / "once", vault_url=postgres_server.database())
    synced(capsys, once, "storage-decisions")
    a, b = outcome(capsys, p, ("storage-decisions",)), outcome(capsys, once, ("storage-decisions",))
    assert a["storage-decisions"] == b["storage-decisions"]
