"""What the offline extractor keeps is what a person keeps (issue 40 items 1 and 2): statements, not
chatter, labels, code or markup; about the topic, not merely holding a keyword; never the model's
private reasoning from an old Claude export, and its artifacts only for a topic that asks.

The figures on real exports are `benchmarks/bench_selection.py`'s (labelled set and provenance in
benchmarks/selection/); these tests pin the rules and their plumbing on text written here."""

from __future__ import annotations

import json

import pytest
import yaml

from nexus_assets.core.models import SourceFilter, Topic
from nexus_assets.core.paths import resolve_string
from nexus_assets.extract.backends import EmbeddedExtractor, StoredVectors
from nexus_assets.extract.embedded import candidate_pointers, is_statement
from nexus_assets.extract.relevance import relevance_scores
from nexus_assets.gate.rules import validate_pointer
from nexus_assets.ingest.formats.claude import ARTIFACT, THINKING, claude_run, tagged_regions
from nexus_assets.ingest.formats.nexus import nexus_run
from nexus_assets.embedding.embedder import MODEL, embed
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_nexus

# Real shapes of what the user found kept, re-written: each is not a statement.
NOT_STATEMENTS = [
    "Sure, I can help you plan your training for the marathon.",
    "The sync schedule is set out below.",
    "Good luck with your marathons!",
    "I hope this helps with your gardening business.",
    'Title: "The Pure Gardening Company Difference"',
    "Subject: Purchase Order Query for Gardening Services",
    "The Pure Gardening Company Difference",
    '<label for="inputTokens">Input tokens per month</label>',
    '{"btc": 43000, "eth": 2300, "sol": 95}',
    "const total = prices.reduce((a, b) => a + b, 0);",
    "if (sync.done) { publish(manifest); }",
    "This command will start a Docker container from your image.",
    "These settings tell Django to use PostgreSQL.",
    '"From Seed to Splendor: transforming outdoor spaces one garden at a time."',
    "💚 Green Thumb Diaries: we love gardens and so do our customers 🌿",
]
STATEMENTS = [
    "I have a marathon on September 10th and on the 29th of October 2023.",
    "At the moment, I charge customers £5 for a bag of garden waste.",
    "Keep the vault append-only, so a sync inserts rows and never deletes them.",
    "Pipeline stages: raw runs -> pointer extraction -> validated bricks -> resolved states -> manifest.",
    "Consider using a more robust database like PostgreSQL for production use.",
    "Week 11 (August 13): 16 miles",
]


@pytest.mark.parametrize("text", NOT_STATEMENTS)
def test_chatter_labels_code_markup_and_drafted_copy_are_not_statements(text):
    assert not is_statement(text)


@pytest.mark.parametrize("text", STATEMENTS)
def test_statements_stay_statements(text):
    assert is_statement(text)


def marathon_topic(**extra) -> Topic:
    return Topic.model_validate({
        "topic_id": "marathon-training",
        "display_name": "Marathon training",
        "extraction_policy": {
            "scope_description": "The marathon training plan - weekly runs, distances, paces, race dates, nutrition and recovery.",
            "required_keywords": ["marathon", "run", "running", "runs", "miles", "gardens"],
        },
        "state": "ACTIVE",
        **extra,
    })


def test_relevance_keeps_what_the_topic_is_about_not_a_keyword_in_passing():
    topic = marathon_topic()
    about = "I am running the Dublin marathon on the 29th of October and need 18 miles a week by August."
    passing = [
        "A running toilet wastes water and raises your utility bills.",
        "Send the invoice to 23 Pendleton Gardens, Blackfield, Southampton.",
        "It generates responses based on the data it was trained to run on.",
    ]
    scores = relevance_scores([about, *passing], topic, embed)
    assert scores[0] >= topic.min_relevance > max(scores[1:])
    # Rounded before the comparison, so float noise between runs of the model cannot flip it.
    assert all(s == round(s, 3) for s in scores)


