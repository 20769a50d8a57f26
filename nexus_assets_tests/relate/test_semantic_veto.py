"""The semantic veto (docs/conflicts.md, Tier 2), against a real Chat Completions server on 127.0.0.1.

Off unless a topic sets `semantic_veto: true` and an LLM is configured. It is asked only about a
text that would become a new brick and has related bricks; it can keep or discard, never edit. A
discard is a rejection with reason `semantic_veto`, replayed from the stored call without a
request; an unsure, unreadable or failed answer keeps the brick.
"""

from __future__ import annotations

import json

import pytest
import yaml

from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.llm_server import (
    DEFAULT_API_KEY,
    DEFAULT_MODEL,
    ErrorReply,
    FakeOpenAIServer,
)
from nexus_assets_tests.project import Project, nexus_run

TOPIC = "outages"
FIRST = "The API server is down."
AGAIN = "The API server is currently down."
SLOW = "The API server is down right now."
OTHER = "The API docs moved to the wiki."


def write_topic(p: Project, *, veto: bool = True) -> None:
    p.topics.mkdir(parents=True, exist_ok=True)
    body = {
        "topic_id": TOPIC,
        "display_name": "Outages",
        "extraction_policy": {"scope_description": "What is down and when.", "required_keywords": ["api"]},
        "state": "ACTIVE",
        "related_threshold": 0.8,
        **({"semantic_veto": True} if veto else {}),
    }
    (p.topics / f"{TOPIC}.yaml").write_text(yaml.safe_dump(body), encoding="utf-8")


def asked(body: dict) -> str:
    """The new statement a veto request asks about."""
    user = body["messages"][-1]["content"]
    return json.loads(user.split("New statement:\n", 1)[1].split("\n", 1)[0])


@pytest.fixture
def project(tmp_path, monkeypatch) -> Project:
    p = Project(tmp_path / "proj")
    write_topic(p)
    p.write_run("a.json", nexus_run("run-a", [("user", FIRST)]))
    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
    return p


def contents(capsys, p: Project) -> list[str]:
    return sorted(b["content"] for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC))


def vetoed(capsys, p: Project) -> list[dict]:
    return [r for r in run_json(capsys, *p.cli_args(), "rejections", TOPIC) if r["reason"] == "semantic_veto"]


def test_a_discard_is_a_rejection_and_is_replayed_without_a_request(project: Project, capsys, monkeypatch):
    p = project
    with FakeOpenAIServer(handler=lambda body: {"verdict": "discard", "reason": "already said"}) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run_json(capsys, *p.sync_args())
        assert server.request_count == 0, "the first text has nothing related: no question"
        p.write_run("b.json", nexus_run("run-b", [("user", AGAIN)], start="2026-01-02T00:00:00Z"))
        (result,) = run_json(capsys, *p.sync_args())
        assert result["success"]
        assert server.request_count == 1 and asked(server.requests[0]) == AGAIN
        assert FIRST in server.requests[0]["messages"][-1]["content"], "the model sees the related brick"
        assert contents(capsys, p) == [FIRST]
        (rejection,) = vetoed(capsys, p)
        assert (rejection["run_id"], rejection["verbatim_quote"]) == ("run-b", AGAIN)
        calls = [c for c in run_json(capsys, *p.cli_args(), "calls", "--topic", TOPIC) if c["prompt_version"] == "veto-v1"]
        assert len(calls) == 1 and calls[0]["status"] == "ok"

        # A new version of run-b holds the same text: the question is the same, its answer replays.
        p.write_run("b.json", nexus_run("run-b", [("user", AGAIN), ("user", "Lunch is at noon.")], start="2026-01-02T00:00:00Z"))
        run_json(capsys, *p.sync_args())
        assert server.request_count == 1, "the discard was replayed from the stored call"
        assert contents(capsys, p) == [FIRST]
        assert len(vetoed(capsys, p)) == 2


def test_unsure_unreadable_and_failed_answers_keep_the_brick(project: Project, capsys, monkeypatch):
    p = project

    def model(body: dict):
        said = asked(body)
        if said == AGAIN:
            return {"verdict": "unsure"}
        if said == SLOW:
            return "I would rather not say."  # no verdict at all: a failed call
        return ErrorReply(400, "the model is overloaded")  # refused: a failed call

    with FakeOpenAIServer(handler=model) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run_json(capsys, *p.sync_args())
        p.write_run("b.json", nexus_run("run-b", [("user", AGAIN), ("user", SLOW), ("user", "The API server is down again today.")], start="2026-01-02T00:00:00Z"))
        (result,) = run_json(capsys, *p.sync_args())
        assert result["success"]
        assert {asked(b) for b in server.requests} == {AGAIN, SLOW, "The API server is down again today."}
    assert contents(capsys, p) == sorted([FIRST, AGAIN, SLOW, "The API server is down again today."])
    assert vetoed(capsys, p) == []
    calls = [c for c in run_json(capsys, *p.cli_args(), "calls", "--topic", TOPIC) if c["prompt_version"] == "veto-v1"]
    assert sorted(c["status"] for c in calls) == ["failed", "failed", "ok"]


def test_without_an_llm_or_with_the_veto_off_nothing_changes(tmp_path, capsys, monkeypatch):
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "NEXUS_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    outcomes = {}
    for veto in (True, False):
        p = Project(tmp_path / f"veto-{veto}")
        write_topic(p, veto=veto)
        p.write_run("a.json", nexus_run("run-a", [("user", FIRST), ("user", AGAIN), ("user", OTHER)]))
        code, _, err = run_cli(capsys, *p.sync_args(), "--json")
        assert code == 0, err
        if veto:
            assert "semantic_veto is on but no LLM is configured" in err
        manifest = run_json(capsys, *p.cli_args(), "manifest", TOPIC)
        outcomes[veto] = (manifest["manifest_hash"], contents(capsys, p), vetoed(capsys, p))
    assert outcomes[True] == outcomes[False]
    assert outcomes[True][2] == []


def test_nexus_plan_shows_what_the_veto_may_cost(project: Project, capsys, monkeypatch):
    p = project
    monkeypatch.setenv("NEXUS_PRICE_IN_PER_MTOK", "0.15")
    monkeypatch.setenv("NEXUS_PRICE_OUT_PER_MTOK", "0.60")
    p.write_run("b.json", nexus_run("run-b", [("user", AGAIN), ("user", OTHER)]))
    plan = run_json(capsys, *p.cli_args(), "plan", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics))
    (veto,) = plan["semantic_veto"]
    # Offline, the embedded extractor's new texts are known: a ceiling on the questions.
    assert veto["veto_questions_at_most"] == 3 and veto["veto_answers_stored"] == 0
    assert veto["veto_cost_per_question_usd"] > 0 and veto["veto_cost_at_most_usd"] >= 3 * veto["veto_cost_per_question_usd"] * 0.5
    code, out, _ = run_cli(capsys, *p.cli_args(), "plan", "--runs-dir", str(p.runs), "--topics-dir", str(p.topics))
    assert code == 0 and f"{TOPIC}: semantic veto: at most 3 questions" in out
