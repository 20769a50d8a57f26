"""`nexus recall` (read-only): the k results that best answer a query, over the asked topics' notes
(their bricks) and their record (every passage of the runs they are about, DESIGN §3.1); without a
topic, every topic's notes and every run's passages. The use case the CLI, the API, MCP, the
viewer and `ask` (services/answers.py) call.

Ranking (docs/recall.md) is hybrid, one list for notes and record together: the bricks' dense
ranking (MiniLM cosine over the topic's FAISS index) and full-text ranking (BM25, the index `nexus
search` keeps), and the record's full-text ranking (BM25 of the passage and of its message) and
dense ranking (the static model's cosine, `embedding/static_embedder.py`), fused by reciprocal rank
fusion, RRF = sum over rankings of 1 / (RRF_K + rank), ties by id. A passage that is a visible
brick's text at the same address is that brick: it comes back once, as the brick, with both the
brick's and the passage's ranks — the bricks' prior (a note ranks above the same sentence of the
record). A speaker or date the query names adds one more ranking. `--speaker`/`--since`/`--until`
filter instead (services/query_terms.py). The best fused candidates then go through the rerank
tiers (`rerank.py`), whose score is the final one.

Confidence (`recall/confidence.py`) is a documented, monotone mapping of that score, calibrated so
that a question the vault cannot answer scores low; the same bar decides `ask`'s refusal.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

from nexus_assets.recall.confidence import confidence
from nexus_assets.embedding.embedder import MODEL, embed
from nexus_assets.recall.evidence import evidence
from nexus_assets.recall.index import ensure
from nexus_assets.recall.rerank import Candidate, rerank
from nexus_assets.services.query_terms import Filters, dates_in, parse_day, speakers_in
from nexus_assets.services.recall_record import PASSAGE_MODEL, holding_topics, passage_source, record_rankings
from nexus_assets.store import Vault

OVERFETCH = 4  # candidates per wanted result, for the reranker to choose from
RRF_K = 60  # the usual constant of reciprocal rank fusion (Cormack et al. 2009)
FUSION_DEPTH = 100  # how deep each ranking is read before fusing
PASSAGE = "PASSAGE"  # a passage's state as the reranker reads it (no state weight: the bricks' prior)


class NothingToRecall(LookupError):
    """The topics asked about have visible bricks but none is embedded and no passage either: the
    vault was synced without recall. The message says how to build the embeddings."""


_speakers_cache: dict[tuple, list[str]] = {}


def _known_speakers(vault: Vault, db_path, wanted: list[str], hashes: dict) -> list[str]:
    key = (str(db_path), tuple(wanted), tuple(hashes.get(t) for t in wanted))
    if key not in _speakers_cache:
        _speakers_cache.clear()  # one vault state at a time is enough for a warm process
        _speakers_cache[key] = vault.recall.known_speakers(wanted)
    return _speakers_cache[key]


# Each ranking's weight in the fusion, set on LoCoMo (benchmarks/bench_locomo.py, every third
# question, hit@10): all 1.0 gave 0.679; the record's BM25 (the passage and its message) carries
# most (2.0 with the notes' rankings at 0.5: 0.716); a speaker or date the query names counts
# twice (1.0: 0.703). The notes' rankings still lift a brick over the same sentence of the record.
WEIGHTS = {"brick_dense": 0.5, "brick_bm25": 0.5, "record_bm25": 2.0, "record_dense": 1.0, "named": 2.0}


def _rrf(rankings: list[list[str]], weights: list[float] | None = None) -> dict[str, float]:
    """Weighted reciprocal rank fusion of best-first lists of ids, normalised so that first in every
    list is 1.0."""
    weights = weights or [1.0] * len(rankings)
    fused: dict[str, float] = {}
    for ranking, w in zip(rankings, weights):
        for rank, item in enumerate(ranking, 1):
            fused[item] = fused.get(item, 0.0) + w / (RRF_K + rank)
    top = sum(weights) / (RRF_K + 1) if rankings else 1.0
    return {b: s / top for b, s in fused.items()}


def recall(
    db_path: str | Path, query: str, topics: list[str] | None = None, k: int = 5, env: dict | None = None, *,
    speaker: str | None = None, since: str | None = None, until: str | None = None,
) -> dict:
    """The k results (bricks and passages) that best answer `query`. Writes nothing to the vault
    (invariant 16); a missing or out-of-step index beside it is rebuilt from the vault."""
    started = time.monotonic()
    given = Filters(speaker.strip() if speaker and speaker.strip() else None, parse_day(since, "since"), parse_day(until, "until"))
    depth = max(k * OVERFETCH, FUSION_DEPTH)
    with Vault.open(db_path, read_only=True) as vault:
        hashes = vault.latest_manifest_hashes()
        wanted = topics or sorted(hashes)
        notes = _note_rankings(vault, db_path, query, wanted, hashes, given, depth)
        record = record_rankings(vault, db_path, query, topics, wanted, given, depth)
        if notes["not_embedded"] and not notes["embedded"] and not record.available:
            raise NothingToRecall(
                f"no brick of {', '.join(wanted)} is embedded yet ({notes['not_embedded']} visible bricks) and no passage is "
                "indexed: the vault was synced with --no-recall or NEXUS_NO_RECALL=1, or by a release with another embedding "
                "model; run `nexus sync` without --no-recall to build them (only what is missing is built)"
            )
        pool = _Pool(vault, notes, record, wanted)
        named_speakers = [] if given.speaker else speakers_in(query, sorted({*_known_speakers(vault, db_path, wanted, hashes), *record.speakers}))
        named_days = None if (given.since or given.until) else dates_in(query)
        fused = pool.fused(vault, named_speakers, named_days)
        shortlist = sorted(fused, key=lambda i: (-fused[i], i))[: max(k * OVERFETCH, k)]
        candidates, shown = pool.candidates(vault, query, shortlist, fused)
    messages = {c.brick_id: _message_of(shown[c.brick_id]) for c in candidates}
    ranked, notes_fell = rerank(query, candidates, env, messages)
    stamp = datetime.now(timezone.utc).isoformat()
    results = [_result(rank, c, shown[c.brick_id], pool, stamp) for rank, c in enumerate(ranked[:k], 1)]
    return {
        "query": query,
        "model": MODEL,
        "models": {"bricks": MODEL, "passages": PASSAGE_MODEL},
        "topics": wanted,
        "filters": given.as_json(),
        # What the query named itself and recall ranked by (not filtered on).
        "named": {"speakers": named_speakers, "since": named_days[0] if named_days else None,
                  "until": named_days[1] if named_days else None},
        "results": results,
        "reranker_used": results[0]["reranker_used"] if results else None,
        "fell_through": notes_fell,
        "not_embedded": notes["not_embedded"],  # visible bricks recall cannot see until a sync with recall embeds them
        "latency_ms": int((time.monotonic() - started) * 1000),
    }


def _note_rankings(vault: Vault, db_path, query: str, wanted: list[str], hashes: dict, given: Filters, depth: int) -> dict:
    """The bricks' dense and BM25 rankings (and each candidate brick's cosine with the query)."""
    from nexus_assets.search import step as fulltext

    missing = vault.recall.unembedded_counts(wanted, MODEL)
    indexes = [ensure(vault, db_path, t, manifest_hash=hashes.get(t), unembedded=missing.get(t, 0))[0] for t in wanted]
    if not fulltext.in_step(vault, db_path, wanted):
        fulltext.refresh(vault, db_path, wanted)
    admitted = None
    if given:
        facts_all = vault.recall.source_facts(topic_ids=wanted, dates=bool(given.since or given.until))
        admitted = {b for b, facts in facts_all.items() if given.admits(facts)}
    embedded = any(idx.brick_ids for idx in indexes)
    dense: dict[str, float] = {}
    if embedded:
        qv = embed([query])
        dense = _dense(indexes, qv, admitted, depth)
    dense_ranking = sorted(dense, key=lambda b: (-round(dense[b], 6), b))[:depth]
    bm25 = fulltext.ranked_ids(db_path, query, wanted, depth if admitted is None else depth * 10)
    bm25_ranking = [b for b, _ in bm25 if admitted is None or b in admitted][:depth]
    if embedded:
        # A brick BM25 found below the dense cut still gets its cosine (its row of the index).
        for idx in indexes:
            rows = idx.rows
            for b in set(bm25_ranking) - dense.keys():
                if b in rows:
                    dense[b] = float(idx.index.reconstruct(rows[b]) @ qv[0])
    return {"dense": dense, "dense_ranking": dense_ranking, "bm25_ranking": bm25_ranking, "embedded": embedded,
            "not_embedded": sum(missing.values()), "bm25": bm25}


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


class _Pool:
    """Notes and record as one list of items: a brick id, or a passage id for a passage that is no
    visible brick's text at its address."""

    def __init__(self, vault: Vault, notes: dict, record, wanted: list[str]) -> None:
        self.notes, self.record = notes, record
        ids = {p for p, _, _ in record.bm25} | {p for p, _, _ in record.dense}
        self.rows = vault.passages.by_ids(ids, runs={r for _, _, r in record.bm25} | {r for _, _, r in record.dense})
        at = vault.recall.visible_bricks_at(((r.run_id, r.json_path, r.start, r.end) for r in self.rows.values()), wanted)
        # A passage at a brick's address is that brick (the first by id when two topics hold it).
        self.item = {p: (at.get((r.run_id, r.json_path, r.start, r.end)) or [p])[0] for p, r in self.rows.items()}
        self.passage_of = {item: p for p, item in self.item.items() if item != p}
        self.passage_cos = {p: c for p, c, _ in record.dense}
        self.item_cos = dict(notes["dense"])
        self.record_bm25 = self._items([p for p, _, _ in record.bm25])
        self.record_dense = self._items([p for p, _, _ in record.dense])
        self.bm25_rank = {b: i for i, (b, _) in enumerate(notes["bm25"], 1)}
        for i, p in enumerate(self.record_bm25, 1):
            self.bm25_rank.setdefault(p, i)
        self.dense_rank = {b: i for i, b in enumerate(notes["dense_ranking"], 1)}
        for i, p in enumerate(self.record_dense, 1):
            self.dense_rank.setdefault(p, i)

    def _items(self, passage_ids: list[str]) -> list[str]:
        out, seen = [], set()
        for p in passage_ids:
            item = self.item.get(p)
            if item is not None and item not in seen:
                seen.add(item)
                out.append(item)
        return out

    def is_passage(self, item: str) -> bool:
        return item in self.rows and self.item.get(item) == item

    def fused(self, vault: Vault, named_speakers: list[str], named_days) -> dict[str, float]:
        """The four rankings fused, with one more each for the speakers and the days the query names."""
        rankings = [self.notes["dense_ranking"], self.notes["bm25_ranking"], self.record_bm25, self.record_dense]
        weights = [WEIGHTS["brick_dense"], WEIGHTS["brick_bm25"], WEIGHTS["record_bm25"], WEIGHTS["record_dense"]]
        first = _rrf(rankings, weights)
        if named_speakers or named_days:
            by_fused = sorted(first, key=lambda i: (-first[i], i))
            facts = self._facts(vault, by_fused, bool(named_days))
            if named_speakers:
                said = {s.casefold() for s in named_speakers}
                rankings.append([i for i in by_fused if any((sp or "").casefold() in said for sp, _ in facts.get(i, ()))])
                weights.append(WEIGHTS["named"])
            if named_days:
                then = Filters(since=named_days[0], until=named_days[1])
                rankings.append([i for i in by_fused if then.admits(facts.get(i, []))])
                weights.append(WEIGHTS["named"])
        return _rrf(rankings, weights)

    def _facts(self, vault: Vault, items: list[str], dates: bool) -> dict[str, list[tuple]]:
        facts = vault.recall.source_facts(brick_ids=[i for i in items if not self.is_passage(i)], dates=dates)
        for i in items:
            if self.is_passage(i):
                r = self.rows[i]
                facts[i] = [(r.speaker, (r.timestamp or "")[:10] or None)]
        return facts

    def evidence(self, query: str, item: str, text: str) -> tuple[float, float]:
        """(similarity shown, evidence): a brick's MiniLM cosine, else its passage's static one."""
        if item in self.item_cos:
            return self.item_cos[item], evidence(query, text, self.item_cos[item], MODEL)
        passage = self.passage_of.get(item, item)
        cos = self.passage_cos.get(passage, 0.0)
        return cos, evidence(query, text, cos, PASSAGE_MODEL)

    def candidates(self, vault: Vault, query: str, shortlist: list[str], fused: dict[str, float]) -> tuple[list[Candidate], dict]:
        """The shortlist as the reranker's candidates, and what each result shows."""
        bricks = {b.brick_id: b for b in vault.bricks.select(brick_ids=[i for i in shortlist if not self.is_passage(i)])}
        topic_defs = {t: vault.topics.topic(t) for t in {b.topic_id for b in bricks.values()}}
        runs = {b.sources[0].run_id for b in bricks.values() if b.sources} | {self.rows[i].run_id for i in shortlist if self.is_passage(i)}
        files = {r: f for r, (f, _) in vault.runs.run_sources(runs).items()}
        self.names = vault.runs.run_names(runs)
        seq = vault.runs.ingestion_seq()
        order = sorted({seq.get(r, 0) for r in runs})
        place = {s: (i / (len(order) - 1) if len(order) > 1 else 1.0) for i, s in enumerate(order)}
        out, shown = [], {}
        for item in shortlist:
            if self.is_passage(item):
                row = self.rows[item]
                shown[item] = row
                sim, ev = self.evidence(query, item, row.text)
                # A passage carries the authority its run file has in the topics whose record holds it
                # (the highest of them), as a brick carries its topic's.
                for t in holding_topics(self.record.records, row):
                    if t not in topic_defs:
                        topic_defs[t] = vault.topics.topic(t)
                holders = [topic_defs[t] for t in holding_topics(self.record.records, row) if topic_defs[t]]
                authority = min((t.authority_of(files.get(row.run_id)) for t in holders), default=3)
                out.append(Candidate(brick_id=item, topic_id="", content=row.text, state=PASSAGE, similarity=sim, evidence=ev,
                                     kind="passage", authority=authority, recency=place.get(seq.get(row.run_id, 0), 0.0),
                                     fused=round(fused.get(item, 0.0), 6)))
                continue
            b = bricks.get(item)
            if b is None:
                continue
            shown[item] = b
            run = b.sources[0].run_id if b.sources else None
            topic = topic_defs.get(b.topic_id)
            sim, ev = self.evidence(query, item, b.content)
            out.append(Candidate(
                brick_id=item, topic_id=b.topic_id, content=b.content, state=b.state, similarity=sim, evidence=ev,
                authority=topic.authority_of(files.get(run)) if topic else 3, recency=place.get(seq.get(run, 0), 0.0),
                fused=round(fused.get(item, 0.0), 6),
            ))
        return out, shown


