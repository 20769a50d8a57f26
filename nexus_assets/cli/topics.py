"""`nexus topics`: what the vault holds, per topic. Reads the catalog only, so it starts as fast as
DuckDB itself (no models, no Dagster)."""

from __future__ import annotations

import argparse

from nexus_assets.cli.common import emit, open_catalog


def cmd_topics(args: argparse.Namespace) -> int:
    with open_catalog(args) as vault:
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
    text = "\n".join(
        f"{r['topic_id']:<28} {r['state']:<8} {r['visible_bricks']:>5} bricks  "
        + (", ".join(f"{k} {v}" for k, v in sorted(r["bricks"].items())) or "-")
        for r in rows
    ) or "no topics yet; run `nexus sync`"
    emit(args, rows, text)
    return 0
