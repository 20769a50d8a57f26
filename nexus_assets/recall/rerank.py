"""Tiered reranking (docs/recall.md): LLM (an OpenAI-compatible endpoint) → cross-encoder (a local
model path; it needs the `torch` extra) → heuristic (always there). A tier that is not configured,
not installed or fails falls through to the next; every result says which tier ranked it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Mapping

STATE_WEIGHT = {"FINAL": 1.0, "FORMING": 0.6, "IMPROVISE": 0.3}
_WORD = re.compile(r"\w+", re.UNICODE)


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
    score: float = 0.0
    reranker_used: str = ""


class RerankFailed(RuntimeError):
    pass


# The heuristic's weights (they sum to 1, so its score is in [0, 1]): the fused hybrid rank leads,
# then words in common, similarity, the exact phrase, state and recency. Set on LoCoMo with every
# statement kept (benchmarks/bench_locomo.py --min-relevance 0, every 6th question): hit@10 0.613
# with fused 0.45 / similarity 0.30, 0.656 with these, 0.660 with fused alone; similarity stays in
# so the score is not rank alone.
WEIGHTS = {"fused": 0.70, "similarity": 0.05, "overlap": 0.10, "phrase": 0.05, "state": 0.05, "recency": 0.05}


def heuristic(query: str, candidates: list[Candidate]) -> list[Candidate]:
    """The fused rank, similarity, lexical overlap, exact phrase, state (FINAL above IMPROVISE) and recency."""
    q = {w.lower() for w in _WORD.findall(query)}
    phrase = " ".join(query.lower().split())
    wt = WEIGHTS
    out = []
    for c in candidates:
        words = {w.lower() for w in _WORD.findall(c.content)}
        overlap = len(q & words) / len(q) if q else 0.0
        has_phrase = 1.0 if phrase and phrase in " ".join(c.content.lower().split()) else 0.0
        score = (wt["fused"] * c.fused + wt["similarity"] * max(0.0, c.similarity) + wt["overlap"] * overlap
                 + wt["phrase"] * has_phrase + wt["state"] * STATE_WEIGHT.get(c.state, 0.0) + wt["recency"] * c.recency)
        out.append(replace(c, score=round(score, 6), reranker_used="heuristic"))
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


def rerank(query: str, candidates: list[Candidate], env: Mapping[str, str] | None = None) -> tuple[list[Candidate], list[str]]:
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
    # Ties: the higher authority (1 first), then the brick id, so the order is deterministic.
    return sorted(ranked, key=lambda c: (-c.score, c.authority, c.brick_id)), notes
