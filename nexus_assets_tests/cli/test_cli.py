"""The `nexus` command's surfaces (docs/cli.md): names, --json fields and exit codes."""

import hashlib
import json
import os
import re
import subprocess
import sys
import unicodedata

import pytest

from nexus_assets_tests.cli_helpers import run_cli, run_json, run_nexus
from nexus_assets_tests.project import Project

BRICK_FIELDS = {"brick_id", "topic_id", "content", "fingerprint", "state", "order_index", "superseded_by", "stale", "sources"}
SOURCE_FIELDS = {"run_id", "json_path", "start", "end", "node_checksum"}


def _fingerprint(text: str) -> str:
    """docs/invariants.md invariant 5, written out here rather than imported from the code under test."""
    normalized = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()


def _node_on_disk(project: Project, run_id: str, json_path: str) -> str:
    """The string at a normalized path (`$['messages'][3]['content']`) in the run file on disk."""
    (document,) = [d for d in (json.loads(f.read_text(encoding="utf-8")) for f in project.runs.rglob("*.json")) if isinstance(d, dict) and d.get("run_id") == run_id]
    node = document
    for name, index in re.findall(r"\['([^']*)'\]|\[(\d+)\]", json_path):
        node = node[name] if name else node[int(index)]
    assert isinstance(node, str), json_path
    return node


def test_sync_then_every_listing_speaks_the_contract(project: Project, capsys):
    results = run_json(capsys, *project.sync_args())
    assert [r["topic_id"] for r in results] == ["nexus-server-sync", "storage-decisions"]
    assert all(r["success"] and all(r["checks"].values()) for r in results)

    topics = {t["topic_id"]: t for t in run_json(capsys, *project.cli_args(), "topics")}
    assert topics["team-rituals"]["state"] == "DRAFT" and topics["team-rituals"]["visible_bricks"] == 0
    assert topics["nexus-server-sync"]["visible_bricks"] > 0

    bricks = run_json(capsys, *project.cli_args(), "bricks", "nexus-server-sync")
    assert bricks and all(set(b) >= BRICK_FIELDS for b in bricks)
    assert all(set(s) >= SOURCE_FIELDS for b in bricks for s in b["sources"])
    assert [b["order_index"] for b in bricks] == list(range(len(bricks)))
    assert all(b["state"] != "SUPERSEDED" for b in bricks)

    everything = run_json(capsys, *project.cli_args(), "bricks", "nexus-server-sync", "--all")
    superseded = [b for b in everything if b["state"] == "SUPERSEDED"]
    assert superseded and all(b["superseded_by"] in {x["brick_id"] for x in bricks} for b in superseded)
    assert all(b["order_index"] is None for b in superseded)

    linked = [b for b in bricks if len(b["sources"]) > 1]
    assert linked, "the sample data repeats a sentence across runs"

    manifest = run_json(capsys, *project.cli_args(), "manifest", "nexus-server-sync")
    assert set(manifest) >= {"topic_id", "manifest_hash", "bricks"}
    assert [e["brick_id"] for e in manifest["bricks"]] == [b["brick_id"] for b in bricks]
    assert all(set(e) == {"order_index", "brick_id", "fingerprint", "state"} for e in manifest["bricks"])

    traced = run_json(capsys, *project.cli_args(), "trace", linked[0]["brick_id"])
    assert len(traced["traces"]) == len(linked[0]["sources"])
    # Trace builds its `quote` from the very slice, so the slice is checked against what the
    # brick stores: its content at the canonical source, its fingerprint at every linked one
    # (invariant 1), and against the run file on disk, read here without the code under test.
    canonical, *others = traced["traces"]
    assert canonical["node_text"][canonical["start"] : canonical["end"]] == linked[0]["content"]
    assert others
    for t in traced["traces"]:
        piece = t["node_text"][t["start"] : t["end"]]
        assert piece == t["quote"] and _fingerprint(piece) == linked[0]["fingerprint"]
        assert _node_on_disk(project, t["run_id"], t["json_path"]) == t["node_text"]
        assert t["current"] is True

    assert run_json(capsys, *project.cli_args(), "rejections", "nexus-server-sync") == []
    assert run_json(capsys, *project.cli_args(), "errors") == []
    verify = run_json(capsys, *project.cli_args(), "verify")
    assert verify["ok"] and verify["sources_checked"] >= len(bricks)


