"""`nexus recall` (read-only) and `nexus ask` (a grounded answer, audited): the use cases the CLI
and the viewer call.

Ranking (docs/recall.md) is hybrid: the dense ranking (cosine of the query and each brick, FAISS inner
product over unit vectors) and the full-text ranking (BM25, the index `nexus search` keeps) are
fused by reciprocal rank fusion, RRF = sum over rankings of 1 / (RRF_K + rank), ties by brick id;
a speaker or date the query names adds one more ranking (the candidates said by them, or then),
so it counts without hiding the rest. `--speaker`/`--since`/`--until` filter instead. The best
fused candidates then go through the rerank tiers (`rerank.py`), whose score is the final one.

Confidence: a documented mapping of the final ranking score (`recall/confidence.py`), so it never
rises down the list; the cosine similarity of the query and the brick is given beside it.

Relevance for an answer (`relevant`): the brick's cosine with the question (`similarity` on each
result) is at least ANSWER_MIN_SIMILARITY and the brick shares a content word with the question,
or its cosine is at least ANSWER_STRONG_SIMILARITY. `ask` answers only from relevant bricks and
refuses when there are none.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from dataclasses import dataclass
from datetime import date, datetime, timezone
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
from nexus_assets.core.links import topic_url

OVERFETCH = 4  # candidates per wanted result, for the reranker to choose from
RRF_K = 60  # the usual constant of reciprocal rank fusion (Cormack et al. 2009)
FUSION_DEPTH = 100  # how deep each ranking is read before fusing
# Cosine of a question and a brick below which the brick does not answer it. Measured with
# all-MiniLM-L6-v2 (benchmarks/bench_ask_refusal.py): on the sample and a real export, the best
# brick for an unrelated question scored at most 0.2x, for a related one at least 0.3x.
ANSWER_MIN_SIMILARITY = 0.30
# ... and it must share a content word with the question (`shares_a_word`), unless its cosine is at
# least this: the English MiniLM scores any two Dutch sentences 0.4-0.6, related or not, so on a
# Dutch export the cosine alone answered "Wat is de hoofdstad van Australie?" from a sentence on
# tetrahedra.
ANSWER_STRONG_SIMILARITY = 0.65


# Function words of the languages people here write in (en, nl, de, fr, it, es): a question and a
# brick that share only these share nothing.
STOPWORDS = frozenset("""
a an and are as at be been but by can could did do does for from had has have how i if in into is it its me
my no not of on or our should so than that the their them then there these they this those to was we were
what when where which who whom why will with would you your about after also any before being both each
few more most much many other over same some such very just only own too under until while again further
all tell told said say says know want need like get got make made use used
de het een en of is zijn was waren wat wie waar wanneer hoe hoeveel welke welk waarom ik je jij u we wij
ze zij hij mijn jouw uw ons onze hun dit dat die deze daar hier er niet geen wel ook maar als dan om te
van voor met op aan bij in uit naar over door tot tegen moet moeten kan kunnen mag mogen wil willen zou
zal heb hebt heeft hebben ben bent word wordt worden had per nog al
der die das ein eine und oder ist sind wer wie wo wann warum ich du sie wir mit von zu auf fur nicht
le la les un une des et ou est sont qui que quoi quand comment pourquoi je tu il elle nous vous avec pour
il lo gli una uno e o che chi come quando perche sono con per non el los las y es son como cuando por
""".split())
_WORD = re.compile(r"\w+", re.UNICODE)


def _content_words(text: str) -> set[str]:
    """Lowercased words that carry meaning, a plural 's' off: 'quotes' and 'quote' are one word."""
    out = set()
    for w in _WORD.findall(text.casefold()):
        if len(w) < 3 or w in STOPWORDS or w.isdigit() and len(w) < 4:
            continue
        out.add(w[:-1] if len(w) > 4 and w.endswith("s") else w)
    return out


def shares_a_word(question: str, content: str) -> bool:
    """Whether a brick says one of the question's content words: the same word, or two long
    words with the same first six letters ('deploy' and 'deployment')."""
    asked, said = _content_words(question), _content_words(content)
    if asked & said:
        return True
    stems = {w[:6] for w in said if len(w) >= 6}
    return any(len(w) >= 6 and w[:6] in stems for w in asked)


def relevant(question: str, result: dict) -> bool:
    """Whether a recalled brick is relevant enough for an answer to rest on it (docs/recall.md)."""
    similarity = result["similarity"]
    return similarity >= ANSWER_STRONG_SIMILARITY or (
        similarity >= ANSWER_MIN_SIMILARITY and shares_a_word(question, result["content"])
    )


class NothingToRecall(LookupError):
    """The topics asked about have visible bricks but none is embedded: the vault was synced without
    recall. The message says how to build the embeddings."""


@dataclass(frozen=True)
class Filters:
    """Who said it and when (docs/recall.md): given, they filter; read from the query, they rank."""

    speaker: str | None = None
    since: str | None = None  # YYYY-MM-DD, inclusive
    until: str | None = None

    def __bool__(self) -> bool:
        return bool(self.speaker or self.since or self.until)

    def admits(self, facts: list[tuple]) -> bool:
        """Whether a brick with these (speaker, date) sources passes: one source must pass all."""
        for speaker, day in facts:
            if self.speaker and (speaker or "").casefold() != self.speaker.casefold():
                continue
            if (self.since or self.until) and day is None:
                continue
            if self.since and day < self.since:
                continue
            if self.until and day > self.until:
                continue
            return True
        return False

    def as_json(self) -> dict:
        return {"speaker": self.speaker, "since": self.since, "until": self.until}


def parse_day(text: str | None, what: str) -> str | None:
    """A --since/--until value as YYYY-MM-DD; ValueError naming it otherwise."""
    if text is None or not str(text).strip():
        return None
    try:
        return date.fromisoformat(str(text).strip()[:10]).isoformat()
    except ValueError:
        raise ValueError(f"{what} must be a date as YYYY-MM-DD, not {text!r}") from None


MONTHS = {m: i for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"], 1)}
MONTHS.update({m[:3]: i for m, i in list(MONTHS.items())})
_MONTH = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:tember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_DATES = [
    (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"), lambda m: (int(m[1]), int(m[2]), int(m[3]))),
    (re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH},?\s+(\d{{4}})\b", re.I), lambda m: (int(m[3]), MONTHS[m[2].lower()[:3]], int(m[1]))),
    (re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I), lambda m: (int(m[3]), MONTHS[m[1].lower()[:3]], int(m[2]))),
    (re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b", re.I), lambda m: (int(m[2]), MONTHS[m[1].lower()[:3]], None)),
    (re.compile(r"\b(\d{4})-(\d{2})\b"), lambda m: (int(m[1]), int(m[2]), None)),
]


def dates_in(query: str) -> tuple[str, str] | None:
    """The day or month a query names ("on 8 May 2023", "in March 2024", "2024-03-05"), as an
    inclusive (since, until); None when it names none."""
    for pattern, parts in _DATES:
        m = pattern.search(query)
        if not m:
            continue
        try:
            year, month, day = parts(m)
            if day is not None:
                d = date(year, month, day).isoformat()
                return d, d
            first = date(year, month, 1)
            last = date(year + (month == 12), month % 12 + 1, 1).toordinal() - 1
            return first.isoformat(), date.fromordinal(last).isoformat()
        except (ValueError, KeyError):
            continue
    return None


def speakers_in(query: str, known: list[str]) -> list[str]:
    """The known speakers a query names by name (whole words, any case); roles are not names."""
    words = query.casefold()
    return [s for s in known if s.casefold() not in ROLES and len(s) > 1
            and re.search(rf"(?<!\w){re.escape(s.casefold())}(?!\w)", words)]


ROLES = {"user", "assistant", "system", "tool", "human", "developer", "function"}
_speakers_cache: dict[tuple, list[str]] = {}


def _known_speakers(vault: Vault, db_path, wanted: list[str], hashes: dict) -> list[str]:
    key = (str(db_path), tuple(wanted), tuple(hashes.get(t) for t in wanted))
    if key not in _speakers_cache:
        _speakers_cache.clear()  # one vault state at a time is enough for a warm process
        _speakers_cache[key] = vault.recall.known_speakers(wanted)
    return _speakers_cache[key]


def _rrf(rankings: list[list[str]]) -> dict[str, float]:
    """Reciprocal rank fusion of best-first lists of brick ids, normalised so that first in every
    list is 1.0."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, brick_id in enumerate(ranking, 1):
            fused[brick_id] = fused.get(brick_id, 0.0) + 1.0 / (RRF_K + rank)
    top = len(rankings) / (RRF_K + 1) if rankings else 1.0
    return {b: s / top for b, s in fused.items()}


