"""Metadata a person reads in the Dagster UI, as native values: tables, ints, URLs.

An empty list is left out rather than shown as an empty link; its count (an int) says enough.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import dagster as dg

from nexus_assets.core.models import Brick
from nexus_assets.ingest.names import RunName

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


def figure(value: int | float) -> dg.TextMetadataValue:
    """A check's count or ratio. Dagster 1.13 plots a check's numeric metadata over every evaluation,
    whatever its partition, so one topic's 30 bricks and another's 8 would zigzag on one line; as
    text the figure shows in each evaluation's table and draws no plot that mixes topics."""
    return dg.MetadataValue.text(f"{value:.3f}" if isinstance(value, float) else str(value))


def non_empty(**entries) -> dict:
    """Only the entries that hold something: no empty table or list rendered as a link."""
    return {k: v for k, v in entries.items() if v is not None and not (isinstance(v, dg.TableMetadataValue) and not v.records)}


def bricks_preview(
    bricks: Iterable[Brick], limit: int = PREVIEW_BRICKS, names: Mapping[str, RunName] | None = None
) -> dg.TableMetadataValue:
    """The first visible bricks: the text widest, the id a short prefix, and the conversation each
    was said in by its title and date (`names`, by run id)."""
    visible = [b for b in bricks if b.state != "SUPERSEDED"][:limit]
    names = names or {}
    return table(
        [
            {
                "order": b.order_index if b.order_index is not None else -1,
                "state": b.state,
                "stale": b.stale,
                "brick": b.brick_id[:12],
                "sources": len(b.sources),
                "text": _short(b.content),
                "from": _said_in(b.sources[0].run_id, names) if b.sources else "",
            }
            for b in visible
        ],
        [("order", "int"), ("state", "string"), ("stale", "bool"), ("brick", "string"), ("sources", "int"),
         ("text", "string"), ("from", "string")],
    )


def _said_in(run_id: str, names: Mapping[str, RunName]) -> str:
    name = names.get(run_id)
    return name.label if name else run_id


def counts_table(counts: Mapping[str, int], key: str) -> dg.TableMetadataValue:
    return table([{key: k, "count": int(n)} for k, n in sorted(counts.items())], [(key, "string"), ("count", "int")])


def problems_table(problems: Sequence[str], limit: int = 50) -> dg.TableMetadataValue:
    return table([{"problem": p} for p in problems[:limit]], [("problem", "string")])


def stale_table(rows: Sequence[Mapping], limit: int = 50, names: Mapping[str, RunName] | None = None) -> dg.TableMetadataValue:
    """Stale bricks with their canonical source: a short id (the problem is what a person reads)."""
    names = names or {}
    return table(
        [
            {
                "brick": r["brick_id"][:12],
                "state": r["state"],
                "conversation": _said_in(r["run_id"], names),
                "run_id": r["run_id"],
                "json_path": r["json_path"],
                "problem": r.get("problem") or "",
            }
            for r in rows[:limit]
        ],
        [("brick", "string"), ("state", "string"), ("conversation", "string"), ("run_id", "string"),
         ("json_path", "string"), ("problem", "string")],
    )
