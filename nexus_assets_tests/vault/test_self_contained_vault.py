"""A vault folder is self-contained (invariant 13, issue 40): the vault records its runs and topics
folders relative to itself, so a copied or moved folder syncs its own `data/runs` and
`data/topics`, and a sync says which folders it reads whenever they are not the defaults.
Real `nexus` commands in a child process, run from the folder as a user would."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import yaml

from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.project import nexus_run

TOPIC = "marathon"
NO_RECALL = {"NEXUS_NO_RECALL": "1"}


def vault_folder(root: Path) -> Path:
    """A folder as the README lays it out: data/runs, data/topics, the vault at data/nexus.duckdb."""
    (root / "data" / "runs").mkdir(parents=True)
    (root / "data" / "topics").mkdir(parents=True)
    topic = {
        "topic_id": TOPIC,
        "display_name": "Marathon training",
        "extraction_policy": {"scope_description": "How the marathon training goes.", "required_keywords": ["marathon"]},
        "state": "ACTIVE",
    }
    (root / "data" / "topics" / f"{TOPIC}.yaml").write_text(yaml.safe_dump(topic), encoding="utf-8")
    write_run(root, "week-1", "The marathon plan starts with three easy runs a week.")
    return root


def write_run(root: Path, name: str, sentence: str) -> None:
    (root / "data" / "runs" / f"{name}.json").write_text(json.dumps(nexus_run(f"run-{name}", [("user", sentence)])), encoding="utf-8")


def sync(cwd: Path, *argv: str, expect: int = 0):
    done = run_nexus(*argv, "sync", env=NO_RECALL, cwd=cwd)
    assert done.returncode == expect, done.stderr[-3000:]
    return done


def contents(cwd: Path) -> set[str]:
    done = run_nexus("bricks", TOPIC, "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return {b["content"] for b in json.loads(done.stdout)}


def source_files(root: Path) -> set[str]:
    with duckdb.connect(str(root / "data" / "nexus.duckdb"), read_only=True) as conn:
        return {r[0] for r in conn.execute("SELECT source_file FROM runs WHERE is_latest").fetchall()}


def test_a_copied_folder_syncs_its_own_runs_and_topics(tmp_path: Path):
    original = vault_folder(tmp_path / "notes")
    first = sync(original)
    assert "reading" not in first.stderr, "the defaults are not announced"

    copy = tmp_path / "notes-copy"
    shutil.copytree(original, copy)
    write_run(copy, "week-2", "The marathon plan adds a long run on Sundays.")
    (copy / "data" / "topics" / "broken.yaml").write_text("topic_id: broken\nrequried_keywords: [x]\n", encoding="utf-8")

    done = sync(copy, expect=1)  # the copy's broken topic file is seen, not hidden
    assert "reading" not in done.stderr, "the copy's own folders are its defaults"
    assert str(copy / "data" / "topics" / "broken.yaml") in done.stderr.splitlines()[-1]
    assert contents(copy) == {"The marathon plan starts with three easy runs a week.", "The marathon plan adds a long run on Sundays."}
    assert all(f.startswith(str(copy.resolve())) for f in source_files(copy)), "its runs are read from the copy now"

    # The original saw none of it.
    assert contents(original) == {"The marathon plan starts with three easy runs a week."}
    assert sync(original).returncode == 0
    assert all(f.startswith(str(original.resolve())) for f in source_files(original))


def test_a_moved_folder_syncs_where_it_is_now(tmp_path: Path):
    original = vault_folder(tmp_path / "notes")
    sync(original)
    moved = tmp_path / "archive" / "notes"
    moved.parent.mkdir()
    shutil.move(original, moved)
    write_run(moved, "week-2", "The marathon plan adds a long run on Sundays.")
    sync(moved)
    assert len(contents(moved)) == 2
    verified = run_nexus("verify", cwd=moved)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_sync_names_the_folders_it_reads_when_they_are_not_the_defaults(tmp_path: Path):
    root = vault_folder(tmp_path / "notes")
    sync(root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    db = root / "data" / "nexus.duckdb"
    done = sync(elsewhere, "--db", str(db))
    assert done.stderr.splitlines()[0] == (
        f"reading runs from {(root / 'data' / 'runs').resolve()} (recorded in the vault {db}) "
        f"and topics from {(root / 'data' / 'topics').resolve()} (recorded in the vault {db})"
    )
    assert not (elsewhere / "data").exists()

    other_runs = tmp_path / "more-runs"
    shutil.copytree(root / "data" / "runs", other_runs)
    done = run_nexus("sync", "--runs-dir", str(other_runs), env=NO_RECALL, cwd=root)
    assert done.returncode == 0, done.stderr
    assert "reading" not in done.stderr, "a folder the user named needs no note"
    done = run_nexus("sync", env={**NO_RECALL, "NEXUS_TOPICS_DIR": str(root / "data" / "topics")}, cwd=root)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == f"reading runs from {other_runs.resolve()} (recorded in the vault data/nexus.duckdb)"
