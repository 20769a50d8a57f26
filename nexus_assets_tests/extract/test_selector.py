"""embedded-v4, the trained selector (issue 49 items 2 and 3): its features are pure functions of the
text and rounded scores, its weights file fails loudly and harmlessly, its conversation scope keeps an
off-topic conversation out unless the topic names it, its answers are the same however often and in
whatever batches they are computed, and `nexus explain` says why a sentence was or was not kept.
The figures on real data are `benchmarks/bench_selection.py --lopo`'s (leave one person out)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import yaml

from nexus_assets.core.models import Topic
from nexus_assets.extract.backends import (
    newest_selector,
    EmbeddedExtractor,
    SelectorExtractor,
    StoredVectors,
    embedded_extractor,
)
from nexus_assets.extract.selector.features import FORM, SCALARS, Context, form_features, restatement, scalar_features
from nexus_assets.extract.selector.model import WEIGHTS, SelectorWeightsError, load_selector
from nexus_assets.extract.selector.select import CONVERSATION_BAR, cheap_reason
from nexus_assets.ingest.formats.nexus import nexus_run
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_nexus


def form(text: str) -> dict[str, float]:
    return dict(zip(FORM, form_features(text)))


def test_form_features_name_narration_requirements_questions_and_tool_output():
    assert form("I'll create a new Next.js project with the app router.")["narration"] == 1.0
    assert form("Now update the config to use the new port.")["narration"] == 1.0
    assert form("Keep the retry count at three, not five.")["imperative"] == 1.0
    assert form("The API only gives hourly data, so we cache it for an hour.")["narration"] == 0.0
    assert form("Todos have been modified successfully.")["tool_output"] == 1.0
    assert form("   74→- **useTodos**: a hook")["tool_output"] == 1.0
    assert form("Which port should the server use?")["question"] == 1.0
    assert form("The race is on 2023-10-29 in Dublin.")["date"] == 1.0
    assert form("I charge customers £5 for a bag.")["first_person"] == 1.0
    assert form("const total = prices.reduce((a, b) => a + b, 0);")["code"] == 1.0


def test_a_restatement_of_the_previous_turn_scores_high_and_new_text_low():
    request = "Please make the retry count three and log every failed attempt."
    assert restatement("I made the retry count three and every failed attempt is logged.", request) >= 0.6
    assert restatement("The scheduler runs nightly at two in the morning.", request) == 0.0
    assert restatement("Anything at all.", None) == 0.0


def test_scalar_features_are_pure_and_in_the_declared_order():
    ctx = Context(0.412, 0.5, 0.3, True, 0.75, 0.2, 1, 4, 3, 10, "assistant_message", "prose", 0.1, None, 0.2)
    row = scalar_features("The vault keeps every version.", ctx)
    assert len(row) == len(SCALARS)
    assert row == scalar_features("The vault keeps every version.", ctx)
    named = dict(zip(SCALARS, row))
    assert named["relevance"] == 0.412 and named["conversation_relevance"] == 0.3
    assert named["has_keep_examples"] == 0.0 and named["drop_example"] == 0.2 and named["has_drop_examples"] == 1.0
    assert named["node_assistant_message"] == 1.0 and named["node_user_message"] == 0.0


@pytest.mark.parametrize(
    ("text", "kind", "reason"),
    [
        ("x = 1", "code", "form: code block"),
        ("| a | b |", "table", "form: table row"),
        ("Setup", "heading", "form: heading"),
        ("Which database should we use?", "prose", "form: question"),
        ("Done.", "prose", "form: fragment (under three words)"),
        ("\x1b[32mPASS\x1b[0m src/app.test.ts", "prose", "form: tool output (terminal colour codes)"),
        ("Keep the retry count at three, not five.", "prose", None),
    ],
)
def test_cheap_form_rules_decide_before_anything_is_embedded(text, kind, reason):
    assert cheap_reason(text, kind) == reason


def test_the_extractor_of_each_version_is_given_by_name():
    assert newest_selector() == "embedded-v6"  # v3 and its taught fit; the trained selectors stay opt-in (selector/CARD.md)
    assert isinstance(embedded_extractor("embedded-v3"), EmbeddedExtractor)
    assert embedded_extractor("embedded-v3").identity == "embedded-v3"
    v4 = embedded_extractor("embedded-v4")
    assert isinstance(v4, SelectorExtractor) and v4.identity == "embedded-v4"
    assert v4.legacy_identities == ()  # a topic keeps its recorded selector; --reselect really selects again
    with pytest.raises(ValueError, match="selector 'embedded-v9' is not one this release runs"):
        embedded_extractor("embedded-v9")


def test_the_shipped_weights_are_small_and_numpy_only():
    assert WEIGHTS.stat().st_size <= 5 * 1024 * 1024
    selector = load_selector()
    assert 0.0 < selector.threshold < 1.0
    scores = selector.scores(np.zeros((2, 384)), np.zeros((2, len(SCALARS))))
    assert scores.shape == (2,) and np.all((scores > 0) & (scores < 1))


@pytest.mark.parametrize("content", [None, b"not a zip at all", b"PK\x03\x04broken"])
def test_a_missing_or_corrupt_weights_file_is_one_error_naming_it(tmp_path, content):
    path = tmp_path / "weights.npz"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SelectorWeightsError, match=f"selector weights {path}"):
        load_selector(path)


def test_weights_for_other_features_are_refused(tmp_path):
    path = tmp_path / "weights.npz"
    with np.load(WEIGHTS) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["scalars"] = arrays["scalars"][:-1]
    np.savez(path, **arrays)
    with pytest.raises(SelectorWeightsError, match="trained on other features"):
        load_selector(path)


def garden_topic(**extra) -> Topic:
    return Topic.model_validate({
        "topic_id": "garden-business",
        "display_name": "My gardening business",
        "extraction_policy": {
            "scope_description": "How I run my gardening business: prices I charge customers, garden waste, lawn mowing rounds, quotes and invoices.",
            "target_node_types": ["user_message", "assistant_message"],
        },
        "state": "ACTIVE",
        **extra,
    })


def document(run_id: str, texts: list[str], title: str) -> dict:
    return {"run_id": run_id, "status": "CLOSED", "started_at": "2026-03-01T00:00:00Z", "title": title,
            "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]}


GARDEN = document("run-garden", [
    "I charge customers £5 for a bag of garden waste and £25 for a lawn mowing visit.",
    "Your prices are in line with other gardeners. Raising the lawn visit to £28 in spring is reasonable.",
], "Garden waste prices")
OFF_TOPIC = document("run-tax", [
    "How do I fix a segmentation fault in my C program that reads a binary file?",
    "The pointer is freed twice. Set it to NULL after free and run valgrind to find the second free.",
], "Segfault in C reader")


def test_a_conversation_not_about_the_topic_gives_nothing_unless_the_topic_names_it():
    extractor = embedded_extractor("embedded-v4")
    runs = [nexus_run(GARDEN), nexus_run(OFF_TOPIC)]
    readings = {r.run_id: r for r in extractor.read(garden_topic(), runs)}
    off = readings["run-tax"]
    assert off.conversation_relevance < CONVERSATION_BAR <= readings["run-garden"].conversation_relevance
    assert off.conversation_relevance == round(off.conversation_relevance, 3)
    assert off.candidates and not any(c.keep for c in off.candidates)
    assert all(c.reason.startswith(("conversation: relevance", "form: ")) for c in off.candidates)
    assert sum(c.reason.startswith("conversation") for c in off.candidates) == 2  # the answer's two sentences; the question is form
    # Named by the topic's sources: the conversation scope does not apply, the model judges each sentence.
    named = garden_topic(sources={"runs": ["run-tax"]})
    (reading,) = extractor.read(named, [nexus_run(OFF_TOPIC)])
    assert all(c.reason is None or not c.reason.startswith("conversation") for c in reading.candidates)
    assert any(c.score is not None for c in reading.candidates)


def test_answers_are_the_same_whatever_the_batch_and_however_often():
    topic = garden_topic()
    runs = [nexus_run(GARDEN), nexus_run(OFF_TOPIC)]
    together = embedded_extractor("embedded-v4").extract_runs(topic, runs)
    apart = {r.run_id: embedded_extractor("embedded-v4").extract_runs(topic, [r])[r.run_id] for r in reversed(runs)}
    assert {k: json.dumps(v.pointers) for k, v in together.items()} == {k: json.dumps(v.pointers) for k, v in apart.items()}
    for p in together["run-garden"].pointers:
        assert p["why"]["score"] == round(p["why"]["score"], 3)
        assert p["why"]["keep"] is True


V4 = {"NEXUS_EMBEDDED_EXTRACTOR": "embedded-v4"}  # the trained selector is opt-in for now


def _project(empty_project, topic: Topic) -> None:
    empty_project.write_run("garden.json", GARDEN)
    empty_project.write_run("tax.json", OFF_TOPIC)
    (empty_project.topics / f"{topic.topic_id}.yaml").write_text(yaml.safe_dump(topic.model_dump(mode="json")))


def test_two_syncs_into_two_vaults_give_byte_identical_manifests(empty_project, tmp_path):
    _project(empty_project, garden_topic())
    assert run_nexus(*empty_project.sync_args(), "--no-recall", env=V4).returncode == 0
    other = tmp_path / "other.duckdb"
    args = [a if a != str(empty_project.db) else str(other) for a in empty_project.sync_args()]
    assert run_nexus(*args, "--no-recall", env=V4).returncode == 0
    first = json.loads(run_nexus(*empty_project.cli_args(), "manifest", "garden-business", "--json").stdout)
    second = json.loads(run_nexus("--db", str(other), "manifest", "garden-business", "--json").stdout)
    assert first == second and first["bricks"]


def test_a_corrupt_weights_file_fails_the_sync_with_one_line_and_changes_nothing(empty_project, tmp_path):
    _project(empty_project, garden_topic())
    assert run_nexus(*empty_project.sync_args(), "--no-recall", env=V4).returncode == 0
    before = run_nexus(*empty_project.cli_args(), "manifest", "garden-business", "--json").stdout
    bad = tmp_path / "weights.npz"
    bad.write_bytes(b"corrupt")
    empty_project.write_run("more.json", document("run-more", ["I charge £40 to trim a hedge in a front garden."], "Hedge prices"))
    failed = run_nexus(*empty_project.sync_args(), "--no-recall", env={**V4, "NEXUS_SELECTOR_WEIGHTS": str(bad)})
    assert failed.returncode != 0
    assert f"selector weights {bad}" in failed.stderr + (failed.stdout or "")
    assert run_nexus(*empty_project.cli_args(), "manifest", "garden-business", "--json").stdout == before


def test_explain_says_why_a_brick_was_kept_and_why_sentences_were_not(empty_project):
    _project(empty_project, garden_topic(examples={"keep": ["I charge £30 to mow a large lawn."], "drop": ["Thanks, that helps!"]}))
    assert run_nexus(*empty_project.sync_args(), "--no-recall", env=V4).returncode == 0
    bricks = json.loads(run_nexus(*empty_project.cli_args(), "bricks", "garden-business", "--json").stdout)
    assert bricks, "the garden conversation gives at least one brick"
    explained = json.loads(run_nexus(*empty_project.cli_args(), "explain", bricks[0]["brick_id"], "--json").stdout)
    assert explained["extractor"] == "embedded-v4"
    assert explained["decision"]["keep"] is True and explained["decision"]["score"] >= explained["threshold"]
    assert explained["decision"]["conversation_relevance"] >= CONVERSATION_BAR
    assert explained["nearest_keep_example"]["text"] == "I charge £30 to mow a large lawn."
    text = run_nexus(*empty_project.cli_args(), "explain", bricks[0]["brick_id"][:12]).stdout
    assert "kept by embedded-v4" in text and "conversation" in text
    off = json.loads(run_nexus(*empty_project.cli_args(), "explain", "--run", "run-tax", "--json").stdout)
    (entry,) = off["topics"]
    assert entry["conversation_relevance"] < CONVERSATION_BAR
    assert entry["sentences"] and not any(s["keep"] for s in entry["sentences"])
    assert {s["reason"].split(":")[0] for s in entry["sentences"]} == {"conversation", "form"}
    node = "$['messages'][0]['content']"
    one = json.loads(run_nexus(*empty_project.cli_args(), "explain", "--run", "run-garden", "--node", node, "--json").stdout)
    assert {s["json_path"] for s in one["topics"][0]["sentences"]} == {node}
    shown = run_nexus(*empty_project.cli_args(), "explain", "--run", "run-tax").stdout
    assert "not kept:" in shown and "conversation" in shown and "no rejections" not in shown
    missing = run_nexus(*empty_project.cli_args(), "explain", "--run", "run-nope")
    assert missing.returncode == 2 and "no run 'run-nope'" in missing.stderr
