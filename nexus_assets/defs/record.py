"""The record's assets (DESIGN §3.1, §6): every run's passages, upstream of the topic graph and
topic-independent (a sentence is split, indexed and embedded once however many topics read it), and
their full-text and dense indexes beside the vault; with the checks that every passage is the
exact slice of its node and that the indexes hold exactly the passages' ids."""

import dagster as dg

from nexus_assets.defs.assets import OWNERS, WRITER_POOL, run_files
from nexus_assets.defs.metadata import non_empty, table
from nexus_assets.defs.resources import NexusSettings, VaultResource
from nexus_assets.ingest.passages_step import build_passages
from nexus_assets.recall.passages.check import index_problems, slice_problems
from nexus_assets.recall.passages.index import index_dir, refresh
from nexus_assets.embedding.static_embedder import MODEL as PASSAGE_MODEL


@dg.asset(
    group_name="raw_runs",
    owners=OWNERS,
    tags={"nexus/stage": "record"},
    kinds={"python", "duckdb"},
    deps=[run_files],
    pool=WRITER_POOL,
    description="Every run's latest version split into passages (its sentences and list items, each an exact "
    "address into a stored node): the record recall reads, whatever the extractor keeps. A node split before "
    "(an unchanged node of a grown run) is not split again.",
)
def passages(context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings) -> dg.MaterializeResult:
    with vault.open() as v, v.exclusive("nexus-ingest"):
        report = build_passages(v, progress=lambda m: settings.say(context, m))
        total = v.passages.latest_count()
    if report.versions:
        settings.say(context, f"{report.passages} passages from {report.versions} run versions ({total} in the record)")
    return dg.MaterializeResult(metadata={
        "run_versions_split": report.versions, "nodes_split": report.nodes_split, "nodes_kept": report.nodes_kept,
        "passages_new": report.passages, "passages_total": total,
        "counted": "this sync: run_versions_split, nodes_split, nodes_kept, passages_new; the record now: passages_total",
    })


@dg.asset(
    group_name="recall",
    owners=OWNERS,
    tags={"nexus/stage": "recall"},
    kinds={"python"},
    deps=[passages],
    description=f"The record's indexes beside the vault: BM25 over every passage and its message, and dense vectors "
    f"({PASSAGE_MODEL}, 8-bit) for every passage; only runs with a new version are read.",
)
def passage_index(context: dg.AssetExecutionContext, vault: VaultResource, settings: NexusSettings) -> dg.MaterializeResult:
    with vault.open() as v:
        report = refresh(v, vault.address, progress=lambda m: settings.say(context, m))
    return dg.MaterializeResult(metadata={
        "model": PASSAGE_MODEL, "runs_indexed_now": report.runs_added, "runs_replaced_or_removed": report.runs_removed,
        "passages_indexed_now": report.passages_added, "rebuilt": report.rebuilt, "segments_merged": report.merged,
        "path": dg.MetadataValue.path(str(index_dir(vault.address))),
    })


@dg.asset_check(asset=passages, blocking=True, description="Every passage of the runs this sync split is the exact, "
                "trimmed slice of its stored node, its id is sha256(run_id:json_path:start:end), and no two overlap.")
def passages_verbatim(context: dg.AssetCheckExecutionContext, vault: VaultResource) -> dg.AssetCheckResult:
    with vault.open() as v:
        checked, problems = slice_problems(v)
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"passages_checked": checked, "problems": len(problems),
                  **non_empty(problem_rows=table([{"passage": p[:12], "problem": why} for p, why in problems[:100]],
                                                 [("passage", "string"), ("problem", "string")]))},
        description=f"{len(problems)} passages are not their node's slice" if problems else f"{checked} passages verbatim",
    )


@dg.asset_check(asset=passage_index, description="The indexes hold one row per passage of every run's latest "
                "version and nothing else: dense rows and full-text documents 1:1 with the passages' ids.")
def passage_index_in_step(context: dg.AssetCheckExecutionContext, vault: VaultResource) -> dg.AssetCheckResult:
    with vault.open() as v:
        expected, problems = index_problems(v, vault.address)
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"passages": expected, "problems": len(problems)},
        description="; ".join(problems[:5]) if problems else f"{expected} passages, indexes in step",
    )
