"""Bad input is never silent (issue 40): a broken topic file fails the sync after the valid topics
compiled, named in its last lines; an archive Nexus cannot read is an ingestion error naming the
file and the fix; a `--db` in a missing folder says a new vault was made. Real `nexus` commands in
a child process, as a user (or cron) runs them."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.project import Project, nexus_run

TOPIC = "vault-notes"
NO_RECALL = {"NEXUS_NO_RECALL": "1"}
TYPO = """\
topic_id: garden
display_name: Garden
extraction_policy:
  scope_description: What we plant.
  requried_keywords: [garden]
state: ACTIVE
"""


def with_a_good_topic(p: Project) -> Project:
    p.write_topic(TOPIC, keywords=["vault"])
    p.write_run("good.json", nexus_run("run-good", [("user", "We keep the vault in one DuckDB file.")]))
    return p


def test_a_broken_topic_file_fails_the_sync_after_the_valid_topics_compiled(empty_project: Project):
    p = with_a_good_topic(empty_project)
    broken = p.topics / "garden.yaml"
    broken.write_text(TYPO, encoding="utf-8")
    not_yaml = p.topics / "notes.yaml"
    not_yaml.write_text("topic_id: [unclosed\n", encoding="utf-8")

    for _ in range(2):  # the second sync has nothing new to do, and still says it
        done = run_nexus(*p.sync_args(), env=NO_RECALL, cwd=p.root)
        assert done.returncode == 1, done.stderr[-3000:]
        assert done.stdout.startswith(f"{TOPIC}: ok"), done.stdout
        last = done.stderr.strip().splitlines()[-3:]
        assert last[0] == "nexus: 2 topic files could not be read, so their topics were not compiled; fix and sync again:"
        assert last[1].startswith(f"  topic file {broken}: extraction_policy.requried_keywords: extra inputs are not permitted")
        assert last[1].endswith("did you mean 'required_keywords'?)")
        assert last[2].startswith(f"  topic file {not_yaml}: not valid YAML")

    listed = run_nexus(*p.cli_args(), "bricks", TOPIC, "--json")
    assert [b["content"] for b in json.loads(listed.stdout)] == ["We keep the vault in one DuckDB file."]

    broken.write_text(TYPO.replace("requried", "required"), encoding="utf-8")
    not_yaml.unlink()
    done = run_nexus(*p.sync_args(), env=NO_RECALL, cwd=p.root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "garden: ok" in done.stdout


def test_archives_nexus_cannot_read_are_ingestion_errors_naming_the_fix(empty_project: Project):
    p = with_a_good_topic(empty_project)
    export = json.dumps([]).encode()
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w:gz") as t:
        info = tarfile.TarInfo("conversations.json")
        info.size = len(export)
        t.addfile(info, io.BytesIO(export))
    p.write_bytes("chatgpt/export.tar.gz", tar.getvalue())
    p.write_bytes("claude/export.tgz", tar.getvalue())
    p.write_bytes("old/conversations.json.gz", b"\x1f\x8b\x08\x00")
    p.write_bytes("old/export.7z", b"7z\xbc\xaf\x27\x1c")
    p.write_bytes("old/export.rar", b"Rar!\x1a\x07\x00")
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("conversations.json", "[]")
    outer = io.BytesIO()
    with zipfile.ZipFile(outer, "w") as z:
        z.writestr("chatgpt-export.zip", inner.getvalue())
    p.write_bytes("zipped-twice.zip", outer.getvalue())

    done = run_nexus(*p.sync_args(), cwd=p.root, env=NO_RECALL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "6 ingestion errors recorded; see `nexus errors`" in done.stdout
    assert "skipped runs/chatgpt/export.tar.gz: is a .tar.gz archive" in done.stderr

    listed = run_nexus(*p.cli_args(), "errors", cwd=p.root)
    errors = dict(line.split(": ", 1) for line in listed.stdout.splitlines())
    unpack = "unpack it into the runs folder and sync again"
    for name, kind in [
        ("chatgpt/export.tar.gz", ".tar.gz"),
        ("claude/export.tgz", ".tgz"),
        ("old/conversations.json.gz", ".gz"),
        ("old/export.7z", ".7z"),
        ("old/export.rar", ".rar"),
    ]:
        assert errors[f"runs/{name}"] == f"is a {kind} archive, which Nexus cannot read (it reads .json and .jsonl files and .zip exports); {unpack}"
    assert errors["runs/zipped-twice.zip"] == (
        "zip holds another archive (chatgpt-export.zip) and no conversations.json; "
        f"Nexus does not open archives inside archives: {unpack}"
    )

    # Unpacked as told, the export syncs.
    (p.runs / "zipped-twice.zip").unlink()
    (p.runs / "chatgpt-export.zip").write_bytes(inner.getvalue())
    again = run_nexus(*p.sync_args(), cwd=p.root, env=NO_RECALL)
    assert again.returncode == 0, again.stderr[-3000:]


def test_a_db_in_a_missing_folder_says_it_made_a_new_vault(empty_project: Project, tmp_path: Path):
    p = with_a_good_topic(empty_project)
    db = tmp_path / "typo" / "nexus.duckdb"
    done = run_nexus("--db", str(db), "sync", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics), env=NO_RECALL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"nexus: created a new vault at {db}, and the folder {db.parent} for it" in done.stderr.splitlines()
    again = run_nexus("--db", str(db), "sync", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics), env=NO_RECALL)
    assert "created a new vault" not in again.stderr


def test_a_topic_key_at_the_wrong_level_is_told_where_it_belongs(tmp_path):
    """`min_relevance` is a topic key, but not under `extraction_policy`: the hint says where it goes
    (not "did you mean 'min_relevance'?", the very key that was written)."""
    from nexus_assets.topics.files import read_topic_file

    path = tmp_path / "garden.yaml"
    path.write_text(
        "topic_id: garden\ndisplay_name: Garden\nstate: ACTIVE\n"
        "extraction_policy:\n  scope_description: What grows where.\n  required_keywords: [tomato]\n  min_relevance: 0.2\n",
        encoding="utf-8",
    )
    problem = read_topic_file(path).problem
    assert problem is not None and "did you mean" not in problem, problem
    assert problem.endswith(
        "('min_relevance' is not a key under 'extraction_policy'; it belongs at the top level of the topic file)"
    ), problem


def test_examples_that_are_not_sentences_are_one_error_naming_the_file(tmp_path):
    """A topic's `examples` are strings a person chose (docs/inputs.md): a number, a blank line or an
    unknown list is one problem naming the file and the entry, so the sync leaves that topic out
    (and, as for any broken topic file, compiles the others)."""
    from nexus_assets.topics.files import read_topic_file

    head = "topic_id: garden\ndisplay_name: Garden\nstate: ACTIVE\nextraction_policy:\n  scope_description: What grows where.\n"
    cases = {
        "examples:\n  keep: [\"Water at dawn.\"]\n  drop: [3]\n": "examples.drop[0]",
        "examples:\n  keep: [\"  \"]\n": "an example is a sentence",
        "examples:\n  maybe: [\"Water at dawn.\"]\n": "maybe",
    }
    for body, named in cases.items():
        path = tmp_path / "garden.yaml"
        path.write_text(head + body, encoding="utf-8")
        found = read_topic_file(path)
        assert found.topic is None and found.problem is not None, body
        assert found.problem.startswith(f"topic file {path}:") and named in found.problem, found.problem
    path.write_text(head + "examples:\n  keep: [\"Water at dawn.\"]\n", encoding="utf-8")
    assert read_topic_file(path).topic.examples.keep == ("Water at dawn.",)
