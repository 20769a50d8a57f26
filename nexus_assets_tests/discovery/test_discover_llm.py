"""`nexus discover --extractor openai` against a real Chat Completions server on 127.0.0.1.

The model only suggests; every suggestion is validated and deduplicated, and the call is kept in
the audit trail and replayed from it.
"""

import json

import pytest

from nexus_assets.discovery.prompt import parse_topics_reply
from nexus_assets.discovery.step import CALL_TOPIC_ID
from nexus_assets.llm.client import ReplyNotJSON
from nexus_assets.topics.files import read_topic_file
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.llm_server import (
    DEFAULT_API_KEY,
    DEFAULT_MODEL,
    FakeOpenAIServer,
)
from nexus_assets_tests.project import Project

GOOD = {
    "topic_id": "Drift Detection",
    "display_name": "Drift detection",
    "scope_description": "How changed sources are noticed: checksums, stale bricks, verify.",
    "required_keywords": ["stale", "drift", "offsets", "teleportation"],
    "exclusion_criteria": ["Vendor talk"],
}
# Real words of one conversation only: an episode, not a subject people return to.
RARE = {"topic_id": "analysts", "display_name": "Analysts", "scope_description": "Who reads the exports.", "required_keywords": ["analyst"]}
SUGGESTIONS = [
    GOOD,
    RARE,
    {"topic_id": "nexus-server-sync", "display_name": "Sync", "scope_description": "Again.", "required_keywords": ["hash"]},
    {"topic_id": "storage-again", "display_name": "Storage", "scope_description": "Where data lives.", "required_keywords": ["DuckDB", "vault"]},
    {"topic_id": "no-scope", "display_name": "No scope", "required_keywords": ["sealing"]},
    {"topic_id": "invented", "display_name": "Invented", "scope_description": "x", "required_keywords": ["blockchain"]},
    "not an object",
]
CHATTY = "Sure! Here are my suggestions.\n```json\n" + json.dumps({"topics": SUGGESTIONS}) + "\n```\nHope this helps."


@pytest.fixture
def server(monkeypatch):
    with FakeOpenAIServer() as s:
        monkeypatch.setenv("OPENAI_BASE_URL", s.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
        monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
        yield s


def discover(capsys, p: Project, expect: int = 0):
    return run_json(
        capsys, *p.cli_args(), "discover", "--extractor", "openai", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics), expect=expect
    )


def test_the_model_suggests_and_only_valid_new_topics_are_written(project: Project, capsys, server: FakeOpenAIServer):
    server.script(CHATTY)
    report = discover(capsys, project)
    assert report["extractor"] == "openai" and report["llm_call"]["cached"] is False
    (written,) = report["written"]
    assert written["topic_id"] == "drift-detection"
    topic = read_topic_file(project.topics / "drift-detection.yaml").topic
    assert topic.state == "DRAFT" and topic.display_name == "Drift detection"
    # A keyword that occurs in no run is dropped; the rest are kept as the model gave them.
    assert topic.extraction_policy.required_keywords == ("stale", "drift", "offsets")
    # Keywords match their plurals too (core/keywords.py): the Claude export's "a brick's source drifts" is a fourth.
    assert len(written["evidence"]) == 4
    assert topic.extraction_policy.exclusion_criteria == ("Vendor talk",)
    reasons = {s["topic_id"]: s["reason"] for s in report["skipped"]}
    assert reasons["nexus-server-sync"] == "topic 'nexus-server-sync' already exists"
    assert reasons["storage-again"] == "repeats the keywords of topic 'storage-decisions'"
    assert reasons["no-scope"] == "no scope_description"
    assert "occur in the recent runs" in reasons["invented"]
    assert reasons["analysts"] == "its keywords occur in 1 of 8 recent conversations; a topic needs at least 3"
    assert any(r.startswith("not an object") for r in reasons.values())

    (request,) = server.requests
    assert request["temperature"] == 0
    assert request["response_format"]["json_schema"]["name"] == "topics"
    sent = json.loads(request["messages"][-1]["content"])
    assert {t["topic_id"] for t in sent["existing_topics"]} == {"nexus-server-sync", "storage-decisions", "team-rituals"}
    assert sent["conversations"] and all(c["messages"] for c in sent["conversations"])

    with Vault.open(project.db, read_only=True) as v:
        (call,) = v.llm_calls.calls(CALL_TOPIC_ID)
        assert call["status"] == "ok" and call["raw_response"] == CHATTY and call["prompt_version"] == "discover-v1"
        assert v.topic_state("drift-detection") == "DRAFT"


