"""Tiered reranking (docs/recall.md): LLM (an OpenAI-compatible endpoint) → cross-encoder (a local
model path; it needs the `torch` extra) → heuristic (always there). A tier that is not configured,
not installed or fails falls through to the next; every result says which tier ranked it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Mapping

STATE_WEIGHT = {"FINAL": 1.0, "FORMING": 0.6, "IMPROVISE": 0.3}


@dataclass(frozen=True)
class Candidate:
    brick_id: str
    topic_id: str
    content: str
    state: str
    similarity: float
    authority: int = 3
    recency: float = 0.0  # 0 oldest … 1 newest ingestion among the candidates
    fused: float = 0.0  # the hybrid ranking's fused score, 1.0 = first in every ranking (service.py)
    evidence: float = 0.0  # how well the text answers the query by itself, in [0, 1] (evidence.py)
    kind: str = "brick"  # or "passage": a sentence of the record
    score: float = 0.0
    reranker_used: str = ""


class RerankFailed(RuntimeError):
    pass


# The heuristic's score (in [0, 1]): the fused hybrid rank, scaled by the absolute evidence
# (`evidence.py`: the query's content words said, the dense similarity on its model's scale), with a
# little of the state (a note's prior over the record), the exact phrase and recency. Set on LoCoMo
# (benchmarks/bench_locomo.py, hit@10 over the shortlist): the fused rank alone 0.708; scaled by
# (0.5 + 0.5 x evidence) 0.708 there and 0.681 against 0.661 before the fusion's weights were set;
# evidence added to it instead (0.45 + 0.45) 0.591. The fused rank says nothing absolute (the first
# result of any query is near 1): the evidence factor is what makes the score, and so the
# confidence, low for a question the vault cannot answer.
EVIDENCE_FLOOR = 0.5
# A question answers nothing by itself (the sentence after it may): its ranked term counts half
# (LoCoMo hit@10 0.706 -> 0.724; any factor from 0.5 down gave the same).
QUESTION_FACTOR = 0.5
_QUESTION_END = re.compile(r"[?？؟⁇⁈][\"'”’»)\]}*_`」』）】\s]*$")
WEIGHTS = {"ranked": 0.96, "state": 0.02, "phrase": 0.01, "recency": 0.01}
# The second result said in one message counts this much of its score, the third this squared
# (LoCoMo hit@10 0.705 with no spreading, 0.716 at 0.7): ten results show more than three messages.
SPREAD = 0.7


def heuristic(query: str, candidates: list[Candidate]) -> list[Candidate]:
    """The fused rank times the evidence factor (halved for a question), plus state (FINAL above
    IMPROVISE; a passage has none), the exact phrase and recency."""
    phrase = " ".join(query.lower().split())
    wt = WEIGHTS
    out = []
    for c in candidates:
        has_phrase = 1.0 if phrase and phrase in " ".join(c.content.lower().split()) else 0.0
        ranked = c.fused * (EVIDENCE_FLOOR + (1 - EVIDENCE_FLOOR) * c.evidence)
        if _QUESTION_END.search(c.content):
            ranked *= QUESTION_FACTOR
        score = (wt["ranked"] * ranked + wt["state"] * STATE_WEIGHT.get(c.state, 0.0) + wt["phrase"] * has_phrase
                 + wt["recency"] * c.recency)
        out.append(replace(c, score=round(score, 6), reranker_used="heuristic"))
    return out


def spread(ranked: list[Candidate], messages: Mapping[str, str | None]) -> list[Candidate]:
    """The n-th candidate said in one message keeps SPREAD**(n-1) of its score (the heuristic tier
    only), then all are ranked again: one long message does not fill the list."""
    seen: dict[str, int] = {}
    out = []
    for c in ranked:
        m = messages.get(c.brick_id)
        n = seen.get(m, 0) if m is not None else 0
        if m is not None:
            seen[m] = n + 1
        out.append(replace(c, score=round(c.score * SPREAD ** n, 6)) if n else c)
    return out


def cross_encoder(query: str, candidates: list[Candidate], model_path: str) -> list[Candidate]:
    try:
        import torch
        from sentence_transformers import CrossEncoder

        torch.manual_seed(42)  # deterministic scores for identical inputs
        model = CrossEncoder(model_path, device="cpu")
        scores = model.predict([(query, c.content) for c in candidates], show_progress_bar=False)
    except Exception as exc:  # noqa: BLE001 (any failure of this tier falls through)
        raise RerankFailed(f"cross-encoder at {model_path}: {exc}") from exc
    return [replace(c, score=round(float(s), 6), reranker_used="cross-encoder") for c, s in zip(candidates, scores)]


def llm(query: str, candidates: list[Candidate], base_url: str, model: str, api_key: str) -> list[Candidate]:
    from openai import OpenAI

    listing = "\n".join(f"{i}: {c.content}" for i, c in enumerate(candidates))
    try:
        client = OpenAI(base_url=base_url, api_key=api_key, max_retries=1, timeout=30)
        reply = client.chat.completions.create(
            model=model,
            temperature=0,
            seed=42,
            messages=[
                {"role": "system", "content": "Score how well each numbered passage answers the query, 0 to 1. "
                 'Reply with JSON only: {"scores": [number, ...]} in the passages\' order.'},
                {"role": "user", "content": f"Query: {query}\nPassages:\n{listing}"},
            ],
        )
        scores = json.loads(reply.choices[0].message.content)["scores"]
        if len(scores) != len(candidates) or not all(isinstance(s, (int, float)) for s in scores):
            raise ValueError("scores do not match the passages")
    except Exception as exc:  # noqa: BLE001
        raise RerankFailed(f"LLM reranker at {base_url}: {exc}") from exc
    return [replace(c, score=round(float(s), 6), reranker_used="llm") for c, s in zip(candidates, scores)]


def rerank(query: str, candidates: list[Candidate], env: Mapping[str, str] | None = None,
           messages: Mapping[str, str | None] | None = None) -> tuple[list[Candidate], list[str]]:
    """Candidates best first, and a note per tier that was tried and fell through. `env`: the
    settings by variable (`Settings.as_env()`: NEXUS_RERANK_*, NEXUS_CROSS_ENCODER); none: the heuristic."""
    env = dict(env or {})
    notes = []
    ranked = None
    if candidates and env.get("NEXUS_RERANK_BASE_URL") and env.get("NEXUS_RERANK_MODEL"):
        try:
            ranked = llm(query, candidates, env["NEXUS_RERANK_BASE_URL"], env["NEXUS_RERANK_MODEL"], env.get("NEXUS_RERANK_API_KEY", "unused"))
        except RerankFailed as exc:
            notes.append(str(exc))
    if ranked is None and candidates and env.get("NEXUS_CROSS_ENCODER"):
        try:
            ranked = cross_encoder(query, candidates, env["NEXUS_CROSS_ENCODER"])
        except RerankFailed as exc:
            notes.append(str(exc))
    if ranked is None:
        ranked = heuristic(query, candidates)
        if messages:
            order = sorted(ranked, key=lambda c: (-c.score, c.authority, c.brick_id))
            ranked = spread(order, messages)
    # Ties: the higher authority (1 first), then the brick id, so the order is deterministic.
    return sorted(ranked, key=lambda c: (-c.score, c.authority, c.brick_id)), notes
