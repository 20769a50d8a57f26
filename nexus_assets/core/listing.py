"""A manifest's brick list in canonical JSON, and its digest: what publish writes and history looks
manifests up by. Below both, so the history of manifests never imports the phase that records them."""

from __future__ import annotations

from typing import Iterable

from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.core.models import ManifestEntry


def canonical_entries(entries: Iterable[ManifestEntry]) -> str:
    """The entries as `hash_of_listing` reads them: each in canonical JSON, joined by commas."""
    return ",".join(canonical_json(e.model_dump()) for e in entries)


def entries_sha256(entries: Iterable[ManifestEntry]) -> str:
    """A digest of a brick list alone (no link, no topic): the vault finds a manifest listing the
    same bricks by it without reading every stored list."""
    return sha256_hex(canonical_entries(entries))
