"""The vault: everything Nexus Sync knows, in one DuckDB file, and all the SQL that reads or writes it.

Append-only by design (docs/invariants.md §8): a sync inserts; the only updates are a brick's state,
order, stale flag and superseded_by, and a run's latest-version marker. A topic's visible
result (bricks, their sources and the manifest) is published in one transaction.

    connection   the one way in: waiting for writers, announcing ours
    migrations   schema versions and the upgrades between them
    catalog      what `nexus topics` lists, as plain rows (no models, so no pydantic)
    store        `Vault`: runs, nodes, extractions, bricks, manifests
    history, drift, forgetting, recall
                 the queries of those features, mixed into `Vault`

Nothing is imported here, so a command that needs only the catalog loads only the catalog.
"""
