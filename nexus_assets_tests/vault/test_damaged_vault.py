"""A damaged vault (truncated file, read-only file or folder, full disk) is one clear line and exit 2
(docs/cli.md), never a traceback; commands that only read work on a read-only vault; nothing is lost.

Each case runs the real `nexus` in a fresh process. As root, file permissions bind only a process
without CAP_DAC_OVERRIDE, so the read-only cases drop it (setpriv); a full disk is RLIMIT_FSIZE with
SIGXFSZ ignored, so every write past the limit fails with EFBIG, as it does with ENOSPC on a full disk.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.project import REPO, Project, nexus_run

TOPIC = "vault-notes"
READ_COMMANDS = {
    "topics": ["topics"],
    "bricks": ["bricks", TOPIC],
    "manifest": ["manifest", TOPIC],
    "rejections": ["rejections", TOPIC],
    "trace": ["trace", "{brick}"],
    "explain": ["explain", "{brick}"],
    "explain-run": ["explain", "--run", "run-a"],
    "errors": ["errors"],
    "calls": ["calls"],
    "search": ["search", "vault"],
    "recall": ["recall", "vault"],
    "lineage": ["lineage", "{brick}"],
    "audit": ["audit"],
    "export": ["export", TOPIC, "--format", "jsonl"],
}
WRITE_COMMANDS = {
    "sync": ["sync"],
    "verify": ["verify"],
    "close": ["close", "run-b"],
    "forget": ["forget", "--run", "run-a", "--reason", "test", "--yes"],
}
# Without the capabilities that let root ignore file permissions.
NO_OVERRIDE = ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Project:
    p = Project(tmp_path_factory.mktemp("damaged") / "proj")
    p.write_topic(TOPIC, keywords=["vault"])
    p.write_run("a.json", nexus_run("run-a", [("user", "Keep the vault append-only. The vault is DuckDB.")]))
    p.write_run("b.json", nexus_run("run-b", [("user", "The vault is never edited by hand.")], status="OPEN"))
    code = nexus(p.db, "sync", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics)).returncode
    assert code == 0
    return p


def copy_of(p: Project, root: Path) -> Project:
    """The synced project under `root`: a vault to damage, leaving the module's one intact."""
    shutil.copytree(p.root, root / "proj")
    return Project(root / "proj")


def nexus(db: Path, *argv: str, prefix: list[str] = (), preexec=None) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [*prefix, sys.executable, "-m", "nexus_assets.cli", "--db", str(db), *argv],
        capture_output=True, text=True, check=False, timeout=180, preexec_fn=preexec,
        env={**os.environ, "PYTHONPATH": path},
    )


def argv_for(command: list[str], brick: str, *, as_json: bool = False) -> list[str]:
    json_flag = ["--json"] if as_json and command[0] != "export" else []  # export writes its format
    return [a.format(brick=brick) for a in command] + json_flag


def one_brick(p: Project) -> str:
    with duckdb.connect(str(p.db), read_only=True) as conn:
        return conn.execute("SELECT min(brick_id) FROM bricks").fetchone()[0]


def test_a_truncated_vault_is_one_line_and_exit_2_for_every_command(synced: Project, tmp_path: Path):
    p = copy_of(synced, tmp_path)
    brick = one_brick(p)
    with duckdb.connect(str(p.db), read_only=True) as conn:
        block, used = conn.execute("SELECT block_size, used_blocks FROM pragma_database_size()").fetchone()
    with open(p.db, "r+b") as f:
        f.truncate(block * used // 2)
    expected = (
        f"nexus: vault {p.db} is damaged (the file is shorter than the data it holds: it was truncated); "
        "restore it from a backup copy, or sync into a new vault with --db NEW_PATH\n"
    )
    for name, command in {**READ_COMMANDS, **WRITE_COMMANDS}.items():
        done = nexus(p.db, *argv_for(command, brick))
        assert (name, done.returncode, done.stderr, done.stdout) == (name, 2, expected, "")


def read_only(p: Project, what: str) -> list[str]:
    """Make the vault file or its folder read-only; the prefix that makes that bind this process."""
    if what == "file":
        p.db.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    else:
        # A read-only copy of a vault folder may lack the search and vector indexes: they are
        # rebuilt in memory then.
        for cache in (p.root / "vault.search", p.root / "vault.vectors"):
            shutil.rmtree(cache, ignore_errors=True)
        p.root.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return NO_OVERRIDE if os.geteuid() == 0 else []


@pytest.mark.parametrize("what", ["file", "folder"])
def test_commands_that_only_read_work_on_a_read_only_vault_and_writes_say_why_not(synced: Project, tmp_path: Path, what: str):
    p = copy_of(synced, tmp_path)
    brick = one_brick(p)
    before = {name: nexus(p.db, *argv_for(c, brick, as_json=True)) for name, c in READ_COMMANDS.items() if name != "recall"}
    prefix = read_only(p, what)
    try:
        for name, command in READ_COMMANDS.items():
            done = nexus(p.db, *argv_for(command, brick, as_json=True), prefix=prefix)
            assert (name, done.returncode, done.stderr) == (name, 0, ""), done.stderr
            if name in before:
                assert done.stdout == before[name].stdout, name
        if what == "file":
            expected = (
                f"nexus: vault {p.db} is read-only: this command writes to it; make the file writable "
                f"(chmod u+w {p.db}), or use a command that only reads (topics, bricks, manifest, trace, search, export)\n"
            )
        else:
            expected = (
                f"nexus: vault folder {p.root} is read-only: this command writes beside the vault file {p.db.name}; "
                "make the folder writable, or use a command that only reads (topics, bricks, manifest, trace, search, export)\n"
            )
        for name, command in WRITE_COMMANDS.items():
            done = nexus(p.db, *argv_for(command, brick), prefix=prefix)
            if (what, name) == ("folder", "verify"):
                # The file itself is writable and verify found nothing to record: it needed no write.
                assert (done.returncode, done.stderr) == (0, "")
                continue
            assert (name, done.returncode, done.stderr) == (name, 2, expected)
    finally:
        p.root.chmod(0o755)
        p.db.chmod(0o644)
    assert nexus(p.db, "verify").returncode == 0, "nothing was lost"


def file_size_limit(limit: int):
    def apply() -> None:
        # Ignored, SIGXFSZ no longer kills the writer: the write fails with EFBIG, as on a full disk.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize("limit", [0, 24_000], ids=["full-at-once", "full-midway"])
def test_a_full_disk_is_one_line_and_the_next_sync_finishes(synced: Project, tmp_path: Path, limit: int):
    p = copy_of(synced, tmp_path)
    p.write_run("c.json", nexus_run("run-c", [("user", "The vault grows. " + "A vault sentence. " * 400)]))
    sync = ["sync", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics)]
    done = nexus(p.db, *sync, "--json", preexec=file_size_limit(limit))  # --json: no progress lines
    assert (done.returncode, done.stderr, done.stdout) == (
        2,
        f"nexus: cannot write the vault {p.db}: the disk that holds it is full (File too large); free space "
        "there and run the command again (what was committed before is kept)\n",
        "",
    )
    assert nexus(p.db, *sync).returncode == 0
    report = json.loads(nexus(p.db, "verify", "--json").stdout)
    assert report["ok"]
    with duckdb.connect(str(p.db), read_only=True) as conn:
        runs = {r[0] for r in conn.execute("SELECT DISTINCT s.run_id FROM brick_sources s").fetchall()}
    assert runs == {"run-a", "run-b", "run-c"}
