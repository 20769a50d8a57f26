"""The passages' full-text indexes (tantivy, BM25, the `en_stem` analyser `nexus search` uses):
one document per passage (who said it and what), and one per message (its text, the messages next
to it, its date), so a passage ranks by its own words and by its message's context (DESIGN §3.1).

Measured on LoCoMo (hit@10 of an evidence turn among the top ten sentences, BM25 alone): the
sentence with its speaker 0.584; adding its message (weight 0.3), the messages before and after it
(0.2) and the date (0.3) 0.645.

Nothing is stored in these indexes but ids: the text is in the vault. Forgetting rebuilds them, so a
forgotten run's words do not linger in old segments.
"""

from __future__ import annotations

import re
import time
from datetime import date
from pathlib import Path
from typing import Iterable

from nexus_assets.recall.passages.filters import RecordFilter

MESSAGE_BOOSTS = {"text": 0.3, "ctx": 0.2, "date": 0.3}
# A passage is found by its own words and, less, by the sentences just before and after it in its
# message ("PROPOSAL_BOND = 0.05 ether" is asked for in the words of the line under it).
PASSAGE_BOOSTS = {"text": 1.0, "near": 0.4}
LOCK_WAIT_S = 30.0
# Words are indexed with their counts, not their positions: BM25 reads only counts and field
# lengths, and a question is matched word by word (no phrase query), so every score is what it was
# with positions, in a smaller index (issue 61: bytes per passage; docs/recall.md).
RANKED = "freq"
_WORDS = re.compile(r"\w+", re.UNICODE)


def _passage_schema():
    import tantivy

    sb = tantivy.SchemaBuilder()
    # Stored as its 32 bytes and not indexed: nothing looks a passage up by its id here, and as an
    # indexed 64-character term it was a third of the index.
    sb.add_bytes_field("pid", stored=True, indexed=False)
    _filter_fields(sb)
    sb.add_text_field("msg", stored=True, tokenizer_name="raw")  # an address: no run text
    sb.add_text_field("text", stored=False, tokenizer_name="en_stem", index_option=RANKED)
    sb.add_text_field("near", stored=False, tokenizer_name="en_stem", index_option=RANKED)
    return sb.build()


def _message_schema():
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("key", stored=True, tokenizer_name="raw")
    _filter_fields(sb)
    for name in ("text", "ctx", "date"):
        sb.add_text_field(name, stored=False, tokenizer_name="en_stem", index_option=RANKED)
    return sb.build()


def _filter_fields(sb) -> None:
    for name in ("run", "nt", "hidden", "branch", "spk"):
        sb.add_text_field(name, stored=False, tokenizer_name="raw")
    sb.add_integer_field("day", stored=False, indexed=True, fast=True)


def open_index(path: Path, kind: str):
    import tantivy

    path.mkdir(parents=True, exist_ok=True)
    schema = _passage_schema() if kind == "passages" else _message_schema()
    return tantivy.Index(schema, path=str(path)), schema


WRITER_HEAP = 48_000_000


def writer_of(index):
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            # One indexing thread with a bounded heap: a sync's memory is what it holds, and the
            # embedding, not the postings, is what a refresh waits on.
            return index.writer(heap_size=WRITER_HEAP, num_threads=1)
        except ValueError:  # LockBusy: another process is writing this index
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def date_words(stamp: str | None) -> str:
    """A message's time as the words a question may use ("8 May 2023 Monday")."""
    if not stamp or len(stamp) < 10:
        return ""
    try:
        d = date.fromisoformat(stamp[:10])
    except ValueError:
        return ""
    return f"{d.isoformat()} {d.day} {d.strftime('%B')} {d.year} {d.strftime('%A')}"


def filter_fields(row, day: int) -> dict:
    return {"run": row.run_id, "nt": row.node_type, "hidden": "1" if row.hidden else "0",
            "branch": "current" if row.branch == "current" else "other", "spk": (row.speaker or "").casefold(), "day": day}


def add_passage(writer, row, key: str, text: str, near: str, day: int) -> None:
    import tantivy

    writer.add_document(tantivy.Document(pid=bytes.fromhex(row.passage_id), msg=key, text=text, near=near, **filter_fields(row, day)))


def add_message(writer, row, key: str, text: str, context: str, day: int) -> None:
    import tantivy

    writer.add_document(tantivy.Document(key=key, text=text, ctx=context, date=date_words(row.timestamp), **filter_fields(row, day)))


def delete_runs(writer, run_ids: Iterable[str]) -> None:
    for r in run_ids:
        writer.delete_documents_by_term("run", r)


