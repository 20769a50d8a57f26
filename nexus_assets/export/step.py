"""`nexus export`: a topic's manifest, brick by brick with its sources, for analysts (JSON lines,
Parquet through DuckDB) and for reading (Markdown in manifest order). Read-only."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Protocol

import duckdb

from nexus_assets.core.display import visible

if TYPE_CHECKING:
    from nexus_assets.publish.records import BrickRecords
    from nexus_assets.topics.records import TopicRecords

FORMATS = ("jsonl", "parquet", "markdown")

_SOURCE = (
    'STRUCT(run_id VARCHAR, json_path VARCHAR, "start" INTEGER, "end" INTEGER, node_checksum VARCHAR, '
    "node_type VARCHAR, branch VARCHAR, stale BOOLEAN)[]"
)
PARQUET_COLUMNS = {
    "topic_id": "VARCHAR",
    "manifest_hash": "VARCHAR",
    "order_index": "INTEGER",
    "brick_id": "VARCHAR",
    "fingerprint": "VARCHAR",
    "state": "VARCHAR",
    "stale": "BOOLEAN",
    "content": "VARCHAR",
    "sources": _SOURCE,
}


class ExportStores(Protocol):
    """The stores an export reads: the topic and its published manifest and bricks."""

    bricks: BrickRecords
    topics: TopicRecords


class NoManifest(LookupError):
    pass


def manifest_rows(vault: ExportStores, topic_id: str) -> tuple[dict, list[dict]]:
    """(topic header, one row per manifest entry in order, each with the brick's text and sources)."""
    manifest = vault.bricks.latest_manifest(topic_id)
    if manifest is None:
        raise NoManifest(topic_id)
    topic = vault.topics.topic(topic_id)
    bricks = {b.brick_id: b for b in vault.bricks.select(topic_id, brick_ids=[e.brick_id for e in manifest.bricks])}
    rows = []
    for e in manifest.bricks:
        b = bricks[e.brick_id]
        rows.append(
            {
                "topic_id": topic_id,
                "manifest_hash": manifest.manifest_hash,
                "order_index": e.order_index,
                "brick_id": e.brick_id,
                "fingerprint": e.fingerprint,
                "state": e.state,
                "stale": b.stale,
                "content": b.content,
                "sources": [s.model_dump(mode="json") for s in b.sources],
            }
        )
    header = {
        "topic_id": topic_id,
        "display_name": topic.display_name if topic else topic_id,
        "state": topic.state if topic else None,
        "ordering_rule": topic.ordering_rule if topic else None,
        "manifest_hash": manifest.manifest_hash,
        "previous_hash": manifest.previous_hash,
    }
    return header, rows


def to_jsonl(rows: Iterable[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def to_markdown(header: dict, rows: list[dict]) -> str:
    lines = [
        f"# {header['display_name']}",
        "",
        f"Topic `{header['topic_id']}` ({header['state']}, {(header['ordering_rule'] or '').replace('-order', '')} order), "
        f"manifest `{header['manifest_hash']}`, {len(rows)} bricks. Every brick is verbatim text from the source it names.",
        "",
    ]
    for r in rows:
        flags = "".join(f" · {f}" for f in (r["state"], "stale" if r["stale"] else None) if f)
        lines.append(f"## {r['order_index']}. `{r['brick_id'][:12]}`{flags}")
        lines.append("")
        lines.extend("> " + line if line else ">" for line in r["content"].split("\n"))
        lines.append("")
        for i, s in enumerate(r["sources"]):
            role = "source" if i == 0 else "also in"
            lines.append(f"- {role}: `{s['run_id']}` `{s['json_path']}` [{s['start']}:{s['end']}] checksum `{s['node_checksum'][:16]}`")
        lines.append("")
    # Markdown is read by people (and rendered): control characters in a brick are shown, not obeyed.
    return visible("\n".join(lines))


def write_parquet(rows: list[dict], out: Path) -> None:
    """Through DuckDB: a typed schema, sources as a list of structs."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(suffix=".jsonl", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(to_jsonl(rows))
        con = duckdb.connect()
        try:
            columns = ", ".join(f"'{k}': '{v}'" for k, v in PARQUET_COLUMNS.items())
            tmp = str(out) + ".partial"
            con.execute(
                f"COPY (SELECT * FROM read_json(?, format = 'newline_delimited', columns = {{{columns}}})) "
                f"TO '{tmp.replace(chr(39), chr(39) * 2)}' (FORMAT parquet)",
                [staging],
            )
            os.replace(tmp, out)
        finally:
            con.close()
    finally:
        os.unlink(staging)
