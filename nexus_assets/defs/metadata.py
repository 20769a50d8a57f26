"""Metadata a person reads in the Dagster UI, as native values: tables, ints, URLs.

An empty list is left out rather than shown as an empty link; its count (an int) says enough.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import dagster as dg

from nexus_assets.core.models import Brick

PREVIEW_BRICKS = 20
_TEXT = 160


def _short(text: str, width: int = _TEXT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(rows: Sequence[Mapping], columns: Sequence[tuple[str, str]]) -> dg.TableMetadataValue:
    return dg.MetadataValue.table(
        [dg.TableRecord({name: row[name] for name, _ in columns}) for row in rows],
        schema=dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in columns]),
    )


def non_empty(**entries) -> dict:
    """Only the entries that hold something: no empty table or list rendered as a link."""
    return {k: v for k, v in entries.items() if v is not None and not (isinstance(v, dg.TableMetadataValue) and not v.records)}


def bricks_preview(bricks: Iterable[Brick], limit: int = PREVIEW_BRICKS) -> dg.TableMetadataValue:
    visible = [b for b in bricks if b.state != "SUPERSEDED"][:limit]
    return table(
        [
            {
                "order": b.order_index if b.order_index is not None else -1,
                "state": b.state,
                "stale": b.stale,
                "brick": b.brick_id[:12],
                "sources": len(b.sources),
                "text": _short(b.content),
            }
            for b in visible
        ],
        [("order", "int"), ("state", "string"), ("stale", "bool"), ("brick", "string"), ("sources", "int"), ("text", "string")],
    )


def counts_table(counts: Mapping[str, int], key: str) -> dg.TableMetadataValue:
    return table([{key: k, "count": int(n)} for k, n in sorted(counts.items())], [(key, "string"), ("count", "int")])


def problems_table(problems: Sequence[str], limit: int = 50) -> dg.TableMetadataValue:
    return table([{"problem": p} for p in problems[:limit]], [("problem", "string")])


def stale_table(rows: Sequence[Mapping], limit: int = 50) -> dg.TableMetadataValue:
    return table(
        [
            {
                "brick_id": r["brick_id"],
                "state": r["state"],
                "run_id": r["run_id"],
                "json_path": r["json_path"],
                "problem": r.get("problem") or "",
            }
            for r in rows[:limit]
        ],
        [("brick_id", "string"), ("state", "string"), ("run_id", "string"), ("json_path", "string"), ("problem", "string")],
    )
