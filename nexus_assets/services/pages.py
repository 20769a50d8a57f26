"""What the viewer shows, read from the vault: plain data for the templates and the trace API. The
viewer (`nexus_assets/web/`) renders these; it opens no vault and calls no phase itself."""

from __future__ import annotations

import copy
import json
import re
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from nexus_assets.core.models import Brick, Manifest, Topic
from nexus_assets.core.paths import resolve_string, value_at
from nexus_assets.embedding.embedder import (
    MODEL as EMBEDDING_MODEL,  # the name only: no model loads
)
from nexus_assets.relate.step import conflict_rows, related_rows
from nexus_assets.ingest.names import RunName
from nexus_assets.search.step import refresh, search
from nexus_assets.trace.step import trace_brick
from nexus_assets.store import Vault
from nexus_assets.vault.address import is_postgres, parse_address
from nexus_assets.vault.connection import connect
from nexus_assets.vault.records import RunVersion

STATES = ("IMPROVISE", "FORMING", "FINAL", "SUPERSEDED")


class NoVault(Exception):
    """The vault file is missing or was never synced."""


@contextmanager
def reading(address: str, *, wait_s: float) -> Iterator[Vault]:
    """The vault opened for the viewer's reads: never migrated (a reader leaves an older file as it
    is), waiting up to `wait_s` for a sync that holds the file (then VaultBusy). NoVault when there
    is nothing to show yet."""
    if is_postgres(address):
        with Vault.open(address, read_only=True) as vault:
            if not vault.history.holds_vault_tables():
                raise NoVault(f"{vault.address.shown} holds no vault tables yet; run `nexus sync` first")
            yield vault
        return
    address = parse_address(address)  # with its options (DuckDB's memory), as the shell handed it
    db_path = Path(address)
    if not db_path.exists():
        raise NoVault(f"no vault at {db_path}; run `nexus sync` first, or pass --db")
    conn = connect(db_path, read_only=True, wait_s=wait_s, memory=address.options.memory)
    try:
        vault = Vault(conn, migrate=False)
        if not vault.history.holds_vault_tables():
            raise NoVault(f"{db_path} holds no vault tables yet; run `nexus sync` first")
        yield vault
    finally:
        conn.close()


def brick_prefix(vault: Vault, prefix: str) -> list[str]:
    """The brick ids a trace URL's prefix names (none, one, or several: ambiguous)."""
    return vault.history.brick_ids_with_prefix(prefix)


@dataclass(frozen=True)
class PassagePage:
    """A passage in its message (`/passages/<id>`): its trace (trace/step.py: text, source, speaker,
    time, the conversation, whether the run file still holds it, the passages around it) and the
    message cut to those passages, the passage's span marked in it."""

    passage: dict
    window: str  # the message from the first passage around it to the last, verbatim
    marked: tuple[int, int]  # the passage's characters in `window`
    cut_before: bool  # the message goes on before the window
    cut_after: bool
    previous_id: str | None  # the passages next to it in its message
    next_id: str | None

    @property
    def source(self) -> dict:
        return self.passage["sources"][0]


def passage_page(vault: Vault, given: str) -> PassagePage:
    """The passage a passage id, or a unique prefix of one, names; NotFound (queries) says why not."""
    from nexus_assets.services.queries import find_passage, passage_trace_of

    traced = passage_trace_of(vault, find_passage(vault, given))
    source, around, node = traced["sources"][0], traced["around"], traced["node_text"]
    first, last = (around[0]["start"], around[-1]["end"]) if around else (source["start"], source["end"])
    ids = [p["passage_id"] for p in around]
    at = ids.index(traced["passage_id"]) if traced["passage_id"] in ids else None
    return PassagePage(
        passage=traced,
        window=node[first:last] if node else traced["content"],
        marked=(source["start"] - first, source["end"] - first) if node else (0, len(traced["content"])),
        cut_before=bool(node) and first > 0 and bool(node[:first].strip()),
        cut_after=bool(node) and bool(node[last:].strip()),
        previous_id=ids[at - 1] if at else None,
        next_id=ids[at + 1] if at is not None and at + 1 < len(ids) else None,
    )


@dataclass(frozen=True)
class LastSync:
    status: str
    finished_at: datetime

    @property
    def when(self) -> str:
        return self.finished_at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True)
class TopicOverview:
    topic: Topic
    counts: dict[str, int]
    stale: int
    rejections: dict[str, int]
    last_sync: LastSync | None
    manifest_hash: str | None

    @property
    def visible(self) -> int:
        return sum(n for state, n in self.counts.items() if state != "SUPERSEDED")

    @property
    def rejected(self) -> int:
        return sum(self.rejections.values())


