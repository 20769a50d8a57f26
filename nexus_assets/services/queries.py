"""The read and answer use cases below the shells: topics, bricks, a manifest, one brick and its
lineage, search, conflicts, recall and ask. The CLI's `--json`, the HTTP API and the MCP tools
call these and render the same models (nexus_assets/schemas.py). No argparse, no printing.

A use case with bounded arguments takes its typed request (services/requests.py: `RecallRequest`,
`AskRequest`, `SearchRequest`, `BricksPage`, `BrickLookup`, `PassageLookup`), so its bounds were
checked when the shell built it; what is left here is what a schema cannot say (blank text, an
unknown topic).

Ids: a brick id or a unique prefix of one (`find_brick`); a passage id or a unique prefix of one,
of at least a brick prefix's length (`find_passage`); and, where either opens (`nexus trace`,
MCP `get_brick`), `find_brick_or_passage`, the one rule every shell applies.

Errors: `NotFound` (no vault, an unknown topic, brick or passage, a passage prefix that names no
one passage) and `BadQuery` (an argument that cannot be answered); each message names the
argument and the fix.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping

from nexus_assets.vault.address import vault_exists
from nexus_assets.core.bounds import BRICK_ID_CHARS
from nexus_assets.core.utf8 import utf8_problem

if TYPE_CHECKING:
    from nexus_assets.services.requests import AskRequest, BrickLookup, BricksPage, PassageLookup, RecallRequest, SearchRequest


class NotFound(LookupError):
    """No vault, or no such topic or brick in it."""


class BadQuery(ValueError):
    """An argument that cannot be answered (empty text, k below 1, an ambiguous brick prefix)."""


@contextmanager
def open_read(db: str | Path) -> Iterator:
    from nexus_assets.store import Vault

    if not vault_exists(db):
        raise NotFound(f"no vault at {db}; run `nexus sync` first, or pass --db PATH")
    with Vault.open(db, read_only=True) as vault:
        yield vault


def require_topic(vault, topic_id: str) -> None:
    if vault.topic_state(topic_id) is None:
        known = ", ".join(t["topic_id"] for t in vault.topic_summaries()) or "none"
        raise NotFound(f"unknown topic {topic_id!r}; topics in the vault: {known}")


def require_text(text: str | None, what: str, empty: str | None = None) -> str:
    problem = utf8_problem(text or "")
    if problem:
        raise BadQuery(f"the {what} is {problem}; pass it as UTF-8 text")
    if not (text or "").strip():
        raise BadQuery(empty or f"give a {what}")
    return text  # type: ignore[return-value]


def find_brick(vault, brick_id: str) -> str:
    """A brick id, or a unique prefix of one."""
    matches = vault.history.brick_ids_with_prefix(brick_id)
    if not matches:
        raise NotFound(f"no brick {brick_id!r}; list them with `nexus bricks TOPIC`")
    if len(matches) > 1:
        raise BadQuery(f"brick id prefix {brick_id!r} is ambiguous; give more characters")
    return matches[0]


# A passage is named by at least as many characters of its id as the API and the MCP tools take for a brick's.
PASSAGE_PREFIX_CHARS = BRICK_ID_CHARS[0]


def _passage_prefixed(vault, given: str) -> list[str]:
    """Passage ids (at most two) that start with `given`; none for a prefix shorter than PASSAGE_PREFIX_CHARS."""
    return vault.passages.ids_with_prefix(given, limit=2) if len(given) >= PASSAGE_PREFIX_CHARS else []


def _one_passage(given: str, matches: list[str]) -> str:
    """The passage `given` names; an unknown id and a prefix of several are both no one passage (404)."""
    if not matches:
        short = f" (a passage id takes at least {PASSAGE_PREFIX_CHARS} characters)" if len(given) < PASSAGE_PREFIX_CHARS else ""
        raise NotFound(f"no passage {given!r}{short}; `nexus recall QUERY` finds passages and gives their ids")
    if len(matches) > 1:
        raise NotFound(f"passage id prefix {given!r} names more than one passage; give more characters")
    return matches[0]


def find_passage(vault, passage_id: str) -> str:
    """A passage id (of any version of its run), or a unique prefix of one."""
    return _one_passage(passage_id, _passage_prefixed(vault, passage_id))


def find_brick_or_passage(vault, given: str) -> tuple[str, str]:
    """("brick", id) or ("passage", id): what a brick id or a passage id, or a unique prefix of
    either, names (`nexus trace`, MCP `get_brick`). A brick is found as `find_brick` finds it, and
    an id shorter than PASSAGE_PREFIX_CHARS names a brick or nothing, as before passages existed; a
    prefix of both a brick's id and a passage's names neither."""
    bricks = vault.history.brick_ids_with_prefix(given)
    passages = _passage_prefixed(vault, given)
    if bricks and passages:
        raise BadQuery(f"id prefix {given!r} starts a brick's id and a passage's; give more characters")
    if passages:
        return "passage", _one_passage(given, passages)
    if not bricks and len(given) >= PASSAGE_PREFIX_CHARS:
        raise NotFound(f"no brick or passage {given!r}; list bricks with `nexus bricks TOPIC`, find passages with `nexus recall QUERY`")
    if not bricks:
        raise NotFound(f"no brick {given!r}; list them with `nexus bricks TOPIC` (a passage id takes at least {PASSAGE_PREFIX_CHARS} characters)")
    return "brick", find_brick(vault, given)


# Topics


def topic_rows(vault) -> list[dict]:
    """Every recorded topic with its brick counts by state (plain rows: `nexus topics` loads no models)."""
    counts = vault.brick_counts()
    hashes = vault.latest_manifest_hashes()
    rows = []
    for t in vault.topic_summaries():
        by_state = counts.get(t["topic_id"], {})
        rows.append(
            {
                **t,
                "bricks": by_state,
                "visible_bricks": sum(n for s, n in by_state.items() if s != "SUPERSEDED"),
                "manifest_hash": hashes.get(t["topic_id"]),
            }
        )
    return rows


def topics(db: str | Path) -> list:
    from nexus_assets.schemas import TopicSummary

    with open_read(db) as vault:
        return [TopicSummary(**r) for r in topic_rows(vault)]


# Bricks


def named_bricks(vault, bricks, left: Mapping[str, str] | None = None) -> list:
    """Bricks as BrickOut: each source with its conversation's title and start date; `left`: why
    a brick left the manifest, by brick id (`left_because`)."""
    from nexus_assets.schemas import BrickOut

    names = vault.runs.run_names(s.run_id for b in bricks for s in b.sources)
    out = []
    for b in bricks:
        data = b.model_dump(mode="json")
        if left and b.brick_id in left:
            data["left_because"] = left[b.brick_id]
        for source in data["sources"]:
            name = names.get(source["run_id"])
            source.update(name.as_json() if name else {"run_title": None, "run_date": None})
        out.append(BrickOut.model_validate(data))
    return out


def bricks(db: str | Path, page: BricksPage) -> list:
    """A page of a topic's bricks in manifest order: visible ones, or all with `include_superseded`;
    `min_state` keeps those at or above it (IMPROVISE < FORMING < FINAL)."""
    from nexus_assets.schemas import STATE_RANK

    topic_id, limit, offset = page.topic_id, page.limit, page.offset
    with open_read(db) as vault:
        require_topic(vault, topic_id)
        selected = vault.bricks.select(topic_id)
        if not page.include_superseded:
            selected = [b for b in selected if b.state != "SUPERSEDED"]
        floor = STATE_RANK[page.min_state]
        # A superseded brick stays listed when asked for: it is off the ladder, not below it.
        selected = [b for b in selected if b.state == "SUPERSEDED" or STATE_RANK[b.state] >= floor]
        selected = selected[offset : None if limit is None else offset + limit]
        left = left_because(vault, topic_id, selected) if page.include_superseded else None
        return named_bricks(vault, selected, left)


def brick(db: str | Path, lookup: BrickLookup):
    with open_read(db) as vault:
        (found,) = vault.bricks.select(brick_ids=[find_brick(vault, lookup.brick_id)])
        return named_bricks(vault, [found])[0]


def manifest(db: str | Path, topic_id: str):
    from nexus_assets.schemas import ManifestOut

    with open_read(db) as vault:
        require_topic(vault, topic_id)
        m = vault.bricks.latest_manifest(topic_id)
    if m is None:
        raise NotFound(f"topic {topic_id!r} has no manifest yet; run `nexus sync --topic {topic_id}`")
    return ManifestOut(topic_id=m.topic_id, manifest_hash=m.manifest_hash, previous_hash=m.previous_hash, bricks=list(m.bricks))


def lineage_of(vault, brick_id: str) -> dict:
    (found,) = vault.bricks.select(brick_ids=[find_brick(vault, brick_id)])
    data = {
        "direction": "backwards",
        "brick": {"brick_id": found.brick_id, "topic_id": found.topic_id, "state": found.state,
                  "fingerprint": found.fingerprint, "order_index": found.order_index, "content": found.content},
        **vault.forgetting.brick_lineage(found.brick_id),
    }
    topic = vault.topics.topic(found.topic_id)
    data["sealed"] = bool(topic and topic.state == "LOCKED")
    return data


def lineage(db: str | Path, lookup: BrickLookup):
    from nexus_assets.schemas import Lineage

    with open_read(db) as vault:
        return Lineage.model_validate(lineage_of(vault, lookup.brick_id))


CONTEXT_CHARS = 200  # verbatim source text shown either side of a quote (get_brick)


def trace_of(vault, brick_id: str) -> dict:
    """`nexus trace`: each source address of the brick, the node it was lifted from, with its span."""
    from nexus_assets.trace.step import trace_brick

    return trace_brick(vault, brick_id)


def passage_trace_of(vault, passage_id: str, *, viewer_url: str | None = None) -> dict:
    """`nexus trace` of a passage (trace/step.py): where it was said, the whole message as
    `node_text`, and a link to its viewer page under `viewer_url` (NEXUS_VIEWER_URL, as the shell
    read it). Without `node_text` it is the passage object (`PassageOut`)."""
    from nexus_assets.core.links import passage_url
    from nexus_assets.trace.step import trace_passage

    traced = trace_passage(vault, passage_id)
    if traced is None:
        raise NotFound(f"no passage {passage_id!r}; `nexus recall QUERY` finds passages and gives their ids")
    return {**traced, "viewer_url": passage_url(traced["passage_id"], viewer_url)}


def passage_out(traced: dict):
    """The passage object the API and the MCP tools answer: a passage's trace without the whole message."""
    from nexus_assets.schemas import PassageOut

    return PassageOut.model_validate({k: v for k, v in traced.items() if k != "node_text"})