def test_trace_marks_the_brick_text_in_plain_output(project: Project, capsys):
    run_json(capsys, *project.sync_args("storage-decisions"))
    brick = run_json(capsys, *project.cli_args(), "bricks", "storage-decisions")[0]
    code, out, _ = run_cli(capsys, *project.cli_args(), "trace", brick["brick_id"][:10])
    assert code == 0
    window = " ".join(line.strip(" │") for line in out.splitlines())  # the window is wrapped
    assert f"⟦{' '.join(brick['content'].split())}⟧" in window


def test_bad_usage_exits_2_with_a_message(project: Project, capsys):
    code, _, err = run_cli(capsys, *project.cli_args(), "bricks", "nexus-server-sync")
    assert code == 2 and "no vault" in err
    run_json(capsys, *project.sync_args("storage-decisions"))
    code, _, err = run_cli(capsys, *project.cli_args(), "bricks", "nope")
    assert code == 2 and "unknown topic 'nope'" in err
    code, _, err = run_cli(capsys, *project.sync_args("nope"))
    assert code == 2 and "unknown topic 'nope'" in err
    code, _, err = run_cli(capsys, *project.sync_args("team-rituals"))
    assert code == 2 and "DRAFT" in err
    code, _, err = run_cli(capsys, *project.cli_args(), "trace", "0000")
    assert code == 2 and "no brick" in err
    code, _, err = run_cli(capsys, *project.cli_args(), "close", "no-such-run")
    assert code == 2 and "no run 'no-such-run'" in err


