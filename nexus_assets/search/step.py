"""`nexus search`: ranked full-text search (BM25) over the visible bricks of every topic.

The index is tantivy's (Lucene's design in Rust: BM25 scoring, stemming, phrase queries and
highlighted snippets), kept on disk beside the vault in `<vault stem>.search/`. It is derived
data: it records which manifest of each topic it holds, the pipeline brings a topic's documents
in step after publishing its manifest, a search brings any topic that is out of step (an older
vault, a sync from elsewhere), and forgetting removes the directory so the next use rebuilds it
from the vault alone — deleted documents must not linger in old segments.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Protocol

from nexus_assets.vault.connection import derived_path

if TYPE_CHECKING:
    from nexus_assets.topics.records import TopicRecords


class SearchStores(Protocol):
    """What the search index is built from: the topics and each one's newest manifest."""

    topics: TopicRecords

    def latest_manifest_hashes(self) -> dict[str, str]: ...

STATE_FILE = "nexus-index.json"
# Per topic, the newest `updated_at` of its bricks when the index last took it: what changed after
# it is all a refresh re-indexes.
MARKS_FILE = "nexus-index-marks.json"
LOCK_WAIT_S = 10.0
DEFAULT_LIMIT = 20


def index_dir(db_path: str | Path) -> Path:
    return derived_path(db_path, ".search")


def forget_index(db_path: str | Path) -> None:
    """Drop the whole index: the next search or sync rebuilds it from what the vault still holds."""
    shutil.rmtree(index_dir(db_path), ignore_errors=True)


def _schema():
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("brick_id", stored=True, tokenizer_name="raw")
    sb.add_text_field("topic_id", stored=True, tokenizer_name="raw")
    sb.add_text_field("content", stored=True, tokenizer_name="en_stem")
    return sb.build()


def _open(path: Path):
    import tantivy

    path.mkdir(parents=True, exist_ok=True)
    schema = _schema()
    return tantivy.Index(schema, path=str(path)), schema


def _state(file: Path) -> dict[str, str]:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def refresh(vault: SearchStores, db_path: str | Path, topics: Iterable[str] | None = None) -> list[str]:
    """Bring the index in step with each topic's latest manifest; returns the topics re-indexed.
    Returns [] without waiting forever when another process holds the index writer."""
    path = index_dir(db_path)
    hashes = vault.latest_manifest_hashes()
    held = _state(path / STATE_FILE) if (path / STATE_FILE).exists() else {}
    wanted = set(hashes) if topics is None else set(topics) & set(hashes)
    stale = sorted(t for t in wanted if held.get(t) != hashes[t])
    gone = sorted(t for t in held if t not in hashes)
    if not stale and not gone:
        return []
    index, _ = _open(path)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            writer = index.writer()
            break
        except ValueError:  # LockBusy: another process is writing the index
            if time.monotonic() > deadline:
                return []
            time.sleep(0.2)
    import tantivy

    marks = _state(path / MARKS_FILE) if held else {}
    new_marks = {}
    try:
        for t in gone:
            writer.delete_documents_by_term("topic_id", t)
        for t in stale:
            new_marks[t] = vault.topics.last_brick_update(t)
            # Only the bricks written since the index last took the topic, when it holds the topic
            # at all: a new run into a large topic re-indexes its few bricks, not all of them.
            changed = vault.topics.texts_updated_since(t, marks[t]) if t in held and marks.get(t) else None
            if changed is None:
                writer.delete_documents_by_term("topic_id", t)
                texts = ((brick_id, content, True) for brick_id, content in vault.topics.visible_texts(t))
            else:
                texts = changed
                for brick_id, _, _ in changed:
                    writer.delete_documents_by_term("brick_id", brick_id)
            for brick_id, content, visible in texts:
                if visible:
                    writer.add_document(tantivy.Document(brick_id=brick_id, topic_id=t, content=content))
        writer.commit()
        writer.wait_merging_threads()
    finally:
        del writer
    state = {t: h for t, h in _state(path / STATE_FILE).items() if t in hashes}
    state.update({t: hashes[t] for t in stale})
    marks = {t: m for t, m in marks.items() if t in hashes}
    marks.update({t: m for t, m in new_marks.items() if m is not None})
    # The marks first: a state without its mark only makes the next refresh a whole one.
    _write(path / MARKS_FILE, marks)
    _write(path / STATE_FILE, state)
    return stale


def _write(target: Path, state: dict[str, str]) -> None:
    tmp = target.with_name(target.name + ".partial")
    tmp.write_text(json.dumps(state, sort_keys=True), encoding="utf-8")
    tmp.replace(target)


