"""What a long-running server (`nexus api`, `nexus mcp`) keeps ready: the embedding model loaded,
each topic's vector index in step with its newest manifest, the run names of a held vault
(vault/warm.py). At start, and after each writer."""

from __future__ import annotations

import logging

log = logging.getLogger("nexus.api")


def warm(db: str) -> None:
    """Load the embedding model and each topic's checked vector index now, so the first recall
    costs a search, not a start-up. A vault without embeddings (or none yet) is no error."""
    from nexus_assets.embedding.embedder import embed, serve_queries

    serve_queries()
    embed(["warm-up"])
    refresh(db)


def refresh(db: str) -> None:
    """Each topic's vector index in step with its newest manifest, and the run names kept for a
    held vault (vault/warm.py) in step with its runs (none it no longer has, every one it has): at
    start, and after each writer."""
    from nexus_assets.services.queries import NotFound, open_read
    from nexus_assets.embedding.embedder import MODEL
    from nexus_assets.recall.index import ensure

    try:
        with open_read(db) as vault:
            vault.runs.keep_names()
            hashes = vault.latest_manifest_hashes()
            missing = vault.recall.unembedded_counts(sorted(hashes), MODEL)
            for topic_id, manifest_hash in sorted(hashes.items()):
                ensure(vault, db, topic_id, manifest_hash=manifest_hash, unembedded=missing.get(topic_id, 0))
    except NotFound:
        pass
    except Exception:  # noqa: BLE001 (a cold start is slower, not broken)
        log.warning("warming the recall indexes failed; the first recall builds them", exc_info=True)
    from nexus_assets.vault.warm import trim_memory

    trim_memory()  # reading every run's name once allocated ~100 MB on 3,400 runs, now free