def passage(db: str | Path, lookup: PassageLookup, *, viewer_url: str | None = None):
    """`GET /v1/passages/{id}`: one passage, its source, the text around it and its viewer link."""
    with open_read(db) as vault:
        return passage_out(passage_trace_of(vault, find_passage(vault, lookup.passage_id), viewer_url=viewer_url))


def brick_detail(db: str | Path, lookup: BrickLookup, *, viewer_url: str | None = None) -> dict:
    """A brick for an agent (MCP `get_brick`): the brick, each source with the verbatim text around
    the quote, its lineage and a link to the viewer at `viewer_url` (NEXUS_VIEWER_URL, as the shell
    read it). A passage id (or prefix) answers the passage object instead (`passage_out`)."""
    from nexus_assets.trace.step import trace_brick
    from nexus_assets.core.links import topic_url

    with open_read(db) as vault:
        kind, found = find_brick_or_passage(vault, lookup.brick_id)
        if kind == "passage":
            return passage_out(passage_trace_of(vault, found, viewer_url=viewer_url)).model_dump(mode="json")
        (b,) = named_bricks(vault, vault.bricks.select(brick_ids=[found]))
        traced = trace_brick(vault, found)
        history = lineage_of(vault, found)
    sources = []
    for t in traced["traces"]:
        text, start, end = t["node_text"], t["start"], t["end"]
        sources.append(
            {
                "run_id": t["run_id"], "json_path": t["json_path"], "start": start, "end": end,
                "node_checksum": t["node_checksum"], "run_title": t["run_title"], "run_date": t["run_date"],
                "current": t["current"], "problem": t["problem"],
                "before": text[max(0, start - CONTEXT_CHARS) : start], "quote": text[start:end],
                "after": text[end : end + CONTEXT_CHARS],
            }
        )
    return {
        "brick": b.model_dump(mode="json"),
        "sources": sources,
        "lineage": {k: history[k] for k in ("sources", "manifests", "answers", "sealed") if k in history},
        "viewer_url": f"{topic_url(b.topic_id, viewer_url)}#brick-{b.brick_id}",
    }


