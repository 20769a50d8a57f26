"""The embedded extractor keeps what a person would highlight (issue 34): whole statements, not
headings, table rows, code, questions, lead-ins, one- or two-word lines or list fragments.
Measured with `nexus eval` on gold files, against the previous extractor (embedded-v1: every
keyword sentence), whose answers are stored under its own identity so both are scored from the
vault alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nexus_assets.core.models import Topic
from nexus_assets.extract.backends import extraction_key
from nexus_assets.core.keywords import keyword_pattern
from nexus_assets.extract.backends import newest_selector
from nexus_assets.extract.embedded import extract_embedded, is_statement

# The selector a new topic is compiled with (embedded-v6: v3's reading, and its taught fit, which
# without examples keeps exactly what v3 keeps).
EXTRACTOR_VERSION = newest_selector()
from nexus_assets.ingest.scope import in_scope_nodes
from nexus_assets.core.sentences import CODE, HEADING, ITEM, PROSE, TABLE, sentence_spans, sentence_units
from nexus_assets.vault.records import RunVersion
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.project import FIXTURES, Project, sample_project

MARKDOWN = FIXTURES / "markdown_answers"


def kinds(text: str) -> list[tuple[str, str]]:
    return [(text[s:e], k) for s, e, k in sentence_units(text)]


def test_sentence_units_name_what_each_span_is_and_keep_the_spans():
    text = "## Plan\n\nThe sync runs nightly.\n- a list item\n| a | b |\n|---|---|\n```\ncode here\n```\n> quoted text."
    assert kinds(text) == [
        ("Plan", HEADING),
        ("The sync runs nightly.", PROSE),
        ("a list item", ITEM),
        ("| a | b |", TABLE),
        ("code here", CODE),
        ("quoted text.", PROSE),
    ]
    assert [(s, e) for s, e, _ in sentence_units(text)] == sentence_spans(text)


@pytest.mark.parametrize(
    "sentence, kind, kept",
    [
        ("The sync re-reads every source file at night.", PROSE, True),
        ("Every brick keeps its source address", ITEM, True),  # an item that is a whole clause
        ("Yes, the vault keeps history.", PROSE, True),
        ("Agreed that sealing freezes the manifest.", PROSE, True),
        ("同期エンジンのマニフェストは封印後に変わりません。", PROSE, True),
        ("Nightly sync design", HEADING, False),
        ("| Vault | DuckDB |", TABLE, False),
        ("def sync(): pass", CODE, False),
        ("Should the manifest follow the processing order?", PROSE, False),
        ("Want me to sketch the sync?**", PROSE, False),
        ("Here's how I'd structure the nightly sync:", PROSE, False),
        ("Sync", ITEM, False),
        ("Sync.", PROSE, False),
        ("Vault backups", ITEM, False),
        ("sealing freezes the manifest", ITEM, False),  # a fragment: no full stop, under five words
        ("The compiler rejects it.", PROSE, False),  # leans on the sentence before
        ("Exactly — the brick stays in the vault.", PROSE, False),
        ("I was thinking DuckDB next to the runs.", PROSE, False),
        ("Maybe, but I would not do it.", PROSE, False),
    ],
)
def test_what_counts_as_a_statement(sentence, kind, kept):
    assert is_statement(sentence, kind) is kept


def v1_pointers(topic: Topic, run) -> list[dict]:
    """What embedded-v1 returned: every sentence of an in-scope node that holds a keyword (as
    written: v1 knew no plurals, core/keywords.py)."""
    pattern = keyword_pattern(topic.extraction_policy.required_keywords or (), "exact")
    return [
        {"topic_id": topic.topic_id, "json_path": node.path, "verbatim_quote": text[s:e]}
        for node, text in in_scope_nodes(topic.extraction_policy, run, topic)
        for s, e in sentence_spans(text)
        if pattern is None or pattern.search(text[s:e])
    ]


def store_v1_answers(db: Path, topic_id: str) -> None:
    """Keep embedded-v1's answers beside the sync's, under v1's identity, as a vault synced by the
    previous release holds them."""
    with Vault.open(db) as vault:
        topic = vault.topics.topic(topic_id)
        versions = [RunVersion(r, v) for r, v in sorted(vault.runs.latest_versions().items())]
        runs = vault.runs.load_run_nodes(versions)
        answers = [(extraction_key("embedded-v1", topic, rv.version_id), rv, v1_pointers(topic, runs[rv])) for rv in versions]
        vault.extractions.store_extractions(topic_id, "embedded-v1", answers)


def scores(capsys, p: Project, topic_id: str, gold: Path) -> dict[str, dict]:
    results = run_json(capsys, *p.cli_args(), "eval", topic_id, "--gold", str(gold), "--extractors")
    return {r["extractor"]: r for r in results}


def test_on_the_sample_gold_precision_rises_and_recall_holds(tmp_path, capsys):
    p = sample_project(tmp_path / "sample")
    run_json(capsys, *p.sync_args(), "--no-recall")
    topics = ["nexus-server-sync", "storage-decisions"]
    figures = {}
    for t in topics:
        store_v1_answers(p.db, t)
        figures[t] = scores(capsys, p, t, p.root / "gold" / f"{t}.jsonl")
        assert set(figures[t]) == {"bricks", "embedded-v1", EXTRACTOR_VERSION}
        assert figures[t]["bricks"]["predicted"] == figures[t][EXTRACTOR_VERSION]["predicted"]

    def pooled(extractor: str) -> tuple[float, float]:
        """Exact precision and recall over both topics' spans (whole sentences: overlap is the same)."""
        hits = sum(figures[t][extractor]["exact_matches"] for t in topics)
        predicted = sum(figures[t][extractor]["predicted"] for t in topics)
        gold = sum(figures[t][extractor]["gold"] for t in topics)
        return hits / predicted, hits / gold

    (p1, r1), (p2, r2) = pooled("embedded-v1"), pooled(EXTRACTOR_VERSION)
    # Measured (docs/quality.md, "Sample gold"): 47 spans at 0.702 / 0.767 under v1, 38 at 0.868 / 0.767
    # under v2, 39 at 0.846 / 0.767 under v3: one gold sentence leans on the one before it ("That way
    # the manifest hash …") and is left out with the rest of its kind; since keywords match their
    # plurals (core/keywords.py), "parallel syncs must take turns" (gold) and "failed syncs" (gold
    # of team-rituals, not this topic) are kept too (v3 before: 37 at 0.865 / 0.744).
    assert (round(p1, 3), round(r1, 3)) == (0.702, 0.767)
    assert (round(p2, 3), round(r2, 3)) == (0.846, 0.767)
    for t in topics:
        v1, v2 = figures[t]["embedded-v1"], figures[t][EXTRACTOR_VERSION]
        # nexus-server-sync: 0.694 → 0.806 (0.828 before "failed syncs", team-rituals' gold, was read too).
        assert v2["overlap_precision"] >= v1["overlap_precision"] + 0.10
        assert v2["overlap_recall"] >= v1["overlap_recall"] - 0.05


