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

from nexus_assets.core.links import passage_url, topic_url
from nexus_assets.drift.step import file_drift
from nexus_assets.extract.embedded import is_statement
from nexus_assets.recall.citations import (
    CCC_THRESHOLD,
    MAX_REVISIONS,
    ccc,
    coverage_refusal,
    revision_request,
    split_answer,
)
from nexus_assets.recall.confidence import confidence
from nexus_assets.services.query_terms import Filters, dates_in, parse_day, speakers_in
from nexus_assets.services.recalling import NothingToRecall, recall
from nexus_assets.services.relevance import ANSWER_CONFIDENCE, relevant, shares_a_word
from nexus_assets.store import Vault

# The recall side is imported from here too (the shells, the benchmarks, the tests).
__all__ = [
    "ANSWER_CONFIDENCE", "ASK_K", "Filters", "NothingToRecall", "ask", "confidence",
    "dates_in", "endpoints", "parse_day", "recall", "relevant", "shares_a_word", "speakers_in",
]

# Answers

ANSWER_BRICKS = 5  # bricks and passages an offline answer quotes
ASK_K = 8  # results recalled for an answer to choose from


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
    "Answer the question using only the numbered notes, which are verbatim sentences. End every sentence "
    "with the id of each note it rests on in square brackets, e.g. [3f9a1c2e4b5d]. Say nothing the "
    "notes do not support. Plain sentences, no lists. Your answer is shown as the cited notes' own "
    "words, in the order you cite them."
)


def _generate(endpoint: Endpoint, question: str, bricks: list[dict], allowed: list[str]):
    """(answer, revisions, prompt tokens, completion tokens); raises on a failing endpoint."""
    from openai import OpenAI

    client = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=1, timeout=60)
    listing = "\n".join(f"[{b['id'][:12]}] {b['content']}" for b in bricks)
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


@dataclass(frozen=True)
class _Cited:
    """A cited passage as the drift check reads a brick: an id and the one address to re-read."""

    brick_id: str
    topic_id: str
    sources: tuple


def _mode1(vault: Vault, brick_ids: list[str], passage_ids: list[str] = ()) -> list[str]:
    """MODE-1: every cited brick's canonical source and every cited passage's address re-read from
    its run file, its checksum verified."""
    from nexus_assets.core.models import SourceAddress

    canonical = vault.recall.canonical_sources(brick_ids)
    bricks = [b.model_copy(update={"sources": (canonical[b.brick_id],)}) for b in vault.bricks.select(brick_ids=brick_ids) if b.brick_id in canonical]
    rows = vault.passages.by_ids(passage_ids)
    cited = [_Cited(p, "", (SourceAddress(run_id=r.run_id, json_path=r.json_path, start=r.start, end=r.end,
                                         node_checksum=r.node_checksum),)) for p, r in rows.items()]
    missing = [f"brick {b[:12]}: it has no source in the vault" for b in brick_ids if b not in canonical]
    missing += [f"passage {p[:12]}: it is not in the vault" for p in passage_ids if p not in rows]
    return missing + [
        f"{'passage' if d.topic_id == '' else 'brick'} {d.brick_id[:12]}: {d.problem}" for d in file_drift(vault, bricks + cited)
    ]


def ask(
    db_path: str | Path, question: str, topics: list[str] | None = None, *, user: str, agent: str, k: int = ASK_K,
    env: Mapping[str, str] | None = None, speaker: str | None = None, since: str | None = None, until: str | None = None,
) -> dict:
    """`env`: the settings by variable (`Settings.as_env()`); none: no endpoint, no reranker.
    An answer rests only on recalled bricks and passages relevant enough to the question (their
    confidence at least ANSWER_CONFIDENCE, the score recall reports); with none, the question is
    refused, whatever an answer's CCC would be. Every answer sentence is its cited texts verbatim,
    joined by a space (invariant 16), whoever chose them (an endpoint or the offline answer)."""
    env = dict(env or {})
    recalled = recall(db_path, question, topics, k=k, env=env, speaker=speaker, since=since, until=until)
    items = [r for r in recalled["results"] if relevant(question, r)]
    allowed = [r["id"] for r in items]
    by_id = {r["id"]: r for r in items}
    parts, model, revisions, tokens_in, tokens_out, generation, notes = [], "none", 0, 0, 0, "none", []
    reply = ""  # what an endpoint answered, as it wrote it: a refused answer is audited by its hash
    reason = None
    if not recalled["results"]:
        reason = "nothing was recalled for this question"
    elif not items:
        best = recalled["results"][0]["confidence"]
        reason = (f"nothing recalled is relevant enough to answer this question (best confidence {best:.2f}; an answer "
                  f"needs {ANSWER_CONFIDENCE:.2f})")
    else:
        for ep in endpoints(env):
            try:
                reply, revisions, tokens_in, tokens_out = _generate(ep, question, items, allowed)
                parts = split_answer(reply, allowed)
                model, generation = ep.model, f"llm:{ep.base_url}; shown as the cited texts verbatim"
                break
            except Exception as exc:  # noqa: BLE001 (the next endpoint, else the offline answer)
                notes.append(f"{ep.base_url} ({ep.model}): {exc}")
        if generation == "none":
            parts, reason = _extractive(items)
            model, generation = "offline-extractive", "verbatim brick and passage text only; CCC 1.0 by construction"
    score = ccc(parts)
    if reason is None and score < CCC_THRESHOLD:
        reason = coverage_refusal(parts, revisions)
    sentences = verbatim_sentences(parts, {i: r["content"] for i, r in by_id.items()})
    cited = list(dict.fromkeys(i for s in sentences for i in s["ids"]))
    answer = join_sentences(sentences)
    with Vault.open(db_path) as vault:
        if reason is None:
            problems = _mode1(vault, [i for i in cited if by_id[i]["kind"] == "brick"], [i for i in cited if by_id[i]["kind"] == "passage"])
            if problems:
                reason = "MODE-1: a cited source no longer holds its text: " + "; ".join(problems)
        levels = sorted({by_id[i]["authority"] for i in cited})
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
                "answer_sha256": _sha256(answer if reason is None or not reply else reply),
            }
        )
    return {
        "answer": None if reason else answer,
        "refused": reason is not None,
        "reason": reason,
        "sentences": [{"text": s["text"], "brick_ids": [i for i in s["ids"] if by_id[i]["kind"] == "brick"],
                       "passage_ids": [i for i in s["ids"] if by_id[i]["kind"] == "passage"]} for s in sentences],
        "ccc": round(score, 6),
        "revisions": revisions,
        "model": model,
        "generation": generation,
        "audit_id": audit_id,
        "reranker_used": recalled["reranker_used"],
        # Higher authority first (docs/recall.md): said beside the answer, never inside it.
        "authority_levels": levels,
        "sources": [_grounding(i, by_id[i], env.get("NEXUS_VIEWER_URL")) for i in cited],
        "fell_through": recalled["fell_through"] + notes,
    }


