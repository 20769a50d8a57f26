import dagster as dg

TOPIC_GRAPH = dg.AssetSelection.groups("raw_runs", "pointers", "bricks", "states", "manifest", "recall")

sync_job = dg.define_asset_job(
    "sync_topics",
    selection=TOPIC_GRAPH,
    # Partitioned by topic: Dagster takes the partitions from the selected assets.
    description="Ingest the run files, then compile one topic: raw runs to manifest, with its checks.",
)

# What every topic shares, built once per sync: the run files read, and the record (passages and their indexes).
SHARED = ("run_files", "passages", "passage_index")

# `nexus sync` ingests once for all topics, then compiles each topic without ingesting again.
ingest_job = dg.define_asset_job(
    "ingest_run_files",
    selection=dg.AssetSelection.assets(*SHARED),
    description="Ingest every new or changed run file once, for all topics, and split and index its passages.",
)
compile_job = dg.define_asset_job(
    "compile_topic",
    selection=TOPIC_GRAPH - dg.AssetSelection.assets(*SHARED),
    description="Compile one topic from what is already ingested: raw runs to manifest, with its checks.",
)

# `nexus sync --no-recall` / NEXUS_NO_RECALL=1: the same jobs with the recall group (embeddings and
# the vector index) left out, by asset selection at launch. test_no_recall checks this list against
# TOPIC_GRAPH, so a new asset cannot be forgotten here.
COMPILE_ASSETS = ("raw_runs", "pointer_extractions", "validated_bricks", "resolved_brick_states", "topic_manifest")


def without_recall(*, ingest: bool) -> list[dg.AssetKey]:
    """The assets a run selects when recall is off: the compile graph, with `run_files` when the job ingests."""
    return [dg.AssetKey(name) for name in (("run_files", "passages") if ingest else ()) + COMPILE_ASSETS]