# Search and conflicts


def search(db: str | Path, request: SearchRequest) -> list:
    from nexus_assets.schemas import SearchHit
    from nexus_assets.search.step import refresh
    from nexus_assets.search.step import search as bm25

    text = require_text(request.text, "search text", "give some words to search for").strip()
    topic_ids, limit = request.topics or None, request.limit
    with open_read(db) as vault:
        for t in topic_ids or ():
            require_topic(vault, t)
        # The index is derived data beside the vault: bring it in step with the manifests first.
        refresh(vault, db)
        hits = bm25(db, text, topic_ids, limit=limit)
        found = {b.brick_id: b for b in vault.bricks.select(brick_ids=[h.brick_id for h in hits])}
        names = vault.runs.run_names(b.sources[0].run_id for b in found.values() if b.sources)
    rows = []
    for rank, h in enumerate(hits, 1):
        b = found.get(h.brick_id)
        name = names[b.sources[0].run_id] if b and b.sources else None
        marked, at = [], 0
        for start, end in h.highlights:
            marked.append(h.content[at:start] + "«" + h.content[start:end] + "»")
            at = end
        marked.append(h.content[at:])
        rows.append(
            SearchHit(
                rank=rank, brick_id=h.brick_id, topic_id=h.topic_id, content=h.content,
                state=b.state if b else None, order_index=b.order_index if b else None, stale=b.stale if b else None,
                score=round(h.score, 6), highlights=[{"start": s, "end": e} for s, e in h.highlights],
                highlighted="".join(marked), sources=list(b.sources) if b else [],
                run_title=name.title if name else None, run_date=name.date if name else None,
                conversation=name.label if name else None,
            )
        )
    return rows


