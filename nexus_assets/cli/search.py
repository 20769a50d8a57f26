"""`nexus search TEXT [--topic T]...`: ranked full-text search (BM25) over brick text, with highlights."""

from __future__ import annotations

import argparse

from nexus_assets.cli.common import UsageError, emit, one_line
from nexus_assets.cli.parsing import Commands, bounded, request_of
from nexus_assets.core import bounds
from nexus_assets.services.queries import search


def cmd_search(args: argparse.Namespace) -> int:
    from nexus_assets.services.requests import SearchRequest

    if not args.text.strip():
        raise UsageError("give some words to search for")  # the query's own words for blank text
    names = {"text": "search text", "topics": "topics", "limit": "--limit"}
    request = request_of(SearchRequest, names, text=args.text, topics=args.topic, limit=args.limit)
    hits = search(args.db, request)
    rows = [h.model_dump(mode="json") for h in hits]
    text_out = "\n".join(
        f"{r['rank']:>3}. {r['score']:.3f} {r['topic_id']} {r['brick_id'][:12]} [{r['state']}]  {one_line(r['highlighted'], 100)}"
        f"{'  — ' + r['conversation'] if r['conversation'] else ''}"
        for r in rows
    ) or f"no brick matches {args.text.strip()!r}"
    emit(args, rows, text_out)
    return 0


def register(commands: Commands) -> None:
    p = commands.add("search", cmd_search, help="ranked full-text search (BM25) over brick text, with highlights")
    p.add_argument("text", help='words, or "a phrase" in quotes')
    p.add_argument("--topic", action="append", help="only this topic (repeatable)")
    p.add_argument(
        "--limit", type=bounded(*bounds.SEARCH_LIMIT), default=20,
        help=f"at most this many results, {bounds.SEARCH_LIMIT[0]} to {bounds.SEARCH_LIMIT[1]} (default 20)",
    )