@dataclass(frozen=True)
class BrickView:
    brick: Brick
    runs: list[RunName]  # the conversations it was said in, as a person names them
    # (text, is_search_hit) pieces of the content, so the template escapes each piece itself.
    segments: list[tuple[str, bool]]
    history: list[Brick] = field(default_factory=list)
    related: int = 0  # related bricks (docs/conflicts.md)
    conflicts: int = 0  # of them, stating other values


@dataclass(frozen=True)
class TopicPage:
    summary: TopicOverview
    bricks: list[BrickView]
    query: str
    manifest: Manifest | None
    conflicts: int = 0

    @property
    def topic(self) -> Topic:
        return self.summary.topic


def _last_syncs(vault: Vault) -> dict[str, LastSync]:
    return {t: LastSync(status, at) for t, (status, at) in vault.history.last_syncs().items()}


def _stale_counts(vault: Vault) -> dict[str, int]:
    return vault.history.stale_counts()


def _summary(vault: Vault, topic: Topic, counts, stale, syncs) -> TopicOverview:
    manifest = vault.bricks.latest_manifest(topic.topic_id)
    return TopicOverview(
        topic=topic,
        counts={s: counts.get(topic.topic_id, {}).get(s, 0) for s in STATES},
        stale=stale.get(topic.topic_id, 0),
        rejections=vault.occurrences.rejection_counts(topic.topic_id),
        last_sync=syncs.get(topic.topic_id),
        manifest_hash=manifest.manifest_hash if manifest else None,
    )


def topic_summaries(vault: Vault) -> list[TopicOverview]:
    counts, stale, syncs = vault.brick_counts(), _stale_counts(vault), _last_syncs(vault)
    return [_summary(vault, t, counts, stale, syncs) for t in vault.topics.all()]


def search_segments(text: str, pattern: re.Pattern | None) -> list[tuple[str, bool]]:
    if pattern is None:
        return [(text, False)]
    pieces, at = [], 0
    for m in pattern.finditer(text):
        if m.start() > at:
            pieces.append((text[at : m.start()], False))
        pieces.append((m.group(), True))
        at = m.end()
    if at < len(text):
        pieces.append((text[at:], False))
    return pieces


def _history(brick_id: str, children: dict[str, list[Brick]]) -> list[Brick]:
    """Every fragment this brick superseded, directly or through a fragment it superseded."""
    out: list[Brick] = []
    for child in children.get(brick_id, []):
        out.append(child)
        out += _history(child.brick_id, children)
    return out


def highlight_segments(text: str, spans) -> list[tuple[str, bool]]:
    pieces, at = [], 0
    for start, end in spans:
        if start > at:
            pieces.append((text[at:start], False))
        pieces.append((text[start:end], True))
        at = end
    if at < len(text):
        pieces.append((text[at:], False))
    return pieces


