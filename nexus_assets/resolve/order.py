"""Canonical order (docs/architecture.md); the timestamps it sorts by are read by `core/timestamps.py`."""

from __future__ import annotations

from typing import Mapping

from nexus_assets.core.models import Occurrence, OrderingRule

OrderKey = tuple


def occurrence_key(occ: Occurrence) -> OrderKey:
    """(timestamp, run_id, document position, start); a missing timestamp sorts last.

    end, path and content break the remaining ties between texts. Versions of one node can still
    tie here (the same place; the same text, or one differing in case or spacing): `canonical_key`
    ranks those.
    """
    return (
        occ.timestamp is None,
        occ.timestamp or "",
        occ.address.run_id,
        occ.position,
        occ.address.start,
        occ.address.end,
        occ.address.json_path,
        occ.content,
    )


def canonical_key(occ: Occurrence) -> OrderKey:
    """`occurrence_key` where versions of one node hold the text at one place: the oldest version
    first, whatever its text (invariant 9: a later edit of the node makes the brick stale; a
    restore makes it current again), then the checksum, so arrival order never decides."""
    key = occurrence_key(occ)
    return (*key[:-1], occ.version_seq is None, occ.version_seq or 0, key[-1], occ.address.node_checksum)


def brick_sort_key(
    canonical: Occurrence,
    rule: OrderingRule,
    first_ingestion: int | None = None,
) -> OrderKey:
    key = occurrence_key(canonical)
    if rule == "chronological":
        return key
    if rule == "source-run-order":
        return (canonical.address.run_id, canonical.position, canonical.address.start, key)
    if rule == "ingestion-order":
        return (first_ingestion if first_ingestion is not None else 1 << 62, key)
    raise ValueError(f"unknown ordering rule {rule!r}")


def first_ingestion(run_ids: list[str], ingestion_seq: Mapping[str, int]) -> int | None:
    seqs = [ingestion_seq[r] for r in run_ids if r in ingestion_seq]
    return min(seqs) if seqs else None


def key_bytes(key: OrderKey) -> bytes:
    """`key` as bytes that sort (bytewise, as DuckDB sorts a BLOB) exactly as the tuple sorts in
    Python: a topic's order is kept in the vault, so one new run re-ranks its bricks in SQL
    instead of re-sorting every occurrence. Nested tuples continue the key; strings end in
    00 00 with a NUL of their own escaped as 00 ff (so "a" < "a\\x00" < "ab"), ints are biased
    big-endian."""
    out = bytearray()
    for part in key:
        if isinstance(part, tuple):
            out += key_bytes(part)
        elif isinstance(part, bool):
            out += b"\x01" if part else b"\x00"
        elif isinstance(part, int):
            out += (part + (1 << 63)).to_bytes(8, "big")
        elif isinstance(part, str):
            # UTF-8 (lone surrogates included) sorts bytewise in code point order, as str does.
            out += part.encode("utf-8", "surrogatepass").replace(b"\x00", b"\x00\xff") + b"\x00\x00"
        else:
            raise TypeError(f"cannot encode {type(part).__name__} in an order key")
    return bytes(out)
