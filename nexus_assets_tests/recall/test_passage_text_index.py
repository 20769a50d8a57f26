"""The passages' full-text indexes keep word counts, not positions (issue 61: bytes per passage):
every ranking and score is what the same index with positions gives, and the index is smaller."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from nexus_assets.recall.passages import text_index
from nexus_assets.recall.passages.filters import EVERY_CONVERSATION

SENTENCES = [
    "The vault keeps every version of a run file.",
    "We moved the storage to DuckDB because one file is easy to back up.",
    "Tomato plants need six hours of sun and water at the base.",
    "The sync engine compiles bricks from the runs folder every night.",
    "DuckDB holds one writer at a time, so the API queues its pushes.",
    "A manifest lists the visible bricks of a topic with their fingerprints.",
    "Backups of the vault file run at midnight, and the runs folder goes with them.",
    "The tomato variety Sungold ripens in about 57 days.",
    "Recall ranks notes and passages together, with BM25 and dense vectors fused.",
    "A forgotten run leaves a tombstone in the manifest chain of every topic it fed.",
] * 3
QUESTIONS = ["how do we back up the vault", "when does the tomato ripen", "what does a manifest list",
             "which database holds one writer", "storage file backup duckdb", "tombstone forgotten run chain"]


def _build(folder: Path, option: str, monkeypatch) -> tuple:
    monkeypatch.setattr(text_index, "RANKED", option)
    passages = text_index.open_index(folder / "text", "passages")
    messages = text_index.open_index(folder / "messages", "messages")
    p_writer, m_writer = text_index.writer_of(passages[0]), text_index.writer_of(messages[0])
    for i, text in enumerate(SENTENCES):
        row = SimpleNamespace(passage_id=f"{i:064x}", run_id=f"run-{i % 4}", node_type="user_message" if i % 2 else "assistant_message",
                              hidden=False, branch="current", speaker="ada" if i % 3 else "bo", timestamp=f"2026-01-{1 + i % 9:02d}T00:00:00Z")
        key = f"{row.run_id}\x1f$.messages[{i}].content"
        near = " ".join(SENTENCES[max(i - 1, 0):i] + SENTENCES[i + 1:i + 2])
        text_index.add_passage(p_writer, row, key, f"{row.speaker} {text}", near, i % 9)
        text_index.add_message(m_writer, row, key, text, near, i % 9)
    for w in (p_writer, m_writer):
        w.commit()
        w.wait_merging_threads()
    return passages, messages


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_counts_without_positions_rank_and_score_as_with_positions(tmp_path, monkeypatch):
    with_positions = _build(tmp_path / "positions", "position", monkeypatch)
    counts_only = _build(tmp_path / "freq", "freq", monkeypatch)
    for question in QUESTIONS:
        a = text_index.ranked(*with_positions, question, EVERY_CONVERSATION, depth=20)
        b = text_index.ranked(*counts_only, question, EVERY_CONVERSATION, depth=20)
        assert a and a == b, question
    assert _size(tmp_path / "freq") < _size(tmp_path / "positions")


def test_the_shipped_index_keeps_counts_not_positions():
    assert text_index.RANKED == "freq"


def test_an_index_of_the_previous_format_is_built_again_and_recalls_the_same(tmp_path, capsys):
    import json

    from nexus_assets.recall.passages.index import FORMAT, index_dir
    from nexus_assets_tests.cli_helpers import run_json
    from nexus_assets_tests.project import Project, nexus_run

    p = Project(tmp_path / "p")
    p.write_topic("garden", keywords=["tomato"])
    p.write_run("a.json", nexus_run("run-a", [("user", "How do I grow tomatoes?"),
                                              ("assistant", "Tomatoes need six hours of sun. Water them at the base.")]))
    run_json(capsys, *p.sync_args())
    ask = ["recall", "how much sun do they need", "--k", "5"]
    before = run_json(capsys, *p.cli_args(), *ask)
    state_file = index_dir(p.db) / "state.json"
    state = json.loads(state_file.read_text())
    assert state["format"] == FORMAT
    state_file.write_text(json.dumps(state | {"format": FORMAT - 1}))  # as the previous release left it
    from nexus_assets.recall.passages import index as held

    held._warm.clear()  # a new process: nothing held from the recall above
    after = run_json(capsys, *p.cli_args(), *ask)
    assert [(r["kind"], r["content"]) for r in after["results"]] == [(r["kind"], r["content"]) for r in before["results"]]
    assert json.loads(state_file.read_text())["format"] == FORMAT, "built again in this release's format"


def test_a_held_index_reads_only_the_segments_written_since(tmp_path, capsys):
    """After a push or a sync, the index this process holds keeps its unchanged segments (only
    their deleted masks are read again) and reads the new one; what it ranks is a fresh read's."""
    from nexus_assets.embedding.static_embedder import embed_static
    from nexus_assets.recall.passages import index as passage_index
    from nexus_assets.recall.passages.filters import EVERY_CONVERSATION
    from nexus_assets.store import Vault
    from nexus_assets_tests.cli_helpers import run_json
    from nexus_assets_tests.project import Project, nexus_run

    p = Project(tmp_path / "p")
    p.write_topic("garden", keywords=["tomato"])
    p.write_run("a.json", nexus_run("run-a", [("user", "How do I grow tomatoes?"), ("assistant", "Tomatoes need six hours of sun.")]))
    run_json(capsys, *p.sync_args())
    with Vault.open(p.db, read_only=True) as v:
        first = passage_index.ensure(v, p.db)
    p.write_run("b.json", nexus_run("run-b", [("user", "The tomato bed gets compost in spring.")], status="OPEN"))
    run_json(capsys, *p.sync_args())
    (p.runs / "b.json").write_text(__import__("json").dumps(nexus_run("run-b", [
        ("user", "The tomato bed gets compost in spring."), ("assistant", "Compost twice a year is enough.")], status="OPEN")))
    run_json(capsys, *p.sync_args())  # run-b grew: its first version's rows are deleted in their segment
    with Vault.open(p.db, read_only=True) as v:
        again = passage_index.load(p.db, first)
        fresh = passage_index.load(p.db)
    assert len(again.segments) > len(first.segments) or again.segments[0].index is not first.segments[0].index
    kept = {s.name: s.index for s in first.segments}
    assert any(s.index is kept.get(s.name) for s in again.segments), "an unchanged segment is not read again"
    assert [s.deleted.tolist() for s in again.segments] == [s.deleted.tolist() for s in fresh.segments]
    query = embed_static(["how much sun do tomatoes need"])[0]
    assert passage_index.dense_ranking(again, query, EVERY_CONVERSATION, 10) == passage_index.dense_ranking(fresh, query, EVERY_CONVERSATION, 10)
