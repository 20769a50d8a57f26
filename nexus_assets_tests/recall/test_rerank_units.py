"""The reranker's tiers one by one (issue 51's mutation benchmark): the heuristic's score term by
term, the order of ties, and each tier's fall-through note, against a real HTTP server."""

from __future__ import annotations

import pytest

from nexus_assets.recall.rerank import WEIGHTS, Candidate, heuristic, rerank
from nexus_assets_tests.llm_server import FakeOpenAIServer


def candidate(brick: str, content: str, **fields) -> Candidate:
    base = {"topic_id": "t", "state": "FINAL", "similarity": 0.0}
    return Candidate(brick_id=brick * 64, content=content, **{**base, **fields})


def test_the_heuristic_score_is_the_fused_rank_scaled_by_evidence_plus_its_small_terms():
    assert sum(WEIGHTS.values()) == pytest.approx(1.0)
    plain = candidate("a", "The vault lives in one file.", fused=0.5, evidence=0.6, recency=0.2)
    # 0.96 × 0.5 × (0.5 + 0.5 × 0.6), FINAL 0.02 × 1, no phrase, recency 0.01 × 0.2
    phrase = candidate("b", "Where is the VAULT  FILE kept?", state="IMPROVISE", evidence=1.0, fused=0.0)
    # no fused rank, so nothing of the evidence; IMPROVISE 0.02 × 0.3, the phrase (case and spaces folded) 0.01
    unknown = candidate("c", "Nothing in common here.", state="SUPERSEDED", fused=1.0, evidence=0.0, recency=1.0)
    # 0.96 × 1 × 0.5, no state weight, recency 0.01
    scored = heuristic("vault file", [plain, phrase, unknown])
    assert [c.score for c in scored] == [0.406, 0.016, 0.49]
    assert {c.reranker_used for c in scored} == {"heuristic"}
    assert heuristic("", [plain])[0].score == pytest.approx(0.96 * 0.5 * 0.8 + 0.02 + 0.01 * 0.2)


def test_results_of_one_message_are_spread_out():
    first, second, third, other = (candidate(x, "Text.", fused=f, evidence=1.0) for x, f in (("a", 1.0), ("b", 0.98), ("c", 0.96), ("d", 0.9)))
    messages = {first.brick_id: "m", second.brick_id: "m", third.brick_id: "m", other.brick_id: "n"}
    ranked, _ = rerank("text", [first, second, third, other], None, messages)
    assert [c.brick_id[0] for c in ranked] == ["a", "d", "b", "c"], "the second and third of one message keep 0.7 and 0.49 of their score"
    plain, _ = rerank("text", [first, second, third, other])
    assert [c.brick_id[0] for c in plain] == ["a", "b", "c", "d"], "without messages nothing is spread"


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


def test_a_question_counts_half_of_what_a_statement_does():
    asked, said = candidate("a", "How often should I feed it?", fused=1.0, evidence=1.0), candidate("b", "Feed it weekly.", fused=1.0, evidence=1.0)
    q, s = heuristic("feed", [asked, said])
    # both say the phrase "feed" (0.01) and are FINAL (0.02)
    assert q.score == pytest.approx(0.96 * 0.5 + 0.03) and s.score == pytest.approx(0.96 + 0.03)