def recall(
    db_path: str | Path, query: str, topics: list[str] | None = None, k: int = 5, env: dict | None = None, *,
    speaker: str | None = None, since: str | None = None, until: str | None = None,
) -> dict:
    """The k bricks that best answer `query`. Writes nothing to the vault (invariant 16); a missing
    or out-of-step vector or full-text index beside it is rebuilt from the vault."""
    from nexus_assets.search import step as fulltext

    started = time.monotonic()
    given = Filters(speaker.strip() if speaker and speaker.strip() else None, parse_day(since, "since"), parse_day(until, "until"))
    depth = max(k * OVERFETCH, FUSION_DEPTH)
    with Vault.open(db_path, read_only=True) as vault:
        hashes = vault.latest_manifest_hashes()
        wanted = topics or sorted(hashes)
        indexes, not_embedded = _indexes(vault, db_path, wanted, hashes)
        if not fulltext.in_step(vault, db_path, wanted):
            fulltext.refresh(vault, db_path, wanted)
        # Hard filters are applied before ranking, over every brick of the topics.
        admitted = None
        if given:
            facts_all = vault.recall.source_facts(topic_ids=wanted, dates=bool(given.since or given.until))
            admitted = {b for b, facts in facts_all.items() if given.admits(facts)}
        qv = embed([query])
        dense = _dense(indexes, qv, admitted, depth)
        dense_ranking = sorted(dense, key=lambda b: (-round(dense[b], 6), b))[:depth]
        bm25 = fulltext.ranked_ids(db_path, query, wanted, depth if admitted is None else depth * 10)
        bm25_ranking = [b for b, _ in bm25 if admitted is None or b in admitted][:depth]
        pool = set(dense_ranking) | set(bm25_ranking)
        # A brick BM25 found below the dense cut still gets its cosine (its row of the index).
        for idx in indexes:
            rows = idx.rows
            for b in pool - dense.keys():
                if b in rows:
                    dense[b] = float(idx.index.reconstruct(rows[b]) @ qv[0])
        # What the query names itself (a known speaker, a day or month) ranks the candidates said
        # by them or then once more: it lifts them without hiding the rest.
        named_speakers = [] if given.speaker else speakers_in(query, _known_speakers(vault, db_path, wanted, hashes))
        named_days = None if (given.since or given.until) else dates_in(query)
        fused = _fused(vault, pool, [dense_ranking, bm25_ranking], named_speakers, named_days)
        shortlist = sorted(pool, key=lambda b: (-fused.get(b, 0.0), b))[: max(k * OVERFETCH, k)]
        bricks = {b.brick_id: b for b in vault.bricks.select(brick_ids=shortlist)}
        topic_defs = {t: vault.topics.topic(t) for t in {b.topic_id for b in bricks.values()}}
        canonical_runs = {b.sources[0].run_id for b in bricks.values() if b.sources}
        files = {r: f for r, (f, _) in vault.runs.run_sources(canonical_runs).items()}
        names = vault.runs.run_names(canonical_runs)
        seq = vault.runs.ingestion_seq()
    candidates = _candidates(shortlist, bricks, topic_defs, files, seq, dense, fused)
    ranked, notes = rerank(query, candidates, env)
    stamp = datetime.now(timezone.utc).isoformat()
    dense_rank = {b: i for i, b in enumerate(dense_ranking, 1)}
    bm25_rank = {b: i for i, (b, _) in enumerate(bm25, 1)}
    # In rank order, as the reranker left them: the first result is the best answer.
    results = [
        _result(rank, c, bricks[c.brick_id], names, dense_rank.get(c.brick_id), bm25_rank.get(c.brick_id), stamp)
        for rank, c in enumerate(ranked[:k], 1)
    ]
    return {
        "query": query,
        "model": MODEL,
        "topics": wanted,
        "filters": given.as_json(),
        # What the query named itself and recall ranked by (not filtered on).
        "named": {"speakers": named_speakers, "since": named_days[0] if named_days else None,
                  "until": named_days[1] if named_days else None},
        "results": results,
        "reranker_used": results[0]["reranker_used"] if results else None,
        "fell_through": notes,
        "not_embedded": not_embedded,  # visible bricks recall cannot see until a sync with recall embeds them
        "latency_ms": int((time.monotonic() - started) * 1000),
    }