def conflicts(db: str | Path, topic_id: str) -> tuple[list, int, int]:
    """(conflicts, bricks related so far, visible bricks): the Conflict View's rows."""
    from nexus_assets.embedding.embedder import MODEL  # the model's name only: reading relations loads no model
    from nexus_assets.relate.step import conflict_rows
    from nexus_assets.schemas import Conflict

    with open_read(db) as vault:
        require_topic(vault, topic_id)
        rows = conflict_rows(vault, topic_id, MODEL)
        looked_at = len(vault.relations.built(topic_id, MODEL))
        visible = vault.recall.visible_brick_count(topic_id)
    return [Conflict.model_validate(r) for r in rows], looked_at, visible


# Recall and answers


def _check_topics(db: str | Path, topic_ids: list[str] | None) -> list[str] | None:
    if not topic_ids:
        if not vault_exists(db):
            raise NotFound(f"no vault at {db}; run `nexus sync` first, or pass --db PATH")
        return None  # every topic: nothing to check, and no second open of the vault per query
    with open_read(db) as vault:
        for t in topic_ids or ():
            require_topic(vault, t)
    return topic_ids or None


def _who_and_when(speaker: str | None, since: str | None, until: str | None) -> dict:
    """The speaker and date filters of recall and ask (docs/cli.md), checked: BadQuery names the bad one."""
    from nexus_assets.services.answers import parse_day

    if speaker is not None:
        require_text(speaker, "speaker")
    try:
        first, last = parse_day(since, "since"), parse_day(until, "until")
    except ValueError as exc:
        raise BadQuery(str(exc)) from None
    if first and last and first > last:
        raise BadQuery(f"since ({first}) is after until ({last})")
    return {"speaker": speaker, "since": first, "until": last}