# A process that searches often (recall in the API, a --repl) opens each index once; reload()
# before each search picks up what a sync committed since. Keyed by the folder's inode too: a
# forgotten source removes the folder and the next use builds a new one, which must be read afresh.
_opened: dict[tuple, tuple] = {}


def _opened_index(path: Path):
    key = (str(path.resolve()), path.stat().st_ino)
    if key not in _opened:
        _opened.clear()
        _opened[key] = _open(path)
    return _opened[key]


def in_step(vault: SearchStores, db_path: str | Path, topics: Iterable[str]) -> bool:
    """Whether the index holds each of these topics' latest manifest (nothing to refresh)."""
    held = _state(index_dir(db_path) / STATE_FILE)
    hashes = vault.latest_manifest_hashes()
    return all(held.get(t) == hashes[t] for t in topics if t in hashes)


_WORDS = re.compile(r"\w+", re.UNICODE)


def ranked_ids(db_path: str | Path, text: str, topics: Iterable[str], limit: int) -> list[tuple[str, float]]:
    """(brick id, BM25 score) for `text` read as plain words (no query syntax: a question's
    punctuation is not an operator), best first, ties by brick id; recall's full-text ranking."""
    import tantivy

    path = index_dir(db_path)
    words = _WORDS.findall(text)
    wanted = sorted(set(topics))
    if limit < 1 or not words or not wanted or not (path / STATE_FILE).exists():
        return []
    index, schema = _opened_index(path)
    index.reload()
    searcher = index.searcher()
    query, _ = index.parse_query_lenient(" ".join(words), ["content"])
    scope = tantivy.Query.boolean_query(
        [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "topic_id", t)) for t in wanted]
    )
    query = tantivy.Query.boolean_query([(tantivy.Occur.Must, query), (tantivy.Occur.Must, scope)])
    found = searcher.search(query, limit + 20).hits
    scored = [(searcher.doc(address)["brick_id"][0], round(float(score), 6)) for score, address in found]
    return sorted(scored, key=lambda h: (-h[1], h[0]))[:limit]


@dataclass(frozen=True)
class Hit:
    brick_id: str
    topic_id: str
    content: str
    score: float
    highlights: tuple[tuple[int, int], ...]  # code-point offsets into content


def _char_spans(text: str, fragment: str, byte_spans) -> tuple[tuple[int, int], ...]:
    base = text.find(fragment)
    raw = fragment.encode("utf-8")
    spans = []
    for r in byte_spans:
        start = len(raw[: r.start].decode("utf-8", "ignore"))
        end = len(raw[: r.end].decode("utf-8", "ignore"))
        spans.append((base + start, base + end))
    return tuple(spans)


def search(db_path: str | Path, text: str, topics: Iterable[str] | None = None, limit: int = DEFAULT_LIMIT) -> list[Hit]:
    """Bricks ranked by BM25 for `text` (words, or "a phrase" in quotes), best first."""
    import tantivy

    path = index_dir(db_path)
    if limit < 1 or not (path / STATE_FILE).exists():
        return []
    index, schema = _open(path)
    index.reload()
    searcher = index.searcher()
    try:
        query = index.parse_query(text, ["content"])
    except ValueError:
        # Unbalanced quotes and the like: read it as plainly as possible rather than refuse.
        query, _ = index.parse_query_lenient(text, ["content"])
    wanted = sorted(set(topics or ()))
    if wanted:
        scope = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "topic_id", t)) for t in wanted]
        )
        query = tantivy.Query.boolean_query([(tantivy.Occur.Must, query), (tantivy.Occur.Must, scope)])
    snippets = tantivy.SnippetGenerator.create(searcher, query, schema, "content")
    snippets.set_max_num_chars(1_000_000)
    # Bricks tied at the cut are chosen by id, not by the index's layout: fetch past the last tie.
    fetch = limit + 20
    while True:
        found = searcher.search(query, fetch).hits
        if len(found) < fetch or round(found[-1][0], 6) < round(found[limit - 1][0], 6):
            break
        fetch *= 2
    hits = []
    for score, address in found:
        doc = searcher.doc(address)
        content = doc["content"][0]
        snippet = snippets.snippet_from_doc(doc)
        hits.append(
            Hit(
                brick_id=doc["brick_id"][0],
                topic_id=doc["topic_id"][0],
                content=content,
                score=float(score),
                highlights=_char_spans(content, snippet.fragment(), snippet.highlighted()),
            )
        )
    # Equal scores in a stable order: the same query always lists the same way.
    return sorted(hits, key=lambda h: (-round(h.score, 6), h.topic_id, h.brick_id))[:limit]