def _indexes(vault: Vault, db_path: str | Path, wanted: list[str], hashes: dict) -> tuple[list, int]:
    """Each wanted topic's vector index (rebuilt when out of step) and how many visible bricks are
    not embedded; NothingToRecall when none of them is."""
    missing = vault.recall.unembedded_counts(wanted, MODEL)
    indexes = [ensure(vault, db_path, t, manifest_hash=hashes.get(t), unembedded=missing.get(t, 0))[0] for t in wanted]
    not_embedded = sum(missing.values())
    if not_embedded and not any(idx.brick_ids for idx in indexes):
        raise NothingToRecall(
            f"no brick of {', '.join(wanted)} is embedded yet ({not_embedded} visible bricks): the vault was synced "
            "with --no-recall or NEXUS_NO_RECALL=1, or by a release with another embedding model; run `nexus sync` "
            "without --no-recall to build the embeddings (only what is missing is embedded)"
        )
    return indexes, not_embedded


def _dense(indexes: list, qv, admitted: set[str] | None, depth: int) -> dict[str, float]:
    """Brick id -> cosine with the query, the `depth` nearest of each index (every admitted one when filtered)."""
    dense: dict[str, float] = {}
    for idx in indexes:
        n = idx.index.ntotal if admitted is not None else min(idx.index.ntotal, depth)
        if n == 0:
            continue
        scores, rows = idx.index.search(qv, n)
        for s, r in zip(scores[0], rows[0]):
            if r >= 0 and (admitted is None or idx.brick_ids[r] in admitted):
                dense[idx.brick_ids[r]] = float(s)
    return dense


