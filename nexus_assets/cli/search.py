"""`nexus search TEXT [--topic T]...`: ranked full-text search (BM25) over brick text, with highlights."""

from __future__ import annotations

import argparse

from nexus_assets.cli.common import (
    UsageError,
    emit,
    one_line,
    open_vault,
    require_topic,
)
from nexus_assets.cli.recall import require_utf8
from nexus_assets.search.step import refresh, search


def cmd_search(args: argparse.Namespace) -> int:
    text = require_utf8(args.text, "search text").strip()
    if not text:
        raise UsageError("give some words to search for")
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    with open_vault(args) as vault:
        for t in args.topic or ():
            require_topic(vault, t)
        # The index is derived data beside the vault: bring it in step with the manifests first.
        refresh(vault, args.db)
        hits = search(args.db, text, args.topic, limit=args.limit)
        bricks = {b.brick_id: b for b in vault.bricks.select(brick_ids=[h.brick_id for h in hits])}
        # Each result names the conversation it was said in (its canonical source), as `bricks` does.
        names = vault.runs.run_names(b.sources[0].run_id for b in bricks.values() if b.sources)
    rows = []
    for rank, h in enumerate(hits, 1):
        b = bricks.get(h.brick_id)
        marked, at = [], 0
        for start, end in h.highlights:
            marked.append(h.content[at:start] + "«" + h.content[start:end] + "»")
            at = end
        marked.append(h.content[at:])
        rows.append(
            {
                "rank": rank,
                "brick_id": h.brick_id,
                "topic_id": h.topic_id,
                "content": h.content,
                "state": b.state if b else None,
                "order_index": b.order_index if b else None,
                "stale": b.stale if b else None,
                "score": round(h.score, 6),
                "highlights": [{"start": s, "end": e} for s, e in h.highlights],
                "highlighted": "".join(marked),
                "sources": [s.model_dump(mode="json") for s in b.sources] if b else [],
                **(names[b.sources[0].run_id].as_json() if b and b.sources else {"run_title": None, "run_date": None}),
                "conversation": names[b.sources[0].run_id].label if b and b.sources else None,
            }
        )
    text_out = "\n".join(
        f"{r['rank']:>3}. {r['score']:.3f} {r['topic_id']} {r['brick_id'][:12]} [{r['state']}]  {one_line(r['highlighted'], 100)}"
        f"{'  — ' + r['conversation'] if r['conversation'] else ''}"
        for r in rows
    ) or f"no brick matches {text!r}"
    emit(args, rows, text_out)
    return 0