def nexus_document(run_id: str, texts: list[str], title: str | None = None, start: str = "2026-03-01T00:00:00Z") -> dict:
    doc = {"run_id": run_id, "status": "CLOSED", "started_at": start,
           "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]}
    if title:
        doc["title"] = title
    return doc


def test_a_sync_keeps_the_relevant_statements_and_recall_finds_them_embedded(empty_project):
    empty_project.write_run("plan.json", nexus_document("run-plan", [
        "I am running the Dublin marathon on the 29th of October this year.",
        "Sure, I can help you plan your marathon training!",
        "A running toilet wastes water and raises your utility bills.",
        "Your long run should reach 20 miles three weeks before the marathon.",
    ]))
    empty_project.topics.mkdir(parents=True, exist_ok=True)
    (empty_project.topics / "marathon-training.yaml").write_text(yaml.safe_dump(marathon_topic().model_dump(mode="json")))
    assert run_nexus(*empty_project.sync_args(), "--no-recall").returncode == 0
    bricks = json.loads(run_nexus(*empty_project.cli_args(), "bricks", "marathon-training", "--json").stdout)
    assert [b["content"] for b in bricks] == [
        "I am running the Dublin marathon on the 29th of October this year.",
        "Your long run should reach 20 miles three weeks before the marathon.",
    ]
    with Vault.open(empty_project.db, read_only=True) as vault:
        # Each kept statement was embedded once, by the extractor: a sync without recall left the
        # vectors recall needs, and the irrelevant sentence left none.
        assert vault.recall.fingerprints_without_embedding("marathon-training", MODEL) == []
        assert vault.recall.embedding_count(MODEL) == 2


def test_sources_narrow_a_topic_to_the_conversations_it_is_about(empty_project):
    empty_project.write_run("chats/garden.json", nexus_document("run-garden", ["The marathon is on the 29th of October in Dublin."], title="Garden quotes"))
    empty_project.write_run("chats/race.json", nexus_document("run-race", ["The marathon is on the 10th of September in the New Forest."], title="Race plan"))
    empty_project.write_run("old/race.json", nexus_document("run-old", ["The marathon in 2019 was the Brighton marathon in April."], title="Race plan", start="2019-02-01T00:00:00Z"))
    topic = marathon_topic(sources={"titles": ["(?i)race"], "since": "2020-01-01"}).model_dump(mode="json")
    empty_project.topics.mkdir(parents=True, exist_ok=True)
    (empty_project.topics / "marathon-training.yaml").write_text(yaml.safe_dump(topic))
    assert run_nexus(*empty_project.sync_args(), "--no-recall").returncode == 0
    bricks = json.loads(run_nexus(*empty_project.cli_args(), "bricks", "marathon-training", "--json").stdout)
    assert [b["sources"][0]["run_id"] for b in bricks] == ["run-race"]


def test_a_source_filter_admits_by_file_title_run_and_date():
    f = SourceFilter(files=("chatgpt/*.zip",), titles=("(?i)garden",), since="2024-01-01", until="2024-12-31")
    assert f.admits("r", "/data/runs/chatgpt/export.zip", "My Garden", "2024-05-01")
    assert not f.admits("r", "/data/runs/claude/export.zip", "My Garden", "2024-05-01")
    assert not f.admits("r", "/data/runs/chatgpt/export.zip", "Marathon", "2024-05-01")
    assert not f.admits("r", "/data/runs/chatgpt/export.zip", "My Garden", "2025-01-01")
    assert not f.admits("r", "/data/runs/chatgpt/export.zip", "My Garden", None)
    assert SourceFilter(runs=("a",)).admits("a", None, None, None) and not SourceFilter(runs=("a",)).admits("b", None, None, None)
    with pytest.raises(ValueError, match="not a regular expression"):
        SourceFilter(titles=("(unclosed",))


# An old-shape Claude export (2024): no content blocks, the model's reasoning and artifacts inline.
THINKING_TEXT = (
    "<antThinking>The user wants a reusable schedule for the sync, which is substantial and self-contained, "
    "so I will create an artifact with a new identifier to maintain continuity.</antThinking>"
)
ARTIFACT_TEXT = (
    '<antArtifact identifier="sync-schedule" type="text/markdown" title="Sync schedule">\n'
    "The nightly sync runs at 03:00 UTC and compiles every active topic.\n"
    "The sync retries a failed topic once before it reports the failure.\n"
    "</antArtifact>"
)
OLD_CLAUDE = [{
    "uuid": "3c1d2a9e-0000-4000-8000-000000000001",
    "name": "Nightly sync schedule",
    "created_at": "2024-06-01T09:00:00.000000Z",
    "updated_at": "2024-06-01T09:05:00.000000Z",
    "account": {"uuid": "acc"},
    "chat_messages": [
        {"uuid": "m1", "sender": "human", "text": "When does the nightly sync run, and what does the sync do on a failure?",
         "created_at": "2024-06-01T09:00:00.000000Z", "attachments": [], "files": []},
        {"uuid": "m2", "sender": "assistant",
         "text": f"{THINKING_TEXT}\n\nThe sync schedule is set out below.\n\n{ARTIFACT_TEXT}\n\nThe nightly sync leaves the vault append-only.",
         "created_at": "2024-06-01T09:01:00.000000Z", "attachments": [], "files": []},
    ],
}]


def sync_topic(node_types: list[str] | None = None) -> Topic:
    policy = {"scope_description": "When and how the nightly sync runs, and what it does on a failure.", "required_keywords": ["sync"]}
    if node_types:
        policy["target_node_types"] = node_types
    return Topic.model_validate({"topic_id": "sync-schedule", "display_name": "The nightly sync", "extraction_policy": policy,
                                 "state": "ACTIVE", "min_relevance": 0})


def test_claude_tagged_regions_cover_thinking_and_artifacts():
    text = OLD_CLAUDE[0]["chat_messages"][1]["text"]
    regions = tagged_regions(text)
    assert [(text[s:e], kind) for s, e, kind in regions] == [(THINKING_TEXT, THINKING), (ARTIFACT_TEXT, ARTIFACT)]
    # An unclosed tag runs to the end, as Claude's viewer shows it.
    assert tagged_regions("Fine. <antThinking>still thinking") == [(6, 33, THINKING)]
    assert tagged_regions("No tags at all.") == []


def test_private_reasoning_never_becomes_a_brick_and_artifacts_only_when_asked():
    run = claude_run(OLD_CLAUDE[0])
    plain = [p["verbatim_quote"] for p in candidate_pointers(sync_topic(), run)]
    assert plain == ["The nightly sync leaves the vault append-only."]
    assert not any("antThinking" in q or "identifier" in q or "03:00" in q for q in plain)
    asked = [p["verbatim_quote"] for p in candidate_pointers(sync_topic(["user_message", "assistant_message", "artifact"]), run)]
    assert asked == [
        "The nightly sync runs at 03:00 UTC and compiles every active topic.",
        "The sync retries a failed topic once before it reports the failure.",
        "The nightly sync leaves the vault append-only.",
    ]


def test_the_gate_refuses_a_pointer_into_private_reasoning_and_types_an_artifact():
    run = claude_run(OLD_CLAUDE[0])
    path = "$['chat_messages'][1]['text']"
    thinking = validate_pointer({"topic_id": "sync-schedule", "json_path": path, "verbatim_quote": "maintain continuity"},
                                topic_id="sync-schedule", run=run)
    assert thinking.reason == "out_of_scope" and "antThinking" in thinking.detail
    quote = "The sync retries a failed topic once before it reports the failure."
    refused = validate_pointer({"topic_id": "sync-schedule", "json_path": path, "verbatim_quote": quote},
                               topic_id="sync-schedule", run=run)
    assert refused.reason == "out_of_scope" and "antArtifact" in refused.detail
    from nexus_assets.ingest.scope import Scope

    topic = sync_topic(["assistant_message", "artifact"])
    occurrence = validate_pointer({"topic_id": "sync-schedule", "json_path": path, "verbatim_quote": quote},
                                  topic_id="sync-schedule", run=run, scope=Scope.of(topic.extraction_policy, topic))
    assert occurrence.address.node_type == "artifact"
    node = resolve_string(OLD_CLAUDE[0], occurrence.address.json_path)[1]
    assert node[occurrence.address.start : occurrence.address.end] == quote == occurrence.content


def test_an_old_claude_export_syncs_without_any_reasoning_in_its_bricks(empty_project):
    empty_project.write_run("claude/conversations.json", OLD_CLAUDE)
    empty_project.topics.mkdir(parents=True, exist_ok=True)
    (empty_project.topics / "sync-schedule.yaml").write_text(yaml.safe_dump(sync_topic().model_dump(mode="json")))
    artifacts = sync_topic(["user_message", "assistant_message", "artifact"]).model_dump(mode="json")
    (empty_project.topics / "sync-artifacts.yaml").write_text(yaml.safe_dump({**artifacts, "topic_id": "sync-artifacts"}))
    assert run_nexus(*empty_project.sync_args(), "--no-recall").returncode == 0
    plain = json.loads(run_nexus(*empty_project.cli_args(), "bricks", "sync-schedule", "--json").stdout)
    assert [b["content"] for b in plain] == ["The nightly sync leaves the vault append-only."]
    with_artifacts = json.loads(run_nexus(*empty_project.cli_args(), "bricks", "sync-artifacts", "--json").stdout)
    assert [b["sources"][0]["node_type"] for b in with_artifacts] == ["artifact", "artifact", "assistant_message"]
    for brick in plain + with_artifacts:
        assert "antThinking" not in brick["content"] and "continuity" not in brick["content"]
        source = brick["sources"][0]
        node = resolve_string(OLD_CLAUDE[0], source["json_path"])[1]
        assert node[source["start"] : source["end"]] == brick["content"]


def test_the_extractor_stores_vectors_only_for_what_it_keeps(tmp_path):
    topic = marathon_topic()
    run = nexus_run({"run_id": "r", "status": "CLOSED", "messages": [
        {"role": "user", "content": "I run the Dublin marathon in October. A running toilet wastes water."}]})
    with Vault.open(tmp_path / "v.duckdb") as vault:
        extraction = EmbeddedExtractor(StoredVectors(vault.recall)).extract(topic, run)
        assert [p["verbatim_quote"] for p in extraction.pointers] == ["I run the Dublin marathon in October."]
        assert vault.recall.embedding_count(MODEL) == 1
