"""Branches are marked (docs/inputs.md): an edited prompt and a regenerated answer are compiled, and
every source says whether it is on the path the user last saw."""

from __future__ import annotations

import threading
import urllib.request

import pytest
import yaml

from nexus_assets.ingest.formats.chatgpt import chatgpt_run
from nexus_assets.publish.manifest import build_manifest
from nexus_assets.web.server import make_server
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.project import Project


def message(role: str, text: str, t: float) -> dict:
    return {
        "id": f"msg-{t}",
        "author": {"role": role, "metadata": {}},
        "create_time": t,
        "content": {"content_type": "text", "parts": [text]},
        "metadata": {},
        "recipient": "all",
    }


def node(node_id: str, parent: str | None, children: list[str], msg: dict | None) -> dict:
    return {"id": node_id, "message": msg, "parent": parent, "children": children}


def edited_and_regenerated() -> dict:
    """root → u-old (edited away) → a-old; root → u-new → a-regen (regenerated away) | a-new (current)."""
    return {
        "title": "Deletes, then renames",
        "create_time": 1717000000.0,
        "update_time": 1717000600.0,
        "conversation_id": "conv-branches",
        "id": "conv-branches",
        "current_node": "a-new",
        "mapping": {
            "root": node("root", None, ["u-old", "u-new"], None),
            "u-old": node("u-old", "root", ["a-old"], message("user", "Now the sync engine must handle deletes.", 1717000010)),
            "a-old": node("a-old", "u-old", [], message("assistant", "The sync engine should hard-delete the rows.", 1717000020)),
            "u-new": node("u-new", "root", ["a-regen", "a-new"], message("user", "Now the sync engine must handle renames.", 1717000100)),
            "a-regen": node("a-regen", "u-new", [], message("assistant", "The sync engine treats a rename as a move.", 1717000110)),
            "a-new": node("a-new", "u-new", [], message("assistant", "The sync engine records a rename as one operation.", 1717000200)),
        },
    }


def write_topic(project: Project, topic_id: str, **options) -> None:
    project.topics.mkdir(parents=True, exist_ok=True)
    doc = {
        "topic_id": topic_id,
        "display_name": topic_id.title(),
        "extraction_policy": {"scope_description": "The sync engine.", "required_keywords": ["sync"]},
        "state": "ACTIVE",
        **options,
    }
    (project.topics / f"{topic_id}.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Project:
    project = Project(tmp_path_factory.mktemp("branches"))
    project.write_run("export/conversations.json", [edited_and_regenerated()])
    write_topic(project, "everything")
    write_topic(project, "as-last-seen", branches="current")
    return project


@pytest.fixture(scope="module")
def bricks(synced: Project) -> dict[str, list[dict]]:
    # A module fixture cannot use capsys; main() prints, so its output is redirected here.
    import contextlib
    import io
    import json

    from nexus_assets.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main([*synced.sync_args(), "--json"]) == 0
    out: dict[str, list[dict]] = {}
    for topic in ("everything", "as-last-seen"):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert main([*synced.cli_args(), "bricks", topic, "--json"]) == 0
        out[topic] = json.loads(buffer.getvalue())
    return out


def test_nodes_off_the_current_path_are_abandoned() -> None:
    run = chatgpt_run(edited_and_regenerated())
    branches = {n.steps[1]: n.branch for n in run.nodes}
    assert branches == {"u-old": "abandoned", "a-old": "abandoned", "u-new": "current", "a-regen": "abandoned", "a-new": "current"}
    assert [n.steps[1] for n in run.nodes][:2] == ["u-new", "a-new"]  # the current path comes first


def test_every_branch_is_compiled_and_every_source_marked(bricks: dict[str, list[dict]]) -> None:
    by_text = {b["content"]: b for b in bricks["everything"]}
    assert set(by_text) == {
        "Now the sync engine must handle deletes.",
        "The sync engine should hard-delete the rows.",
        "Now the sync engine must handle renames.",
        "The sync engine treats a rename as a move.",
        "The sync engine records a rename as one operation.",
    }
    for b in bricks["everything"]:
        assert all({"node_type", "branch"} <= set(s) for s in b["sources"])
    assert by_text["The sync engine should hard-delete the rows."]["sources"][0]["branch"] == "abandoned"
    assert by_text["The sync engine should hard-delete the rows."]["sources"][0]["node_type"] == "assistant_message"
    assert by_text["Now the sync engine must handle deletes."]["sources"][0]["node_type"] == "user_message"
    assert by_text["The sync engine treats a rename as a move."]["abandoned"] is True
    assert by_text["The sync engine records a rename as one operation."]["sources"][0]["branch"] == "current"
    assert by_text["The sync engine records a rename as one operation."]["abandoned"] is False


def test_a_topic_with_branches_current_compiles_the_current_path_only(bricks: dict[str, list[dict]]) -> None:
    assert sorted(b["content"] for b in bricks["as-last-seen"]) == [
        "Now the sync engine must handle renames.",
        "The sync engine records a rename as one operation.",
    ]
    assert all(s["branch"] == "current" for b in bricks["as-last-seen"] for s in b["sources"])


def test_trace_says_which_branch(synced: Project, bricks: dict[str, list[dict]], capsys: pytest.CaptureFixture) -> None:
    abandoned = next(b for b in bricks["everything"] if b["abandoned"])
    traced = run_json(capsys, *synced.cli_args(), "trace", abandoned["brick_id"])
    assert traced["abandoned"] is True
    assert [t["branch"] for t in traced["traces"]] == ["abandoned"]
    code, out, _ = run_cli(capsys, *synced.cli_args(), "trace", abandoned["brick_id"])
    assert code == 0 and "ABANDONED BRANCH" in out and "abandoned branch" in out


def test_the_viewer_marks_abandoned_bricks(synced: Project, bricks: dict[str, list[dict]]) -> None:
    server = make_server(synced.db, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen(f"{server.url.rstrip('/')}/topics/everything", timeout=10) as response:
            html = response.read().decode("utf-8")
        with urllib.request.urlopen(f"{server.url.rstrip('/')}/topics/as-last-seen", timeout=10) as response:
            current_only = response.read().decode("utf-8")
    finally:
        server.shutdown()
        server.server_close()
    abandoned = sum(1 for b in bricks["everything"] if b["abandoned"])
    assert html.count('class="badge badge-abandoned"') == abandoned == 3
    assert "badge-abandoned" not in current_only


def test_the_branch_never_enters_hashes() -> None:
    from nexus_assets.core.models import Brick, SourceAddress

    address = SourceAddress(run_id="r", json_path="$.x", start=0, end=4, node_checksum="c", node_type="user_message")
    brick = Brick(
        brick_id="b", topic_id="t", content="sync", fingerprint="f", state="IMPROVISE", order_index=0, sources=(address,)
    )
    moved = brick.model_copy(update={"sources": (address.model_copy(update={"branch": "abandoned"}),)})
    assert moved.abandoned and not brick.abandoned
    assert build_manifest("t", [brick], None).manifest_hash == build_manifest("t", [moved], None).manifest_hash
    assert address == address.model_copy(update={"branch": "abandoned", "node_type": None})
