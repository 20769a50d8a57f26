"""`nexus recall` (read-only): the k bricks that best answer a query, the use case the CLI, the
viewer and `ask` (services/answers.py) call.

Ranking (docs/recall.md) is hybrid: the dense ranking (cosine of the query and each brick, FAISS inner
product over unit vectors) and the full-text ranking (BM25, the index `nexus search` keeps) are
fused by reciprocal rank fusion, RRF = sum over rankings of 1 / (RRF_K + rank), ties by brick id;
a speaker or date the query names adds one more ranking (the candidates said by them, or then),
so it counts without hiding the rest. `--speaker`/`--since`/`--until` filter instead
(services/query_terms.py). The best fused candidates then go through the rerank tiers
(`rerank.py`), whose score is the final one.

Confidence: a documented mapping of the final ranking score (`recall/confidence.py`), so it never
rises down the list; the cosine similarity of the query and the brick is given beside it.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

from nexus_assets.recall.confidence import confidence
from nexus_assets.recall.embedder import MODEL, embed
from nexus_assets.recall.index import ensure
from nexus_assets.recall.rerank import Candidate, rerank
from nexus_assets.services.query_terms import Filters, dates_in, parse_day, speakers_in
from nexus_assets.store import Vault

OVERFETCH = 4  # candidates per wanted result, for the reranker to choose from
RRF_K = 60  # the usual constant of reciprocal rank fusion (Cormack et al. 2009)
FUSION_DEPTH = 100  # how deep each ranking is read before fusing


class NothingToRecall(LookupError):
    """The topics asked about have visible bricks but none is embedded: the vault was synced without
    recall. The message says how to build the embeddings."""


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