def _fused(vault: Vault, pool: set[str], rankings: list[list[str]], named_speakers: list[str], named_days) -> dict[str, float]:
    """The rankings fused, with one more ranking each for the speakers and the days the query names."""
    facts = vault.recall.source_facts(brick_ids=pool, dates=bool(named_days)) if (named_speakers or named_days) else {}
    fused_first = _rrf(rankings)
    by_fused = sorted(pool, key=lambda b: (-fused_first.get(b, 0.0), b))
    if named_speakers:
        said = {s.casefold() for s in named_speakers}
        rankings.append([b for b in by_fused if any((sp or "").casefold() in said for sp, _ in facts.get(b, ()))])
    if named_days:
        then = Filters(since=named_days[0], until=named_days[1])
        rankings.append([b for b in by_fused if then.admits(facts.get(b, []))])
    return _rrf(rankings)


def _candidates(shortlist: list[str], bricks: dict, topic_defs: dict, files: dict, seq: dict, dense: dict, fused: dict) -> list[Candidate]:
    """The shortlist as the reranker's candidates: similarity, authority, recency (by ingestion order), fused score."""
    order = sorted({seq.get(b.sources[0].run_id, 0) for b in bricks.values() if b.sources})
    rank = {s: (i / (len(order) - 1) if len(order) > 1 else 1.0) for i, s in enumerate(order)}
    candidates = []
    for bid in shortlist:
        b = bricks.get(bid)
        if b is None:
            continue
        run = b.sources[0].run_id if b.sources else None
        topic = topic_defs.get(b.topic_id)
        candidates.append(
            Candidate(
                brick_id=bid, topic_id=b.topic_id, content=b.content, state=b.state, similarity=dense.get(bid, 0.0),
                authority=topic.authority_of(files.get(run)) if topic else 3, recency=rank.get(seq.get(run, 0), 0.0),
                fused=round(fused.get(bid, 0.0), 6),
            )
        )
    return candidates


def _result(rank: int, c: Candidate, b, names: dict, dense_rank: int | None, bm25_rank: int | None, stamp: str) -> dict:
    name = names.get(b.sources[0].run_id) if b.sources else None
    return {
        "rank": rank,
        "brick_id": c.brick_id,
        "topic_id": c.topic_id,
        "content": c.content,
        "state": c.state,
        "confidence": confidence(c.score, c.reranker_used),  # in rank order: never rises down the list
        "similarity": round(c.similarity, 6),
        "fused": c.fused,
        "dense_rank": dense_rank,
        "bm25_rank": bm25_rank,
        "rerank_score": c.score,
        "reranker_used": c.reranker_used,
        "authority": c.authority,
        "sources": [s.model_dump(mode="json") for s in b.sources],
        "retrieval_timestamp": stamp,
        # The message the brick was said in (its canonical source), and the conversation's name.
        "message": _message_key(b),
        **(name.as_json() if name else {"run_title": None, "run_date": None}),
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
