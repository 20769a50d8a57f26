import dagster as dg

from nexus_assets.defs.partitions import topics_partitions

sync_job = dg.define_asset_job(
    "sync_topics",
    selection=dg.AssetSelection.groups("raw_runs", "pointers", "bricks", "states", "manifest"),
    partitions_def=topics_partitions,
    description="Compile one topic: raw runs to manifest, with its checks.",
)