def recall(db: str | Path, request: RecallRequest, *, env: Mapping[str, str] | None = None):
    from nexus_assets.services import answers as service
    from nexus_assets.schemas import RecallOut

    query = require_text(request.query, "query")
    filters = _who_and_when(request.speaker, request.since, request.until)
    from nexus_assets.embedding.static_embedder import StaticModelMissing

    try:
        out = service.recall(db, query, _check_topics(db, request.topics), k=request.k, env=dict(env or {}), **filters)
    except service.NothingToRecall as exc:
        raise NotFound(str(exc)) from None
    except StaticModelMissing as exc:
        raise BadQuery(str(exc)) from None
    return RecallOut.model_validate(out)


def ask(db: str | Path, request: AskRequest, *, user: str, agent: str, env: Mapping[str, str] | None = None):
    """A cited answer or a refusal, audited as asked by the request's `user` through its `agent`,
    or, where it names none, by `user` through `agent` (the shell's own)."""
    from nexus_assets.services import answers as service
    from nexus_assets.schemas import AnswerOut

    question = require_text(request.question, "question")
    filters = _who_and_when(request.speaker, request.since, request.until)
    from nexus_assets.embedding.static_embedder import StaticModelMissing

    try:
        out = service.ask(
            db, question, _check_topics(db, request.topics), user=request.user or user, agent=request.agent or agent,
            env=dict(env or {}), **filters,
        )
    except service.NothingToRecall as exc:
        raise NotFound(str(exc)) from None
    except StaticModelMissing as exc:
        raise BadQuery(str(exc)) from None
    return AnswerOut.model_validate({"outcome": "refused" if out["refused"] else "answered", **out})


def ask_preview(db: str | Path, request: AskRequest, *, env: Mapping[str, str] | None = None):
    """The bricks `ask` would rest on (its recall, k as ask uses it, those relevant enough); reads
    only, audits nothing."""
    from nexus_assets.services.answers import ASK_K, relevant
    from nexus_assets.services.requests import RecallRequest
    from nexus_assets.schemas import AskPreview

    question = request.question
    asked = RecallRequest(query=question, topics=request.topics, k=ASK_K, speaker=request.speaker, since=request.since, until=request.until)
    recalled = recall(db, asked, env=env)
    kept = [r for r in recalled.results if relevant(question, r.model_dump(mode="json"))]
    return AskPreview(question=question, topics=recalled.topics, bricks=kept)


def left_because(vault, topic_id: str, bricks) -> dict[str, str]:
    """brick_id -> why each of these bricks left the manifest (superseded with no superseding
    brick): a person dropped it, or the topic's definition or selector no longer selects it. A brick
    retired by an undone edit of its source (drift) has no entry here."""
    retired = [b for b in bricks if b.state == "SUPERSEDED" and b.superseded_by is None]
    if not retired:
        return {}
    from nexus_assets.extract.selection import deselected_fingerprints

    topic = vault.topics.topic(topic_id)
    deselected = deselected_fingerprints(vault, topic) if topic is not None else frozenset()
    dropped = vault.teaching.drop_reasons(topic_id)
    out = {}
    for b in retired:
        if b.fingerprint not in deselected:
            continue
        out[b.brick_id] = (dropped[b.brick_id] + "; no longer selected") if b.brick_id in dropped else (
            "no longer selected by the topic's current definition or selector")
    return out
