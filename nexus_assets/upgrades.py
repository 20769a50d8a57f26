"""Upgrades of stored data that need a phase's own code, handed to the vault's migrations from
above the phases (nothing under vault/ imports a phase): migration 2 parses every stored run
version's raw JSON into text nodes with the ingest phase's readers."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import duckdb

def backfill_nodes(conn: duckdb.DuckDBPyConnection) -> None:
    """Text nodes of every stored run version, parsed from its raw JSON this one time."""
    import pandas as pd  # writers only: read commands must not pay its import

    # The readers and the node model, for this one backfill: opening a vault must not load pydantic.
    from nexus_assets.ingest.formats.dispatch import parse_document
    from nexus_assets.ingest.nodes import node_records

    keys = conn.execute("SELECT run_id, version_id FROM runs ORDER BY run_id, version_id").fetchall()
    for start in range(0, len(keys), 200):
        chunk = keys[start : start + 200]
        rows = conn.execute(
            """SELECT r.version_id, r.raw_json FROM runs r
               JOIN (SELECT unnest(?) AS run_id, unnest(?) AS version_id) k USING (run_id, version_id)""",
            [[k[0] for k in chunk], [k[1] for k in chunk]],
        ).fetchall()
        records = [
            asdict(r) for version_id, raw in rows for r in node_records(replace(parse_document(json.loads(raw)), version_id=version_id))
        ]
        if records:
            conn.register("_nodes", pd.DataFrame(records))
            try:
                conn.execute("INSERT INTO nodes BY NAME SELECT * FROM _nodes ON CONFLICT DO NOTHING")
            finally:
                conn.unregister("_nodes")


BACKFILLS = {"nodes": backfill_nodes}
