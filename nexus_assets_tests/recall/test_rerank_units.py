"""The reranker's tiers one by one (issue 51's mutation benchmark): the heuristic's score term by
term, the order of ties, and each tier's fall-through note, against a real HTTP server."""

from __future__ import annotations

import pytest

from nexus_assets.recall.rerank import WEIGHTS, Candidate, heuristic, rerank
from nexus_assets_tests.llm_server import FakeOpenAIServer


def candidate(brick: str, content: str, **fields) -> Candidate:
    base = {"topic_id": "t", "state": "FINAL", "similarity": 0.0}
    return Candidate(brick_id=brick * 64, content=content, **{**base, **fields})


def test_the_heuristic_score_is_its_weighted_terms():
    assert sum(WEIGHTS.values()) == pytest.approx(1.0)
    plain = candidate("a", "The vault lives in one file.", fused=0.5, similarity=0.4, recency=0.2)
    # fused 0.7×0.5, similarity 0.05×0.4, both query words 0.10×1, no phrase, FINAL 0.05×1, recency 0.05×0.2
    phrase = candidate("b", "Where is the VAULT  FILE kept?", state="IMPROVISE", similarity=-0.3, fused=0.0)
    # fused 0, similarity never below 0, both words, the phrase (case and spaces folded) 0.05, IMPROVISE 0.05×0.3
    unknown = candidate("c", "Nothing in common here.", state="SUPERSEDED", fused=1.0, similarity=1.0, recency=1.0)
    scored = heuristic("vault file", [plain, phrase, unknown])
    assert [c.score for c in scored] == [0.53, 0.165, 0.8]
    assert {c.reranker_used for c in scored} == {"heuristic"}
    assert heuristic("", [plain])[0].score == 0.35 + 0.02 + 0.05 + 0.01


def test_ties_go_to_the_higher_authority_then_the_brick_id():
    same = {"content": "Same text.", "fused": 0.5}
    ranked, notes = rerank("text", [candidate("b", authority=2, **same), candidate("c", authority=1, **same),
                                     candidate("a", authority=2, **same)])
    assert notes == []
    assert [c.brick_id[0] for c in ranked] == ["c", "a", "b"]


def test_no_candidates_ask_no_tier():
    with FakeOpenAIServer(api_key=None, models=None) as server:
        ranked, notes = rerank("q", [], {"NEXUS_RERANK_BASE_URL": server.base_url, "NEXUS_RERANK_MODEL": "m"})
        assert server.requests == []
    assert (ranked, notes) == ([], [])


def test_an_llm_reply_that_does_not_fit_falls_through_with_a_note():
    cands = [candidate("a", "One.", fused=0.9), candidate("b", "Two.", fused=0.1)]
    with FakeOpenAIServer(api_key=None, models=None, handler=lambda body: {"scores": [0.5]}) as server:
        # (The cross-encoder's fall-through loads torch: test_recall's tier test covers it.)
        env = {"NEXUS_RERANK_BASE_URL": server.base_url, "NEXUS_RERANK_MODEL": "m"}
        ranked, notes = rerank("q", cands, env)
        url = server.base_url
        assert len(server.requests) == 1
        body = server.requests[0]
        assert body["model"] == "m" and body["temperature"] == 0 and body["seed"] == 42
        assert "Query: q\nPassages:\n0: One.\n1: Two." == body["messages"][-1]["content"]
    assert notes == [f"LLM reranker at {url}: scores do not match the passages"]
    assert {c.reranker_used for c in ranked} == {"heuristic"}
    assert [c.brick_id[0] for c in ranked] == ["a", "b"]


def test_an_llm_tier_without_a_model_is_not_asked():
    with FakeOpenAIServer(api_key=None, models=None) as server:
        ranked, notes = rerank("q", [candidate("a", "One.")], {"NEXUS_RERANK_BASE_URL": server.base_url})
        assert server.requests == []
    assert notes == [] and ranked[0].reranker_used == "heuristic"
