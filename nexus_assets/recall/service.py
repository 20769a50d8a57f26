"""`nexus recall` (read-only) and `nexus ask` (a grounded answer, audited): the use cases the CLI
and the viewer call.

Confidence: a documented mapping of the final ranking score (`recall/confidence.py`), so it never
rises down the list; the cosine similarity of the query and the brick is given beside it.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

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
from nexus_assets.recall.embedder import MODEL, embed
from nexus_assets.recall.index import ensure
from nexus_assets.recall.rerank import Candidate, rerank
from nexus_assets.store import Vault
from nexus_assets.web.links import topic_url

OVERFETCH = 4  # candidates per wanted result, for the reranker to choose from


class NothingToRecall(LookupError):
    """The topics asked about have visible bricks but none is embedded: the vault was synced without
    recall. The message says how to build the embeddings."""


def recall(db_path: str | Path, query: str, topics: list[str] | None = None, k: int = 5, env: dict | None = None) -> dict:
    """The k bricks that best answer `query`. Writes nothing to the vault (invariant 16); a missing
    or out-of-step vector index beside it is rebuilt from the vault's embeddings."""
    started = time.monotonic()
    with Vault.open(db_path, read_only=True) as vault:
        hashes = vault.latest_manifest_hashes()
        wanted = topics or sorted(hashes)
        missing = vault.recall.unembedded_counts(wanted, MODEL)
        indexes = [ensure(vault, db_path, t, manifest_hash=hashes.get(t), unembedded=missing.get(t, 0))[0] for t in wanted]
        not_embedded = sum(missing.values())
        if not_embedded and not any(idx.brick_ids for idx in indexes):
            raise NothingToRecall(
                f"no brick of {', '.join(wanted)} is embedded yet ({not_embedded} visible bricks): the vault was synced "
                "with --no-recall or NEXUS_NO_RECALL=1, or by a release with another embedding model; run `nexus sync` "
                "without --no-recall to build the embeddings (only what is missing is embedded)"
            )
        qv = embed([query])
        hits: dict[str, float] = {}
        for idx in indexes:
            n = min(idx.index.ntotal, max(k * OVERFETCH, k))
            if n == 0:
                continue
            scores, rows = idx.index.search(qv, n)
            for s, r in zip(scores[0], rows[0]):
                if r >= 0:
                    hits[idx.brick_ids[r]] = float(s)
        bricks = {b.brick_id: b for b in vault.bricks.select(brick_ids=list(hits))}
        topic_defs = {t: vault.topics.topic(t) for t in {b.topic_id for b in bricks.values()}}
        canonical_runs = {b.sources[0].run_id for b in bricks.values() if b.sources}
        files = {r: f for r, (f, _) in vault.runs.run_sources(canonical_runs).items()}
        names = vault.runs.run_names(canonical_runs)
        seq = vault.runs.ingestion_seq()
    order = sorted({seq.get(b.sources[0].run_id, 0) for b in bricks.values() if b.sources})
    rank = {s: (i / (len(order) - 1) if len(order) > 1 else 1.0) for i, s in enumerate(order)}
    candidates = []
    for bid, sim in hits.items():
        b = bricks.get(bid)
        if b is None:
            continue
        run = b.sources[0].run_id if b.sources else None
        topic = topic_defs.get(b.topic_id)
        candidates.append(
            Candidate(
                brick_id=bid, topic_id=b.topic_id, content=b.content, state=b.state, similarity=sim,
                authority=topic.authority_of(files.get(run)) if topic else 3, recency=rank.get(seq.get(run, 0), 0.0),
            )
        )
    ranked, notes = rerank(query, candidates, env)
    stamp = datetime.now(timezone.utc).isoformat()
    results = []
    # In rank order, as the reranker left them: the first result is the best answer.
    for rank, c in enumerate(ranked[:k], 1):
        b = bricks[c.brick_id]
        name = names.get(b.sources[0].run_id) if b.sources else None
        results.append(
            {
                "rank": rank,
                "brick_id": c.brick_id,
                "topic_id": c.topic_id,
                "content": c.content,
                "state": c.state,
                "confidence": confidence(c.score, c.reranker_used),  # in rank order: never rises down the list
                "similarity": round(c.similarity, 6),
                "rerank_score": c.score,
                "reranker_used": c.reranker_used,
                "authority": c.authority,
                "sources": [s.model_dump(mode="json") for s in b.sources],
                "retrieval_timestamp": stamp,
                # The message the brick was said in (its canonical source), and the conversation's name.
                "message": _message_key(b),
                **(name.as_json() if name else {"run_title": None, "run_date": None}),
            }
        )
    return {
        "query": query,
        "model": MODEL,
        "topics": wanted,
        "results": results,
        "reranker_used": results[0]["reranker_used"] if results else None,
        "fell_through": notes,
        "not_embedded": not_embedded,  # visible bricks recall cannot see until a sync with recall embeds them
        "latency_ms": int((time.monotonic() - started) * 1000),
    }


def _message_key(brick) -> str | None:
    source = brick.sources[0] if brick.sources else None
    return f"{source.run_id} {source.json_path}" if source else None


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
    env: Mapping[str, str] | None = None,
) -> dict:
    """`env`: the settings by variable (`Settings.as_env()`); none: no endpoint, no reranker."""
    env = dict(env or {})
    recalled = recall(db_path, question, topics, k=k, env=env)
    bricks = recalled["results"]
    allowed = [b["brick_id"] for b in bricks]
    answer, model, revisions, tokens_in, tokens_out, generation, notes = "", "none", 0, 0, 0, "none", []
    reason = None
    if not bricks:
        reason = "nothing was recalled for this question"
    else:
        for ep in endpoints(env):
            try:
                answer, revisions, tokens_in, tokens_out = _generate(ep, question, bricks, allowed)
                model, generation = ep.model, f"llm:{ep.base_url}"
                break
            except Exception as exc:  # noqa: BLE001 (the next endpoint, else the offline answer)
                notes.append(f"{ep.base_url} ({ep.model}): {exc}")
        if generation == "none":
            # The most relevant bricks are chosen (the same sentence in two topics is said once),
            # then the answer leads with the highest authority; within a level, relevance decides.
            # Questions, headings and fragments (an LLM extractor may have kept them) answer nothing.
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
            model, generation = "offline-extractive", "verbatim brick text only; CCC 1.0 by construction"
            if not ordered:
                reason = "every brick recalled for this question is a question or a fragment, not a statement to quote"
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
        cost = None
        price_in, price_out = env.get("NEXUS_PRICE_IN_PER_MTOK"), env.get("NEXUS_PRICE_OUT_PER_MTOK")
        if price_in and price_out:
            cost = (tokens_in * float(price_in) + tokens_out * float(price_out)) / 1_000_000
        elif generation.startswith("offline"):
            cost = 0.0
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
    grounding = [
        {
            "brick_id": b,
            "content_snippet": by_id[b]["content"][:200],
            "run_id": by_id[b]["sources"][0]["run_id"],
            "json_path": by_id[b]["sources"][0]["json_path"],
            "start": by_id[b]["sources"][0]["start"],
            "end": by_id[b]["sources"][0]["end"],
            "viewer_url": f"{topic_url(by_id[b]['topic_id'])}#brick-{b}",
            "confidence": by_id[b]["confidence"],
            "authority": by_id[b]["authority"],
            "run_title": by_id[b]["run_title"],
            "run_date": by_id[b]["run_date"],
            "retrieval_timestamp": by_id[b]["retrieval_timestamp"],
        }
        for b in cited
    ]
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
        "sources": grounding,
        "fell_through": recalled["fell_through"] + notes,
    }