def topic_page(vault: Vault, topic_id: str, query: str = "", db_path=None) -> TopicPage | None:
    topic = vault.topics.topic(topic_id)
    if topic is None:
        return None
    summary = _summary(vault, topic, vault.brick_counts(), _stale_counts(vault), _last_syncs(vault))
    manifest = vault.bricks.latest_manifest(topic_id)
    bricks = vault.bricks.select(topic_id)
    children: dict[str, list[Brick]] = {}
    for b in bricks:
        if b.state == "SUPERSEDED" and b.superseded_by:
            children.setdefault(b.superseded_by, []).append(b)
    visible = [b for b in bricks if b.state != "SUPERSEDED"]
    if manifest is not None:
        position = {e.brick_id: i for i, e in enumerate(manifest.bricks)}
        visible.sort(key=lambda b: (position.get(b.brick_id, len(position)), b.order_index or 0))
    related, conflicted = _relation_counts(vault, topic_id)
    names = vault.runs.run_names(s.run_id for b in visible for s in b.sources)
    query = query.strip()
    if query and db_path is not None:
        # Ranked full-text search (BM25), the same as `nexus search --topic`.
        refresh(vault, db_path, [topic_id])
        by_id = {b.brick_id: b for b in visible}
        hits = [h for h in search(db_path, query, [topic_id], limit=max(1, len(visible))) if h.brick_id in by_id]
        views = [
            BrickView(
                brick=by_id[h.brick_id],
                runs=[names[r] for r in dict.fromkeys(s.run_id for s in by_id[h.brick_id].sources)],
                segments=highlight_segments(h.content, h.highlights),
                history=_history(h.brick_id, children),
                related=related.get(h.brick_id, 0),
                conflicts=conflicted.get(h.brick_id, 0),
            )
            for h in hits
        ]
        return TopicPage(summary=summary, bricks=views, query=query, manifest=manifest, conflicts=sum(conflicted.values()) // 2)
    # Plain substring, any case: the query is escaped, never read as a pattern.
    pattern = re.compile(re.escape(query), re.IGNORECASE) if query else None
    views = [
        BrickView(
            brick=b,
            runs=[names[r] for r in dict.fromkeys(s.run_id for s in b.sources)],
            segments=search_segments(b.content, pattern),
            history=_history(b.brick_id, children),
            related=related.get(b.brick_id, 0),
            conflicts=conflicted.get(b.brick_id, 0),
        )
        for b in visible
        if pattern is None or pattern.search(b.content)
    ]
    return TopicPage(summary=summary, bricks=views, query=query, manifest=manifest, conflicts=sum(conflicted.values()) // 2)


def _relation_counts(vault: Vault, topic_id: str) -> tuple[dict[str, int], dict[str, int]]:
    """Per visible brick: how many bricks it is related to, and how many of them conflict with it."""
    related: dict[str, int] = {}
    conflicted: dict[str, int] = {}
    for p in vault.relations.pairs(topic_id, EMBEDDING_MODEL):
        for b in (p["brick_a"], p["brick_b"]):
            related[b] = related.get(b, 0) + 1
            if p["conflict"]:
                conflicted[b] = conflicted.get(b, 0) + 1
    return related, conflicted


@dataclass(frozen=True)
class ConflictPage:
    summary: TopicOverview
    conflicts: list[dict]

    @property
    def topic(self) -> Topic:
        return self.summary.topic


def conflict_page(vault: Vault, topic_id: str) -> ConflictPage | None:
    """The Conflict View: related bricks stating different values, side by side (docs/conflicts.md)."""
    topic = vault.topics.topic(topic_id)
    if topic is None:
        return None
    summary = _summary(vault, topic, vault.brick_counts(), _stale_counts(vault), _last_syncs(vault))
    return ConflictPage(summary=summary, conflicts=conflict_rows(vault, topic_id, EMBEDDING_MODEL))


def json_around(document, json_path: str) -> tuple[str, str]:
    """The run pretty-printed, split where the node's string literal stands.

    The node itself is shown decoded between the two halves: offsets count code points of the
    decoded string (docs/invariants.md §1), which JSON escapes like `\\n` or `\\"` would shift.
    """
    steps, _ = resolve_string(document, json_path)
    marker = f"\x00nexus-node-{uuid.uuid4().hex}\x00"
    doc = copy.deepcopy(document)
    value_at(doc, steps[:-1])[steps[-1]] = marker
    before, after = json.dumps(doc, indent=2, ensure_ascii=False).split(json.dumps(marker), 1)
    return before, after


def brick_trace(vault: Vault, brick_id: str) -> dict | None:
    """`nexus trace --json` for one brick, plus what the source panel needs to draw it.

    Each source gets `before`/`quote`/`after` sliced here in Python (code points; JavaScript
    would slice UTF-16 units) and `json_before`/`json_after`, the rest of its run document.
    """
    found = vault.bricks.select(brick_ids=[brick_id])
    if not found:
        return None
    traced = trace_brick(vault, brick_id)
    runs = vault.runs.load_runs(
        {RunVersion(t["run_id"], t["version_id"]) for t in traced["traces"] if t["version_id"]}
    )
    for t in traced["traces"]:
        node, start, end = t["node_text"], t["start"], t["end"]
        t["before"], t["after"] = node[:start], node[end:]
        run = runs.get(RunVersion(t["run_id"], t["version_id"])) if t["version_id"] else None
        t["json_before"], t["json_after"] = json_around(run.document, t["json_path"]) if run else (None, None)
        # Each source's own recorded status (invariant 14): what verify, bricks and the check say.
        t["checksum_matches"] = t["current"]
        t["problems"] = [t["problem"]] if t["problem"] else []
    # The brick view: its related bricks (nearest first, conflicts marked) and the superseded
    # fragments under it (the shadow stack), each with its canonical source.
    traced["related"] = related_rows(vault, traced["brick_id"], EMBEDDING_MODEL)
    traced["history"] = _history_of(vault, found[0])
    return traced


def _history_of(vault: Vault, brick: Brick) -> list[dict]:
    """Every fragment this brick superseded, directly or through another, oldest first."""
    children: dict[str, list[Brick]] = {}
    for b in vault.bricks.select(brick.topic_id, state="SUPERSEDED"):
        if b.superseded_by:
            children.setdefault(b.superseded_by, []).append(b)
    stack = _history(brick.brick_id, children)
    stack.sort(key=lambda b: (b.order_index if b.order_index is not None else -1, b.brick_id))
    return [
        {"brick_id": b.brick_id, "content": b.content, "superseded_by": b.superseded_by,
         "run_id": b.sources[0].run_id if b.sources else None, "json_path": b.sources[0].json_path if b.sources else None}
        for b in stack
    ]
