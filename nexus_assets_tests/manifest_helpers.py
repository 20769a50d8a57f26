"""Every recorded manifest as it lists, read straight from a vault's tables whichever way its list
is stored (whole in `bricks_json`, or once per entry in `manifest_entries` since migration 27):
an oracle independent of the readers in publish/manifest_records.py."""

from __future__ import annotations

from nexus_assets.core.fingerprint import canonical_json


def listed_manifests(conn, topic_id: str | None = None) -> list[tuple]:
    """(topic_id, seq, manifest_hash, previous_hash, its list as canonical JSON, sealed), by topic and seq."""
    tables = {r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    where = "WHERE topic_id = ?" if topic_id is not None else ""
    rows = conn.execute(
        f"SELECT topic_id, seq, manifest_hash, previous_hash, bricks_json, sealed FROM manifests {where} ORDER BY topic_id, seq",
        [topic_id] if topic_id is not None else None,
    ).fetchall()
    out = []
    for t, n, h, p, listed, sealed in rows:
        if listed is None:
            assert "manifest_entries" in tables
            entries = conn.execute(
                """SELECT brick_id, fingerprint, order_index, state FROM manifest_entries
                   WHERE topic_id = ? AND valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)""",
                [t, n, n],
            ).fetchall()
            ordered = sorted(entries, key=lambda e: (e[2], e[0]))
            listed = "[" + ",".join(
                canonical_json({"brick_id": b, "fingerprint": f, "order_index": o, "state": s}) for b, f, o, s in ordered
            ) + "]"
        out.append((t, n, h, p, listed, sealed))
    return out
