"""`nexus recall` (read-only) and `nexus ask` (a grounded answer, audited): the use cases the CLI
and the viewer call. Recall (its hybrid ranking and confidence) is services/recalling.py, what a
query names services/query_terms.py, and which recalled bricks are relevant enough for an answer
services/relevance.py; this module composes the answer (an LLM endpoint or the offline
extractive one), checks it (CCC, MODE-1) and audits it, or refuses.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from nexus_assets.core.links import topic_url
from nexus_assets.drift.step import file_drift
from nexus_assets.extract.embedded import is_statement
from nexus_assets.recall.citations import (
    CCC_THRESHOLD,
    MAX_REVISIONS,
    ccc,
    coverage_refusal,
    extractive_answer,
    revision_request,
    split_answer,
)
from nexus_assets.recall.confidence import confidence
from nexus_assets.services.query_terms import Filters, dates_in, parse_day, speakers_in
from nexus_assets.services.recalling import NothingToRecall, recall
from nexus_assets.services.relevance import ANSWER_MIN_SIMILARITY, ANSWER_STRONG_SIMILARITY, relevant, shares_a_word
from nexus_assets.store import Vault

# The recall side is imported from here too (the shells, the benchmarks, the tests).
__all__ = [
    "ANSWER_MIN_SIMILARITY", "ANSWER_STRONG_SIMILARITY", "ASK_K", "Filters", "NothingToRecall", "ask", "confidence",
    "dates_in", "endpoints", "parse_day", "recall", "relevant", "shares_a_word", "speakers_in",
]

# Answers

ANSWER_BRICKS = 5  # bricks an offline answer quotes
ASK_K = 8  # bricks recalled for an answer to choose from


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    model: str
    api_key: str


def endpoints(env: dict) -> list[Endpoint]:
    """The generation endpoints in order: NEXUS_ASK_ENDPOINTS ("url|model;url|model", e.g. a
    hosted model then a local Ollama), else OPENAI_BASE_URL with NEXUS_LLM_MODEL."""
    key = env.get("OPENAI_API_KEY", "unused")
    if env.get("NEXUS_ASK_ENDPOINTS"):
        out = []
        for item in env["NEXUS_ASK_ENDPOINTS"].split(";"):
            if "|" in item:
                url, model = item.split("|", 1)
                out.append(Endpoint(url.strip(), model.strip(), key))
        return out
    if env.get("OPENAI_BASE_URL") and env.get("NEXUS_LLM_MODEL"):
        return [Endpoint(env["OPENAI_BASE_URL"], env["NEXUS_LLM_MODEL"], key)]
    return []


SYSTEM = (
    "Answer the question using only the numbered bricks, which are verbatim notes. End every sentence "
    "with the id of each brick it rests on in square brackets, e.g. [3f9a1c2e4b5d]. Say nothing the "
    "bricks do not support. Plain sentences, no lists."
)


def _generate(endpoint: Endpoint, question: str, bricks: list[dict], allowed: list[str]):
    """(answer, revisions, prompt tokens, completion tokens); raises on a failing endpoint."""
    from openai import OpenAI

    client = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=1, timeout=60)
    listing = "\n".join(f"[{b['brick_id'][:12]}] {b['content']}" for b in bricks)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Bricks:\n{listing}\n\nQuestion: {question}"}]
    tokens_in = tokens_out = 0
    revisions = 0
    while True:
        reply = client.chat.completions.create(model=endpoint.model, messages=messages, temperature=0, seed=42)
        if reply.usage:
            tokens_in += reply.usage.prompt_tokens or 0
            tokens_out += reply.usage.completion_tokens or 0
        answer = reply.choices[0].message.content or ""
        parts = split_answer(answer, allowed)
        if ccc(parts) >= CCC_THRESHOLD or revisions >= MAX_REVISIONS:
            return answer, revisions, tokens_in, tokens_out
        revisions += 1
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": revision_request(parts)}]


def _mode1(vault: Vault, brick_ids: list[str]) -> list[str]:
    """MODE-1: every cited brick's canonical source re-read from its run file, its checksum verified."""
    canonical = vault.recall.canonical_sources(brick_ids)
    bricks = [b.model_copy(update={"sources": (canonical[b.brick_id],)}) for b in vault.bricks.select(brick_ids=brick_ids) if b.brick_id in canonical]
    missing = [b for b in brick_ids if b not in canonical]
    return [f"brick {b[:12]}: it has no source in the vault" for b in missing] + [
        f"brick {d.brick_id[:12]}: {d.problem}" for d in file_drift(vault, bricks)
    ]