def _message_of(shown) -> str | None:
    """The message a result was said in (a brick's canonical source's): results of one message are
    spread out by the reranker (`rerank.spread`)."""
    if hasattr(shown, "sources"):
        return f"{shown.sources[0].run_id} {shown.sources[0].json_path}" if shown.sources else None
    return f"{shown.run_id} {shown.json_path}"


def _result(rank: int, c: Candidate, shown, pool: _Pool, stamp: str) -> dict:
    common = {
        "rank": rank, "id": c.brick_id, "content": c.content,
        "confidence": confidence(c.score, c.reranker_used),  # in rank order: never rises down the list
        "similarity": round(c.similarity, 6), "evidence": c.evidence, "fused": c.fused, "dense_rank": pool.dense_rank.get(c.brick_id),
        "bm25_rank": pool.bm25_rank.get(c.brick_id), "rerank_score": c.score, "reranker_used": c.reranker_used,
        "authority": c.authority, "retrieval_timestamp": stamp,
    }
    if c.state == PASSAGE:
        name = pool.names.get(shown.run_id)
        return {"kind": "passage", **common, "passage_id": c.brick_id, "topic_ids": holding_topics(pool.record.records, shown),
                "sources": [passage_source(shown, name)], "speaker": shown.speaker, "time": shown.timestamp,
                "message": f"{shown.run_id} {shown.json_path}",
                **(name.as_json() if name else {"run_title": None, "run_date": None})}
    name = pool.names.get(shown.sources[0].run_id) if shown.sources else None
    source = shown.sources[0] if shown.sources else None
    return {"kind": "brick", **common, "brick_id": c.brick_id, "topic_id": c.topic_id, "state": c.state,
            "sources": [s.model_dump(mode="json") for s in shown.sources],
            # The message the brick was said in (its canonical source), and the conversation's name.
            "message": f"{source.run_id} {source.json_path}" if source else None,
            **(name.as_json() if name else {"run_title": None, "run_date": None})}
