import dagster as dg

TOPIC_GRAPH = dg.AssetSelection.groups("raw_runs", "pointers", "bricks", "states", "manifest", "recall")

sync_job = dg.define_asset_job(
    "sync_topics",
    selection=TOPIC_GRAPH,
    # Partitioned by topic: Dagster takes the partitions from the selected assets.
    description="Ingest the run files, then compile one topic: raw runs to manifest, with its checks.",
)

# `nexus sync` ingests once for all topics, then compiles each topic without ingesting again.
ingest_job = dg.define_asset_job(
    "ingest_run_files",
    selection=dg.AssetSelection.assets("run_files"),
    description="Ingest every new or changed run file once, for all topics.",
)
compile_job = dg.define_asset_job(
    "compile_topic",
    selection=TOPIC_GRAPH - dg.AssetSelection.assets("run_files"),
    description="Compile one topic from what is already ingested: raw runs to manifest, with its checks.",
)