def test_a_second_run_writes_nothing_and_a_repeat_is_replayed(project: Project, capsys, server: FakeOpenAIServer):
    server.handler = lambda body: CHATTY
    discover(capsys, project)
    files = {p.name: p.read_bytes() for p in project.topics.glob("*.yaml")}
    again = discover(capsys, project)
    assert again["written"] == []
    # What it read and what a suggestion needs (issue 59 item 4): the same bar as the offline proposer's.
    assert again["runs_covered"] == 8 and again["strongest"] is None
    assert again["needs"]["min_conversations"] == 3 and "at least 3 of the 8 conversations" in again["needs"]["rule"]
    assert {s["topic_id"]: s["reason"] for s in again["skipped"]}["drift-detection"] == "topic 'drift-detection' already exists"
    assert {p.name: p.read_bytes() for p in project.topics.glob("*.yaml")} == files
    sent = server.request_count
    third = discover(capsys, project)
    # The prompt is the same as the second one: replayed from the vault, nothing sent.
    assert third["llm_call"]["cached"] is True and server.request_count == sent


def test_an_unusable_reply_writes_nothing_and_is_recorded(project: Project, capsys, server: FakeOpenAIServer):
    server.script("I would rather not say.")
    code, _, err = run_cli(
        capsys, *project.cli_args(), "discover", "--extractor", "openai", "--runs-dir", str(project.runs), "--topics-dir", str(project.topics)
    )
    assert code == 1 and "holds no topics" in err
    assert sorted(p.stem for p in project.topics.glob("*.yaml")) == ["nexus-server-sync", "storage-decisions", "team-rituals"]
    with Vault.open(project.db, read_only=True) as v:
        (call,) = v.llm_calls.calls(CALL_TOPIC_ID)
        assert call["status"] == "failed"


def test_missing_llm_settings_are_bad_usage(project: Project, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("NEXUS_LLM_MODEL", raising=False)
    code, _, err = run_cli(capsys, *project.cli_args(), "discover", "--extractor", "openai", "--runs-dir", str(project.runs))
    assert code == 2 and "OPENAI_BASE_URL" in err


@pytest.mark.parametrize(
    "text, count",
    [
        ('{"topics": []}', 0),
        ('<think>hmm {"topics": 1}</think>{"topics": [{"topic_id": "a"}]}', 1),
        ('Here: {"topics": [{"topic_id": "a"}, {"topic_id": "b"}]} done', 2),
        ('[{"topic_id": "a"}]', 1),
        ('{"topic_id": "a", "scope_description": "x"}', 1),
    ],
)
def test_parse_topics_reply_accepts(text, count):
    assert len(parse_topics_reply(text)) == count


@pytest.mark.parametrize("text", [None, "", "no json here", '{"extracted_pointers": []}'])
def test_parse_topics_reply_rejects(text):
    with pytest.raises(ReplyNotJSON):
        parse_topics_reply(text)


def test_the_model_gets_a_handful_written_however_many_it_suggests(tmp_path, capsys, server: FakeOpenAIServer):
    """A model that suggests eight topics, all with evidence, gets five files, in its order."""
    from nexus_assets_tests.generated_export import FILLER, THEMES, generate_export
    from nexus_assets_tests.project import sample_project

    project = sample_project(tmp_path / "proj")
    generate_export(project.runs)
    suggestions = [
        {"topic_id": name, "display_name": name.title(), "scope_description": f"All about {name}.", "required_keywords": list(vocab[:2])}
        for name, vocab in THEMES.items()
    ] + [
        {"topic_id": f"everyday-{w}", "display_name": w, "scope_description": "Everyday words.", "required_keywords": [w]}
        for w in FILLER[:3]
    ]
    server.script(json.dumps({"topics": suggestions}))
    report = discover(capsys, project)
    assert [w["topic_id"] for w in report["written"]] == list(THEMES)
    assert all(len(w["evidence"]) >= 6 for w in report["written"])