def test_a_db_that_is_not_a_vault_is_refused_by_every_command_and_left_untouched(project: Project, capsys, tmp_path):
    dirs = ["--runs-dir", str(project.runs), "--topics-dir", str(project.topics)]
    garbage = tmp_path / "garbage" / "x.duckdb"
    garbage.parent.mkdir()
    garbage.write_bytes(b"garbage\n")
    for argv in (["topics"], ["sync", *dirs]):
        # As a shell sees it: exit 2 and one `nexus: …` line, no traceback.
        done = run_nexus("--db", str(garbage), *argv, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.splitlines()[-1] == f"nexus: {garbage} is not a vault: the file exists, but it is not a DuckDB database"
    for argv in (["verify"], ["bricks", "nexus-server-sync", "--json"], ["sync"], ["close", "r"]):
        code, _, err = run_cli(capsys, "--db", str(garbage), *argv)
        assert code == 2 and f"{garbage} is not a vault" in err, (argv, err)
    assert garbage.read_bytes() == b"garbage\n"
    assert [f.name for f in garbage.parent.iterdir()] == ["x.duckdb"], "nothing is created beside it"

    folder = tmp_path / "folder"
    folder.mkdir()
    for argv in (["topics"], ["sync", *dirs]):
        code, _, err = run_cli(capsys, "--db", f"{folder}/", *argv)
        assert code == 2 and f"vault path {folder} is a folder, not a vault file" in err, (argv, err)
    assert list(folder.iterdir()) == [] and not (tmp_path / "folder.writers").exists()

    under_a_file = garbage / "v.duckdb"
    code, _, err = run_cli(capsys, "--db", str(under_a_file), "sync", *dirs)
    assert code == 2 and f"cannot create the vault {under_a_file}" in err, err


def test_token_budget_takes_a_positive_number(project: Project, capsys, monkeypatch):
    monkeypatch.setenv("NEXUS_LLM_MODEL", "some-model")
    plan = [*project.cli_args(), "plan", "--runs-dir", str(project.runs), "--topics-dir", str(project.topics)]
    for bad in ("0", "-5", "lots"):
        with pytest.raises(SystemExit) as exited:
            run_cli(capsys, *plan, "--token-budget", bad)
        assert exited.value.code == 2 and "argument --token-budget" in capsys.readouterr().err
    assert run_json(capsys, *plan, "--token-budget", "7")["token_budget"] == 7
    # A sync takes its budget from NEXUS_LLM_TOKEN_BUDGET; plan estimates with the same one.
    monkeypatch.setenv("NEXUS_LLM_TOKEN_BUDGET", "50")
    assert run_json(capsys, *plan)["token_budget"] == 50
    for bad in ("0", "-5", "lots"):
        monkeypatch.setenv("NEXUS_LLM_TOKEN_BUDGET", bad)
        for argv in (plan, [*project.sync_args(), "--extractor", "openai"]):
            code, _, err = run_cli(capsys, *argv)
            assert code == 2 and f"NEXUS_LLM_TOKEN_BUDGET={bad!r} is not a whole number of at least 1" in err, (argv, err)


def test_output_into_a_closed_pipe_stops_quietly(project: Project):
    # `nexus … | head -1`: the reader is gone before the command writes.
    plan = [*project.cli_args(), "plan", "--runs-dir", str(project.runs), "--topics-dir", str(project.topics), "--explain-cache"]
    for argv in ([*plan, "--json"], plan):
        read, write = os.pipe()
        os.close(read)
        try:
            done = run_nexus(*argv, stdout=write, env={"NEXUS_LLM_MODEL": "some-model"})
        finally:
            os.close(write)
        assert (done.returncode, done.stderr) == (141, ""), done.stderr


def test_a_runs_or_topics_dir_that_is_a_file_is_named_as_not_a_folder(project: Project, capsys, monkeypatch):
    monkeypatch.setenv("NEXUS_LLM_MODEL", "some-model")
    a_file = next(project.runs.rglob("*.json"))
    for command in (["sync"], ["plan"], ["discover"]):
        code, _, err = run_cli(capsys, *project.cli_args(), *command, "--runs-dir", str(a_file), "--topics-dir", str(project.topics))
        assert code == 2 and f"runs folder {a_file} is a file, not a folder" in err, err
    code, _, err = run_cli(capsys, *project.cli_args(), "sync", "--runs-dir", str(project.runs), "--topics-dir", str(a_file))
    assert code == 2 and f"topics folder {a_file} is a file, not a folder" in err, err
    code, _, err = run_cli(capsys, *project.cli_args(), "sync", "--runs-dir", str(project.root / "nope"), "--topics-dir", str(project.topics))
    assert code == 2 and "does not exist" in err, err


def test_close_promotes_bricks_to_forming_on_the_next_sync(project: Project, capsys):
    run_json(capsys, *project.sync_args("nexus-server-sync"))
    open_run = "run-2026-11-18-open-brainstorm"
    fragment, whole = "sealing freezes the manifest and the order", "Agreed that sealing freezes the manifest and the order of every brick."
    (superseded,) = [b for b in run_json(capsys, *project.cli_args(), "bricks", "nexus-server-sync", "--all") if b["content"] == fragment]
    before = [b for b in run_json(capsys, *project.cli_args(), "bricks", "nexus-server-sync") if b["sources"][0]["run_id"] == open_run]
    (superset,) = [b for b in before if b["content"] == whole]
    assert superseded["state"] == "SUPERSEDED" and superseded["superseded_by"] == superset["brick_id"]
    assert [s["run_id"] for s in superseded["sources"]] == [open_run]
    assert before and all(b["state"] == "IMPROVISE" for b in before)
    assert run_json(capsys, *project.cli_args(), "close", open_run)["changed"] is True
    assert run_json(capsys, *project.cli_args(), "close", open_run)["changed"] is False
    run_json(capsys, *project.sync_args("nexus-server-sync"))
    after = {b["brick_id"]: b for b in run_json(capsys, *project.cli_args(), "bricks", "nexus-server-sync", "--all")}
    for b in before:
        assert after[b["brick_id"]]["state"] == "FORMING"
        assert after[b["brick_id"]]["content"] == b["content"]
        assert after[b["brick_id"]]["sources"] == b["sources"]
    # SUPERSEDED is permanent: closing the fragment's run does not bring it back.
    fragment_after = after[superseded["brick_id"]]
    assert (fragment_after["state"], fragment_after["superseded_by"], fragment_after["content"]) == ("SUPERSEDED", superset["brick_id"], fragment)
    assert fragment_after["order_index"] is None and after[superset["brick_id"]]["state"] == "FORMING"


def test_the_installed_command_runs_and_records_runs_in_dagster_home(project: Project, tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    nexus = os.path.join(os.path.dirname(sys.executable), "nexus")
    done = subprocess.run([nexus, *project.sync_args("storage-decisions"), "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(done.stdout)
    from dagster import DagsterInstance

    os.environ["DAGSTER_HOME"] = str(home)
    try:
        with DagsterInstance.get() as instance:
            run = instance.get_run_by_id(result["dagster_run_id"])
            assert run is not None and run.job_name == "sync_topics"
            assert run.tags.get("dagster/partition") == "storage-decisions"
            # One run: ingestion (unpartitioned), then the topic's partition.
            assert [r.job_name for r in instance.get_runs()] == ["sync_topics"]
    finally:
        del os.environ["DAGSTER_HOME"]


def test_vault_connections_never_draw_duckdb_progress_bars_on_stdout(tmp_path):
    # A long query would otherwise print a progress bar into `nexus sync --json` (seen at 50 MB).
    from nexus_assets.store import Vault

    with Vault.open(tmp_path / "v.duckdb") as v:
        assert v.conn.execute("SELECT current_setting('enable_progress_bar')").fetchone() == (False,)
    with Vault.open(tmp_path / "v.duckdb", read_only=True) as v:
        assert v.conn.execute("SELECT current_setting('enable_progress_bar')").fetchone() == (False,)


def test_a_duckdb_url_names_the_vault_file_on_the_flag_in_nexus_db_and_in_the_api(empty_project: Project, capsys, monkeypatch):
    """`duckdb:///ABS/PATH` (docs/cli.md) is parsed once where it enters: the flag, NEXUS_DB and the
    API's configuration all reach the file at /ABS/PATH, never a path with the scheme still on."""
    from nexus_assets.api.config import ApiConfig
    from nexus_assets.vault.address import parse_address

    p = empty_project
    p.write_topic("kitchen", keywords=["oven"])
    p.write_run("r.json", {"run_id": "r1", "status": "CLOSED", "messages": [{"role": "user", "content": "The oven runs at 230 degrees for bread."}]})
    url = f"duckdb://{p.db.resolve()}"
    assert url.startswith("duckdb:///")
    run_json(capsys, "--db", url, "sync", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics))
    assert p.db.is_file(), "the vault is the file the URL names"
    by_flag = run_json(capsys, "--db", url, "topics")
    assert [t["topic_id"] for t in by_flag] == ["kitchen"]
    monkeypatch.setenv("NEXUS_DB", url)
    assert run_json(capsys, "topics") == by_flag
    assert run_json(capsys, "bricks", "kitchen")[0]["content"] == "The oven runs at 230 degrees for bread."
    config = ApiConfig(db=url, runs_dir=str(p.runs), topics_dir=str(p.topics))
    assert (config.db, parse_address(url).backend) == (str(p.db.resolve()), "duckdb")
    # A vault that is not there is named by its path, once.
    code, _, err = run_cli(capsys, "--db", f"duckdb://{p.root.resolve()}/none.duckdb", "topics")
    assert (code, err.strip()) == (2, f"nexus: no vault at {p.root.resolve()}/none.duckdb; run `nexus sync` first, or pass --db PATH")


# A line of a Claude Code session in which the user pasted what a test run printed: erase-line,
# cursor-to-column-1 and colour sequences, a bell and a backspace, as terminals receive them.
ANSI_PROMPT = (
    "\x1b[2K\x1b[1G\x1b[32m✓\x1b[39m tests/backup.test.ts (14 tests) 212ms\x07\n"
    "So the nightly backup runs at 02:00 and \x1b[1mnever\x1b[22m overlaps the sync\x08."
)


def test_control_characters_from_a_session_are_shown_escaped_to_a_person_and_kept_exact_in_json(empty_project: Project, capsys):
    """Issue 50 item 1: every text for a person (bricks, trace, search, recall, the Markdown export,
    the viewer's pages and source panel) shows control characters as `\\x1b`…; --json and the
    vault keep the exact text (invariant 1)."""
    import urllib.parse

    from nexus_assets_tests.sessions import SESSION, claude_event, write_lines
    from nexus_assets_tests.web.test_viewer import fetch, running_viewer

    p = empty_project
    p.write_topic("backups", keywords=["backup"])
    write_lines(p.runs / "claude" / f"{SESSION}.jsonl", [
        claude_event("user", 1, ANSI_PROMPT),
        claude_event("assistant", 2, [{"type": "text", "text": "Noted: the backup runs at 02:00, before the sync."}], parent=1),
    ])
    run_json(capsys, *p.sync_args())
    bricks = run_json(capsys, *p.cli_args(), "bricks", "backups")
    raw = [b for b in bricks if "\x1b" in b["content"]]
    assert raw, [b["content"] for b in bricks]
    brick = raw[0]
    assert brick["content"] in ANSI_PROMPT, "--json keeps the exact text"

    def safe(text: str) -> None:
        assert not re.search(r"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f]", text), repr(text)

    outputs = {
        "bricks": run_cli(capsys, *p.cli_args(), "bricks", "backups"),
        "bricks --full": run_cli(capsys, *p.cli_args(), "bricks", "backups", "--full"),
        "trace": run_cli(capsys, *p.cli_args(), "trace", brick["brick_id"]),
        "trace --full": run_cli(capsys, *p.cli_args(), "trace", brick["brick_id"], "--full"),
        "search": run_cli(capsys, *p.cli_args(), "search", "backup"),
        "recall": run_cli(capsys, *p.cli_args(), "recall", "when does the backup run"),
        "export": run_cli(capsys, *p.cli_args(), "export", "backups", "--format", "markdown"),
    }
    for name, (code, out, err) in outputs.items():
        assert code == 0, (name, err)
        safe(out + err)
        assert "\\x1b[" in out, (name, out)
    assert "\\x1b[2K\\x1b[1G\\x1b[32m✓\\x1b[39m" in outputs["trace --full"][1] + outputs["bricks --full"][1]
    traced = run_json(capsys, *p.cli_args(), "trace", brick["brick_id"])
    assert traced["content"] == brick["content"] and "\x1b" in traced["traces"][0]["node_text"]
    code, out, _ = run_cli(capsys, *p.cli_args(), "search", "backup", "--json")
    (hit,) = [h for h in json.loads(out) if h["brick_id"] == brick["brick_id"]]
    assert hit["content"] == brick["content"], "--json decodes to the exact text"

    with running_viewer(p.db) as server:
        pages = [
            fetch(f"{server.url}topics/backups")[2],
            fetch(f"{server.url}?recall={urllib.parse.quote('when does the backup run')}")[2],
        ]
        status, _, panel = fetch(f"{server.url}api/bricks/{brick['brick_id']}/trace")
    assert status == 200
    for page in [*pages, panel]:
        safe(json.loads(panel)["traces"][0]["quote"] if page is panel else page)
        assert "\\x1b[" in page