def test_on_markdown_answers_headings_fragments_and_questions_stay_out(tmp_path, capsys):
    """Answers shaped like a chat assistant's (headings, bold lead-ins, tables, code, fragments,
    closing questions): precision +20 points or more, and the same recall."""
    p = Project(tmp_path / "md")
    shutil.copytree(MARKDOWN, p.root)
    run_json(capsys, *p.sync_args(), "--no-recall")
    store_v1_answers(p.db, "nightly-sync")
    figures = scores(capsys, p, "nightly-sync", p.root / "gold" / "nightly-sync.jsonl")
    v1, v2 = figures["embedded-v1"], figures[EXTRACTOR_VERSION]
    assert v2["overlap_precision"] >= v1["overlap_precision"] + 0.20
    assert v2["overlap_recall"] >= v1["overlap_recall"]
    assert v2["gold"] == 9 and v2["predicted"] == 8
    bricks = run_json(capsys, *p.cli_args(), "bricks", "nightly-sync")
    texts = [b["content"] for b in bricks]
    assert not [t for t in texts if t.endswith("?") or t.endswith(":") or t.startswith("|") or "\n" in t]


def test_pointers_of_markdown_answers_still_pass_the_gate_verbatim(tmp_path):
    from nexus_assets.gate.rules import validate_pointer
    from nexus_assets.ingest.formats.chatgpt import chatgpt_run
    from nexus_assets.topics.files import read_topic_file

    topic = read_topic_file(MARKDOWN / "topics" / "nightly-sync.yaml").topic
    document = json.loads((MARKDOWN / "runs" / "conversations.json").read_text(encoding="utf-8"))
    for run in map(chatgpt_run, document):
        for pointer in extract_embedded(topic, run):
            occurrence = validate_pointer(pointer, topic_id=topic.topic_id, run=run)
            assert occurrence.content == pointer["verbatim_quote"]
