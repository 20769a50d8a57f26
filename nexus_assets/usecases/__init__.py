"""What Nexus Sync does, one module per use case. The Dagster assets, the CLI and the viewer all
call these; each is plain Python over a `Vault` and the pure core (no Dagster here).

    ingest       run files into runs and text nodes, once per sync
    compiler     the sync's phases: extract, validate, resolve, publish
    drift        verify: sources re-read, stale marks, checksum drift
    lifecycle    topic files, DRAFT → ACTIVE → SEALING → LOCKED, sealing gates
    discovery    proposed topics (DRAFT files) from recent runs
    planning     `nexus plan`: what a sync would do and cost
    trace        a brick back to its source text
    forgetting   `nexus forget`: erase runs, tombstone the manifest chain
    search       the full-text index over visible bricks
    export       bricks and manifests out, with their proofs
    evaluation   extraction quality against a gold set
"""