def _sha256(text: str) -> str | None:
    return hashlib.sha256(text.encode("utf-8")).hexdigest() if text else None


def verbatim_sentences(parts, texts: dict[str, str]) -> list[dict]:
    """Each cited sentence of an answer as its cited texts verbatim, joined by a space, in the order
    it cites them; a text cited again later is not said twice, and an uncited sentence says nothing."""
    said: set[str] = set()
    out = []
    for p in parts:
        ids = [i for i in p.brick_ids if i not in said and i in texts]
        if not p.cited or not ids:
            continue
        said.update(ids)
        out.append({"text": " ".join(texts[i] for i in ids), "ids": ids})
    return out


def join_sentences(sentences: list[dict]) -> str:
    """The answer: each sentence followed by its citations, separated by spaces (nothing else)."""
    return " ".join(s["text"] + " " + " ".join(f"[{i[:12]}]" for i in s["ids"]) for s in sentences)


def _extractive(items: list[dict]) -> tuple[list, str | None]:
    """The offline answer: the most relevant bricks and passages are chosen (the same sentence in
    two topics is said once), then the answer leads with the highest authority; within a level,
    relevance decides. Questions, headings and fragments answer nothing: with only those, the
    answer is empty and the second value the refusal's reason."""
    from nexus_assets.recall.citations import CitedSentence

    chosen, seen = [], set()
    for r in items:
        said = " ".join(r["content"].lower().split())
        if said not in seen and is_statement(r["content"]):
            seen.add(said)
            chosen.append(r)
    # What was said in one message stays together, in the order it was said.
    first = {}
    for i, r in enumerate(chosen[:ANSWER_BRICKS]):
        first.setdefault(r["message"], i)
    ordered = sorted(
        chosen[:ANSWER_BRICKS],
        key=lambda r: (r["authority"], first[r["message"]], r["sources"][0]["start"] if r["sources"] else 0),
    )
    if not ordered:
        return [], "every result recalled for this question is a question or a fragment, not a statement to quote"
    return [CitedSentence(r["content"], (r["id"],)) for r in ordered], None


def _cost(env: Mapping[str, str], tokens_in: int, tokens_out: int, generation: str) -> float | None:
    """USD of the generation by the configured prices; an offline answer costs nothing; else unknown."""
    price_in, price_out = env.get("NEXUS_PRICE_IN_PER_MTOK"), env.get("NEXUS_PRICE_OUT_PER_MTOK")
    if price_in and price_out:
        return (tokens_in * float(price_in) + tokens_out * float(price_out)) / 1_000_000
    if generation.startswith("offline"):
        return 0.0
    return None


def _grounding(item_id: str, b: dict, viewer_base: str | None) -> dict:
    """Where a cited brick or passage was said, as the answer's `sources` show it."""
    source = b["sources"][0]
    passage = b["kind"] == "passage"
    url = passage_url(item_id, viewer_base) if passage else f"{topic_url(b['topic_id'], viewer_base)}#brick-{item_id}"
    return {
        "kind": b["kind"],
        "id": item_id,
        "brick_id": None if passage else item_id,
        "passage_id": item_id if passage else None,
        "content_snippet": b["content"][:200],
        "run_id": source["run_id"],
        "json_path": source["json_path"],
        "start": source["start"],
        "end": source["end"],
        "viewer_url": url,
        "confidence": b["confidence"],
        "authority": b["authority"],
        "run_title": b["run_title"],
        "run_date": b["run_date"],
        "retrieval_timestamp": b["retrieval_timestamp"],
    }
