"""Upgrades of stored data that need a phase's own code, handed to the vault's migrations from
above the phases (nothing under vault/ imports a phase): migration 2 parses every stored run
version's raw JSON into text nodes with the ingest phase's readers."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import duckdb

def _stored_versions(conn: duckdb.DuckDBPyConnection, size: int = 200):
    """Every stored run version as (run_id, version_id, raw_json) rows, a slice of `size` at a time,
    so a large vault's raw JSON is never held whole."""
    keys = conn.execute("SELECT run_id, version_id FROM runs ORDER BY run_id, version_id").fetchall()
    for start in range(0, len(keys), size):
        chunk = keys[start : start + size]
        yield conn.execute(
            """SELECT r.run_id, r.version_id, r.raw_json FROM runs r
               JOIN (SELECT unnest(?) AS run_id, unnest(?) AS version_id) k USING (run_id, version_id)""",
            [[k[0] for k in chunk], [k[1] for k in chunk]],
        ).fetchall()


def backfill_nodes(conn: duckdb.DuckDBPyConnection) -> None:
    """Text nodes of every stored run version, parsed from its raw JSON this one time."""
    import pandas as pd  # writers only: read commands must not pay its import

    # The readers and the node model, for this one backfill: opening a vault must not load pydantic.
    from nexus_assets.ingest.formats.dispatch import parse_document
    from nexus_assets.ingest.nodes import node_records

    for rows in _stored_versions(conn):
        # Without the speaker: that column arrives with migration 25, which fills it.
        records = [
            {k: v for k, v in asdict(r).items() if k != "speaker"}
            for _, version_id, raw in rows
            for r in node_records(replace(parse_document(json.loads(raw)), version_id=version_id))
        ]
        if records:
            conn.register("_nodes", pd.DataFrame(records))
            try:
                conn.execute("INSERT INTO nodes BY NAME SELECT * FROM _nodes ON CONFLICT DO NOTHING")
            finally:
                conn.unregister("_nodes")


def backfill_speakers(conn: duckdb.DuckDBPyConnection) -> None:
    """Migration 25: each stored node's speaker, read from its run version's raw JSON this one time,
    then each brick source's from the node it points at. Ids, texts and hashes are not touched."""
    import pandas as pd

    from nexus_assets.ingest.formats.dispatch import parse_document
    from nexus_assets.ingest.nodes import speaker_of

    for rows in _stored_versions(conn):
        found = []
        for run_id, version_id, raw in rows:
            try:
                run = parse_document(json.loads(raw))
            except Exception:  # noqa: BLE001 (a version this reader no longer parses keeps a null speaker)
                continue
            found += [
                {"run_id": run_id, "version_id": version_id, "json_path": n.path, "speaker": speaker_of(n)}
                for n in run.nodes if speaker_of(n) is not None
            ]
        if found:
            conn.register("_speakers", pd.DataFrame(found))
            try:
                conn.execute(
                    """UPDATE nodes SET speaker = s.speaker FROM _speakers s
                       WHERE nodes.run_id = s.run_id AND nodes.version_id = s.version_id AND nodes.json_path = s.json_path"""
                )
            finally:
                conn.unregister("_speakers")
    conn.execute(SOURCE_SPEAKERS.format(where="true"))


# A brick source's speaker, from the stored node it points at (any version holding that text).
SOURCE_SPEAKERS = """
UPDATE brick_sources SET speaker = n.speaker
FROM (SELECT run_id, json_path, checksum, max(speaker) AS speaker FROM nodes
      WHERE speaker IS NOT NULL GROUP BY run_id, json_path, checksum) n
WHERE brick_sources.run_id = n.run_id AND brick_sources.json_path = n.json_path
  AND brick_sources.node_checksum = n.checksum AND brick_sources.speaker IS NULL AND {where}
"""


BACKFILLS = {"nodes": backfill_nodes, "speakers": backfill_speakers}