def ask(
    db_path: str | Path, question: str, topics: list[str] | None = None, *, user: str, agent: str, k: int = ASK_K,
    env: Mapping[str, str] | None = None, speaker: str | None = None, since: str | None = None, until: str | None = None,
) -> dict:
    """`env`: the settings by variable (`Settings.as_env()`); none: no endpoint, no reranker.
    An answer rests only on recalled bricks relevant enough to the question (similarity at least
    ANSWER_MIN_SIMILARITY); with none, the question is refused, whatever an answer's CCC would be."""
    env = dict(env or {})
    recalled = recall(db_path, question, topics, k=k, env=env, speaker=speaker, since=since, until=until)
    bricks = [b for b in recalled["results"] if relevant(question, b)]
    allowed = [b["brick_id"] for b in bricks]
    answer, model, revisions, tokens_in, tokens_out, generation, notes = "", "none", 0, 0, 0, "none", []
    reason = None
    if not recalled["results"]:
        reason = "nothing was recalled for this question"
    elif not bricks:
        best = max(b["similarity"] for b in recalled["results"])
        reason = (f"no recalled brick is relevant enough to answer this question (best similarity {best:.2f}; an answer "
                  f"needs {ANSWER_MIN_SIMILARITY:.2f} and a word of the question, or {ANSWER_STRONG_SIMILARITY:.2f})")
    else:
        for ep in endpoints(env):
            try:
                answer, revisions, tokens_in, tokens_out = _generate(ep, question, bricks, allowed)
                model, generation = ep.model, f"llm:{ep.base_url}"
                break
            except Exception as exc:  # noqa: BLE001 (the next endpoint, else the offline answer)
                notes.append(f"{ep.base_url} ({ep.model}): {exc}")
        if generation == "none":
            answer, reason = _extractive(bricks)
            model, generation = "offline-extractive", "verbatim brick text only; CCC 1.0 by construction"
    parts = split_answer(answer, allowed) if answer else []
    score = ccc(parts)
    cited = list(dict.fromkeys(b for p in parts for b in p.brick_ids))
    if reason is None and score < CCC_THRESHOLD:
        reason = coverage_refusal(parts, revisions)
    with Vault.open(db_path) as vault:
        if reason is None:
            problems = _mode1(vault, cited)
            if problems:
                reason = "MODE-1: a cited brick's source no longer holds its text: " + "; ".join(problems)
        by_id = {b["brick_id"]: b for b in bricks}
        levels = sorted({by_id[b]["authority"] for b in cited})
        if reason is None and len(levels) > 1:
            answer = (f"From authority level {levels[0]} sources first (this answer draws on levels "
                      f"{', '.join(map(str, levels))}): ") + answer
        audit_id = uuid.uuid4().hex
        cost = _cost(env, tokens_in, tokens_out, generation)
        vault.recall.append_audit(
            {
                "audit_id": audit_id, "recorded_at": datetime.now(timezone.utc), "user": user, "agent": agent,
                "question_sha256": hashlib.sha256(question.encode("utf-8")).hexdigest(), "topic_ids": recalled["topics"],
                "brick_ids": cited or allowed, "model": model, "prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                "cost_usd": cost, "ccc": score if parts else None, "revisions": revisions,
                "outcome": "refused" if reason else "answered", "reason": reason,
                # The answer given or refused is kept as its hash only: the trail holds no text.
                "answer_sha256": hashlib.sha256(answer.encode("utf-8")).hexdigest() if answer else None,
            }
        )
    return {
        "answer": None if reason else answer,
        "refused": reason is not None,
        "reason": reason,
        "sentences": [{"text": p.text, "brick_ids": list(p.brick_ids)} for p in parts],
        "ccc": round(score, 6),
        "revisions": revisions,
        "model": model,
        "generation": generation,
        "audit_id": audit_id,
        "reranker_used": recalled["reranker_used"],
        "sources": [_grounding(b, by_id[b], env.get("NEXUS_VIEWER_URL")) for b in cited],
        "fell_through": recalled["fell_through"] + notes,
    }


def _extractive(bricks: list[dict]) -> tuple[str, str | None]:
    """The offline answer: the most relevant bricks are chosen (the same sentence in two topics is
    said once), then the answer leads with the highest authority; within a level, relevance decides.
    Questions, headings and fragments (an LLM extractor may have kept them) answer nothing: with
    only those, the answer is empty and the second value the refusal's reason."""
    chosen, seen = [], set()
    for b in bricks:
        said = " ".join(b["content"].lower().split())
        if said not in seen and is_statement(b["content"]):
            seen.add(said)
            chosen.append(b)
    # Bricks of one message stay together, in the order they were said.
    first = {}
    for i, b in enumerate(chosen[:ANSWER_BRICKS]):
        first.setdefault(b["message"], i)
    ordered = sorted(
        chosen[:ANSWER_BRICKS],
        key=lambda b: (b["authority"], first[b["message"]], b["sources"][0]["start"] if b["sources"] else 0),
    )
    answer = extractive_answer([(b["brick_id"], b["content"]) for b in ordered], limit=ANSWER_BRICKS)
    if not ordered:
        return answer, "every brick recalled for this question is a question or a fragment, not a statement to quote"
    return answer, None


def _cost(env: Mapping[str, str], tokens_in: int, tokens_out: int, generation: str) -> float | None:
    """USD of the generation by the configured prices; an offline answer costs nothing; else unknown."""
    price_in, price_out = env.get("NEXUS_PRICE_IN_PER_MTOK"), env.get("NEXUS_PRICE_OUT_PER_MTOK")
    if price_in and price_out:
        return (tokens_in * float(price_in) + tokens_out * float(price_out)) / 1_000_000
    if generation.startswith("offline"):
        return 0.0
    return None


def _grounding(brick_id: str, b: dict, viewer_base: str | None) -> dict:
    """Where a cited brick was said, as the answer's `sources` show it."""
    source = b["sources"][0]
    return {
        "brick_id": brick_id,
        "content_snippet": b["content"][:200],
        "run_id": source["run_id"],
        "json_path": source["json_path"],
        "start": source["start"],
        "end": source["end"],
        "viewer_url": f"{topic_url(b['topic_id'], viewer_base)}#brick-{brick_id}",
        "confidence": b["confidence"],
        "authority": b["authority"],
        "run_title": b["run_title"],
        "run_date": b["run_date"],
        "retrieval_timestamp": b["retrieval_timestamp"],
    }
