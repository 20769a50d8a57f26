"""The record (DESIGN §3.1, invariants 16 and 17): every sentence of the runs a topic is about is
recallable with its exact address, whatever the extractor kept; notes and record are ranked together
and a sentence that is a brick comes back once, as the brick; answers cite passages verbatim."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nexus_assets.recall.passages.index import index_dir
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.project import Project, nexus_run
from nexus_assets_tests.sessions import claude_event, write_lines

TOPIC = "garden"


def _project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "p")
    p.write_topic(TOPIC, keywords=["tomato"], min_relevance=None)
    p.write_run("a.json", nexus_run("run-a", [
        ("user", "How should I grow tomatoes on the balcony?"),
        ("assistant", "Tomato plants need six hours of sun. Water them at the base every second morning. "
                      "The variety Sungold ripens in about 57 days."),
        ("user", "My neighbour Priya gave me a bag of worm castings last spring."),
    ]))
    p.write_run("b.json", nexus_run("run-b", [("user", "Plan a trip to Lisbon."), ("assistant", "Stay in Alfama for three nights.")]))
    return p


@pytest.fixture
def synced(tmp_path, capsys) -> Project:
    p = _project(tmp_path)
    run_json(capsys, *p.sync_args())
    return p


def _passages(db) -> dict[str, tuple]:
    with Vault.open(db, read_only=True) as v:
        return {r.passage_id: (r.run_id, r.json_path, r.start, r.end, r.text) for r in v.passages.latest()}


def test_every_sentence_of_every_run_is_a_passage_at_its_exact_address(synced: Project):
    rows = _passages(synced.db)
    documents = {"run-a": json.loads((synced.runs / "a.json").read_text()), "run-b": json.loads((synced.runs / "b.json").read_text())}
    assert len(rows) == 7, "5 sentences in the first run's three messages, 2 in the second run's"
    for run_id, path, start, end, text in rows.values():
        message = int(path.split("[")[2].rstrip("]"))
        assert documents[run_id]["messages"][message]["content"][start:end] == text


def test_a_sentence_no_brick_holds_is_recalled_with_its_address_and_the_topic_whose_record_holds_it(synced: Project, capsys):
    out = run_json(capsys, *synced.cli_args(), "recall", "who gave me worm castings", "--topic", TOPIC, "--k", "3")
    top = out["results"][0]
    assert top["kind"] == "passage" and top["content"] == "My neighbour Priya gave me a bag of worm castings last spring."
    assert top["topic_ids"] == [TOPIC] and top["id"] == top["passage_id"] and len(top["sources"]) == 1
    source = top["sources"][0]
    assert (source["run_id"], source["json_path"], source["start"]) == ("run-a", "$['messages'][2]['content']", 0)
    assert source["speaker"] == "user" and source["time"]
    # The topic is about run-a only: the trip is not in its record, but it is in every run's.
    trip = run_json(capsys, *synced.cli_args(), "recall", "where to stay in Lisbon", "--topic", TOPIC)
    assert all(r["sources"][0]["run_id"] == "run-a" for r in trip["results"])
    anywhere = {r["content"]: r for r in run_json(capsys, *synced.cli_args(), "recall", "where to stay in Lisbon")["results"]}
    assert anywhere["Stay in Alfama for three nights."]["topic_ids"] == [], "in every run's record, in no topic's"


def test_a_sentence_that_is_a_brick_comes_back_once_as_the_brick(synced: Project, capsys):
    bricks = {b["content"]: b["brick_id"] for b in run_json(capsys, *synced.cli_args(), "bricks", TOPIC)}
    out = run_json(capsys, *synced.cli_args(), "recall", "how much sun do tomato plants need", "--k", "10")
    said = [r["content"] for r in out["results"]]
    assert len(said) == len(set(said)), "no text twice"
    for r in out["results"]:
        if r["content"] in bricks:
            assert r["kind"] == "brick" and r["brick_id"] == bricks[r["content"]]


def test_an_answer_cites_passages_verbatim_and_refuses_what_nothing_answers(synced: Project, capsys):
    out = run_json(capsys, *synced.cli_args(), "ask", "how many days does Sungold take to ripen", "--topic", TOPIC)
    assert out["outcome"] == "answered" and out["ccc"] == 1.0
    cited = {s["id"]: s for s in out["sources"]}
    for sentence in out["sentences"]:
        ids = sentence["brick_ids"] + sentence["passage_ids"]
        assert sentence["text"] == " ".join(cited[i]["content_snippet"] for i in ids), "the cited texts, joined by a space only"
    assert "The variety Sungold ripens in about 57 days." in out["answer"]
    refused = run_json(capsys, *synced.cli_args(), "ask", "what is the capital of France", expect=1)
    assert refused["refused"] and "relevant enough" in refused["reason"]


def test_a_topic_whose_keywords_are_only_in_tool_output_reads_that_output(tmp_path, capsys):
    p = Project(tmp_path / "p")
    p.write_topic("plots", keywords=["matplotlib"], min_relevance=None)
    run = nexus_run("run-code", [("user", "Draw the chart."), ("assistant", "Here it is.")])
    run["messages"].insert(1, {"role": "tool", "content": "Warning: matplotlib fell back to the Agg backend\n", "timestamp": "2026-01-01T00:00:30Z"})
    p.write_run("code.json", run)
    run_json(capsys, *p.sync_args())
    out = run_json(capsys, *p.cli_args(), "recall", "which backend did matplotlib use", "--topic", "plots")
    assert out["results"][0]["content"] == "Warning: matplotlib fell back to the Agg backend"
    everywhere = run_json(capsys, *p.cli_args(), "recall", "which backend did matplotlib use")
    assert all(r["sources"][0]["node_type"] != "tool_message" for r in everywhere["results"]), "tool output is no one's words"


def _thinking_session(path: Path, n: int, thoughts: list[str]) -> None:
    """A Claude Code session whose assistant thinks `thoughts` (hidden messages) and says something else."""
    lines, parent = [claude_event("user", 1, "Plan the tomato beds for spring.")], 1
    for i, thought in enumerate(thoughts, 2):
        content = [{"type": "thinking", "thinking": thought, "signature": "c2ln"}, {"type": "text", "text": "Raised beds drain best."}]
        lines.append(claude_event("assistant", i, content, parent=parent))
        parent = i
    write_lines(path, [{**line, "sessionId": f"session-{n}"} for line in lines])


def test_a_topic_whose_keywords_are_only_in_hidden_messages_is_told_so_by_the_sync(tmp_path, capsys):
    """Issue 59 item 6: a topic whose keywords occur in some runs only in hidden messages (thinking, a
    hook's text, what an export hides) gets nothing from them until `include_hidden: true`; the sync
    says so for that topic, in its lines and its --json result (`keywords_only_hidden`), also when
    nothing changed since; never for a topic that reads hidden messages or finds its words said."""
    p = Project(tmp_path / "p")
    p.write_topic("vault-notes", keywords=["obsidian"], min_relevance=None)
    p.write_topic("vault-hidden", keywords=["obsidian"], min_relevance=None, include_hidden=True)
    p.write_topic("garden", keywords=["tomato"], min_relevance=None)
    _thinking_session(p.runs / "claude" / "a.jsonl", 1, ["The person keeps obsidian notes.", "Their obsidian vault has a garden page."])
    _thinking_session(p.runs / "claude" / "b.jsonl", 2, ["Obsidian again: link the beds page."])

    results = {r["topic_id"]: r for r in run_json(capsys, *p.sync_args(), "--no-recall")}
    note = ("vault-notes: 3 hidden messages mention this topic's keywords, in 2 runs it otherwise gets nothing from; "
            "`include_hidden: true` in its topic file reads them")
    assert results["vault-notes"]["keywords_only_hidden"] == {"runs": 2, "messages": 3, "note": note}
    assert "keywords_only_hidden" not in results["vault-hidden"], "it reads them already"
    assert "keywords_only_hidden" not in results["garden"], "its keyword is said"

    code, out, _ = run_cli(capsys, *p.sync_args(), "--no-recall")
    assert code == 0 and "unchanged since the last sync" in out
    lines = out.splitlines()
    assert lines[lines.index(next(line for line in lines if line.startswith("vault-notes: ok"))) + 1] == f"  {note}"
    assert sum(note in line for line in lines) == 1


def test_a_hidden_only_verdict_keeps_its_count_of_hidden_messages():
    """The count the sync reports is read back from the stored verdict, and worded for one or many."""
    from nexus_assets.extract.about import HIDDEN_ONLY, HiddenOnly, hidden_messages

    assert hidden_messages(HIDDEN_ONLY.format(n=12)) == 12
    assert hidden_messages("no required keyword occurs in the conversation") == 0
    assert HiddenOnly(1, 1).note("t").startswith("t: 1 hidden message mentions this topic's keywords, in 1 run it")


def test_speaker_and_date_filters_apply_to_passages(synced: Project, capsys):
    out = run_json(capsys, *synced.cli_args(), "recall", "worm castings", "--speaker", "assistant", "--k", "5")
    assert all(r["sources"][0]["speaker"] == "assistant" for r in out["results"])
    later = run_json(capsys, *synced.cli_args(), "recall", "worm castings", "--since", "2030-01-01", "--k", "5")
    assert later["results"] == []


def test_a_grown_run_splits_only_its_new_nodes_and_equals_a_fresh_build(tmp_path, capsys):
    p = _project(tmp_path)
    run_json(capsys, *p.sync_args())
    grown = json.loads((p.runs / "a.json").read_text())
    grown["messages"].append({"role": "assistant", "content": "Castings feed the soil slowly.", "timestamp": "2026-01-01T00:09:00Z"})
    (p.runs / "a.json").write_text(json.dumps(grown))
    run_json(capsys, *p.sync_args())
    fresh = Project(tmp_path / "fresh")
    shutil.copytree(p.runs, fresh.runs)
    shutil.copytree(p.topics, fresh.topics)
    run_json(capsys, *fresh.sync_args())
    assert _passages(p.db) == _passages(fresh.db), "incremental equals full"
    with Vault.open(p.db, read_only=True) as v:
        builds = v.conn.execute("SELECT count(*) FROM passage_builds WHERE run_id = 'run-a'").fetchone()[0]
    assert builds == 2, "one build per version; the unchanged nodes kept their passages"


def test_a_missing_or_corrupt_passage_model_is_one_clear_error_and_changes_nothing(tmp_path, capsys, monkeypatch):
    from nexus_assets.embedding import static_embedder

    p = _project(tmp_path)
    broken = tmp_path / "static"
    shutil.copytree(static_embedder.MODEL_DIR, broken)
    (broken / "embeddings.npy").write_bytes(b"not numpy")
    monkeypatch.setattr(static_embedder, "MODEL_DIR", broken)
    static_embedder._model.cache_clear()
    try:
        code, _, err = run_cli(capsys, *p.sync_args())
    finally:
        static_embedder._model.cache_clear()
    assert code == 2 and "embeddings.npy" in err and "corrupt" in err
    assert not Path(p.db).exists() and not index_dir(p.db).exists(), "nothing was written"


def test_which_runs_a_topic_is_about_is_looked_up_once_per_judging_not_once_per_run(tmp_path, capsys, monkeypatch):
    """Asked once per admitted run, the lookup made a push into a 3,000-run vault spend 74 s judging
    (benchmarks/bench_api.py, issue 61); a count, not a timing."""
    from nexus_assets.extract.about_records import AboutRecords

    p = _project(tmp_path)
    for i in range(5):
        p.write_run(f"c{i}.json", nexus_run(f"run-c{i}", [("user", f"Tomato bed {i} gets compost.")]))
    calls = []
    real = AboutRecords.judged
    monkeypatch.setattr(AboutRecords, "judged", lambda self, *a: calls.append(1) or real(self, *a))
    run_json(capsys, *p.sync_args())
    assert len(calls) == 1, "one lookup for the topic's seven runs"
