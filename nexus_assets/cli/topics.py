"""`nexus topics`: what the vault holds, per topic. Reads the catalog only, so it starts as fast as
DuckDB itself (no models, no Dagster)."""

from __future__ import annotations

import argparse

from nexus_assets.cli.common import emit, open_catalog
from nexus_assets.services.queries import topic_rows
from nexus_assets.cli.parsing import Commands


def cmd_topics(args: argparse.Namespace) -> int:
    with open_catalog(args) as vault:
        rows = topic_rows(vault)
    if args.json:
        from nexus_assets.schemas import TopicSummary  # the API's model; plain text needs no pydantic

        rows = [TopicSummary(**r).model_dump(mode="json") for r in rows]
    text = "\n".join(
        f"{r['topic_id']:<28} {r['state']:<8} {r['visible_bricks']:>5} bricks  "
        + (", ".join(f"{k} {v}" for k, v in sorted(r["bricks"].items())) or "-")
        + _examples(r)
        for r in rows
    ) or "no topics yet; run `nexus sync`"
    emit(args, rows, text)
    return 0


def _examples(row: dict) -> str:
    """A person's examples, when the topic has any (`nexus keep` / `nexus drop`)."""
    n = row.get("examples") or {}
    return f"; examples: keep {n.get('keep', 0)}, drop {n.get('drop', 0)}" if n.get("keep") or n.get("drop") else ""


def register(commands: Commands) -> None:
    commands.add("topics", cmd_topics, help="topics with state and brick counts")