def _filter_query(schema, filt: RecordFilter, speaker: str | None, days: tuple[int, int] | None):
    import tantivy

    Q, Occur = tantivy.Query, tantivy.Occur
    parts = []
    for part in filt.parts:
        must = [(Occur.Must, Q.term_set_query(schema, "nt", sorted(part.node_types)))]
        if part.runs is not None:
            must.append((Occur.Must, Q.term_set_query(schema, "run", sorted(part.runs))))
        if not part.hidden:
            must.append((Occur.Must, Q.term_query(schema, "hidden", "0")))
        if part.current_only:
            must.append((Occur.Must, Q.term_query(schema, "branch", "current")))
        parts.append((Occur.Should, Q.boolean_query(must)))
    clauses = [(Occur.Must, Q.boolean_query(parts))]
    if speaker is not None:
        clauses.append((Occur.Must, Q.term_query(schema, "spk", speaker.casefold())))
    if days is not None:
        clauses.append((Occur.Must, Q.range_query(schema, "day", tantivy.FieldType.Integer, days[0], days[1])))
    return clauses


def _hits(searcher, query, limit: int, field: str, runs: dict | None = None) -> list[tuple[str, float]]:
    """(stored id, score) of the hits; `runs` gathers each passage's run (from its message key)."""
    out = []
    for score, address in searcher.search(query, limit).hits:
        doc = searcher.doc(address)
        key = _stored_id(doc[field][0])
        out.append((key, round(float(score), 6)))
        if runs is not None:
            runs[key] = doc["msg"][0].split("\x1f", 1)[0]
    return out


def _stored_id(value) -> str:
    """A passage id as stored (its bytes) or a message key (text), as the rest of recall names it."""
    return value.hex() if isinstance(value, bytes) else value


def ranked(passages_index, messages_index, question: str, filt: RecordFilter, *, depth: int,
           speaker: str | None = None, days: tuple[int, int] | None = None, messages: int = 50) -> list[tuple[str, float, str]]:
    """(passage id, score, run id) best first: the passage's own BM25 plus its message's (text,
    context and date, weighted), over the passages the filter admits; ties by id."""
    import tantivy

    words = _WORDS.findall(question)
    if not words or filt.empty:
        return []
    Q, Occur = tantivy.Query, tantivy.Occur
    (p_index, p_schema), (m_index, m_schema) = passages_index, messages_index
    p_index.reload()
    m_index.reload()
    plain = " ".join(words)
    m_query, _ = m_index.parse_query_lenient(plain, list(MESSAGE_BOOSTS), field_boosts=MESSAGE_BOOSTS)
    m_search = m_index.searcher()
    top_messages = _hits(m_search, Q.boolean_query([(Occur.Must, m_query), *_filter_query(m_schema, filt, speaker, days)]), messages, "key")
    message_score: dict[str, float] = {}
    for key, score in top_messages:  # a message cut into pieces has a document each: its best counts
        message_score[key] = max(score, message_score.get(key, 0.0))
    p_query, _ = p_index.parse_query_lenient(plain, list(PASSAGE_BOOSTS), field_boosts=PASSAGE_BOOSTS)
    p_filter = _filter_query(p_schema, filt, speaker, days)
    searcher = p_index.searcher()
    run_of: dict[str, str] = {}
    scores = dict(_hits(searcher, Q.boolean_query([(Occur.Must, p_query), *p_filter]), depth, "pid", run_of))
    if top_messages:
        in_top = Q.term_set_query(p_schema, "msg", sorted(message_score))
        scores.update(_hits(searcher, Q.boolean_query([(Occur.Must, p_query), (Occur.Must, in_top), *p_filter]), 20 * messages, "pid", run_of))
        # Every passage of a top message gets its message's score, its own words or not.
        found = searcher.search(Q.boolean_query([(Occur.Must, in_top), *p_filter]), 40 * messages).hits
        msg_of = _messages_of(searcher, found)
        for pid, key in msg_of.items():
            scores[pid] = scores.get(pid, 0.0) + message_score.get(key, 0.0)
            run_of[pid] = key.split("\x1f", 1)[0]
    return sorted(((p, round(s, 6), run_of[p]) for p, s in scores.items()), key=lambda h: (-h[1], h[0]))[:depth]


def _messages_of(searcher, found) -> dict[str, str]:
    """passage id -> its message key, for hits of the passages index."""
    out = {}
    for _, address in found:
        doc = searcher.doc(address)
        out[_stored_id(doc["pid"][0])] = doc["msg"][0]
    return out
