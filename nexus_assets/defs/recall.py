"""The recall assets of the topic graph (docs/recall.md), downstream of the manifest: every visible
brick embedded once, and the topic's vector index with its checked row → brick id map."""

import warnings
from datetime import datetime, timezone

import dagster as dg

from nexus_assets.defs.outcome import StepOutcome
from nexus_assets.defs.assets import WRITER_POOL, topic_asset, topic_manifest
from nexus_assets.defs.partitions import each_topic, topic_check
from nexus_assets.defs.resources import VaultResource
from nexus_assets.embedding.embedder import (  # torch loads on the first embed, not here
    MODEL,
    embed,
)
from nexus_assets.recall.index import ensure, load, vector_index_dir
from nexus_assets.relate.step import open_conflict_pairs, relate_topic

warnings.filterwarnings("ignore", category=dg.PreviewWarning)

EMBED_CHUNK = 2048


def _brick_embeddings(context: dg.AssetExecutionContext, vault: VaultResource, topic_id: str) -> dg.MaterializeResult:
    with vault.open() as v:
        todo = v.recall.fingerprints_without_embedding(topic_id, MODEL)
        # Stored chunk by chunk: memory stays one chunk of vectors, and a stopped run keeps what it embedded.
        for start in range(0, len(todo), EMBED_CHUNK):
            chunk = todo[start : start + EMBED_CHUNK]
            v.recall.store_embeddings(MODEL, [fp for fp, _ in chunk], embed([text for _, text in chunk]), datetime.now(timezone.utc))
            if len(todo) > EMBED_CHUNK:
                context.log.info(f"{topic_id}: embedded {start + len(chunk)} of {len(todo)} bricks")
        visible = v.recall.visible_brick_count(topic_id)
        topic = v.topics.topic(topic_id)
        before = open_conflict_pairs(v, topic_id, MODEL) if topic is not None else frozenset()
        related = relate_topic(v, topic, MODEL) if topic is not None else None
        changed = related is not None and open_conflict_pairs(v, topic_id, MODEL) != before
    if related is None:
        return dg.MaterializeResult(
            metadata={"topic_id": topic_id, "model": MODEL, "embedded_now": len(todo), "reused": visible - len(todo),
                      "visible_bricks": visible}
        )
    if changed:
        # Said when the set of open conflicts changed, not at every sync that leaves it as it was.
        context.log.warning(f"{topic_id}: the open conflicts between related bricks changed; see `nexus conflicts {topic_id}`")
    return dg.MaterializeResult(
        metadata={"topic_id": topic_id, "model": MODEL, "embedded_now": len(todo), "reused": visible - len(todo),
                  "visible_bricks": visible, "related_pairs": related.pairs, "open_conflicts": related.conflicts,
                  "conflicts_changed": changed,
                  "relations_looked_at": related.looked_at, "relations_dropped": related.dropped,
                  **StepOutcome(conflicts_changed=changed).metadata()}
    )


@topic_asset(
    "recall",
    kinds={"python", "duckdb"},
    deps=[topic_manifest],
    pool=WRITER_POOL,
    description="Every visible brick embedded once with all-MiniLM-L6-v2 (384-d, unit length), keyed by "
    "(model, fingerprint): a re-sync embeds nothing, a repeated text is embedded once. Then the topic's related "
    "bricks and conflict candidates are brought up to date (docs/conflicts.md) for the bricks that changed.",
)
def brick_embeddings(context: dg.AssetExecutionContext, vault: VaultResource) -> None:
    each_topic(context, lambda topic_id: _brick_embeddings(context, vault, topic_id).metadata)


def _vector_index(context: dg.AssetExecutionContext, vault: VaultResource, topic_id: str) -> dg.MaterializeResult:
    with vault.open() as v:
        idx, rebuilt = ensure(v, vault.address, topic_id)
    return dg.MaterializeResult(
        metadata={"topic_id": topic_id, "rows": idx.index.ntotal, "rebuilt": rebuilt,
                  "path": dg.MetadataValue.path(str(vector_index_dir(vault.address, topic_id)))}
    )


@topic_asset(
    "recall",
    kinds={"python"},
    deps=[brick_embeddings],
    description="The topic's FAISS index beside the vault, with its row → brick id map persisted with it; "
    "rebuilt from the vault when missing or out of step.",
)
def vector_index(context: dg.AssetExecutionContext, vault: VaultResource) -> None:
    each_topic(context, lambda topic_id: _vector_index(context, vault, topic_id).metadata)


@topic_check(
    asset=vector_index,
    description="The index has one row per visible embedded brick, its id map is in the same order as the "
    "vault's, and a re-embedded sample brick recalls itself first.",
)
def vector_index_in_step(context: dg.AssetCheckExecutionContext, vault: VaultResource, topic_id: str) -> dg.AssetCheckResult:
    with vault.open() as v:
        expected = v.recall.visible_embedded_ids(topic_id, MODEL)
        bricks = {b.brick_id: b for b in v.bricks.select(brick_ids=expected[:1])}
    idx = load(vault.address, topic_id)
    problems = []
    if idx is None:
        problems.append("the index is missing or unreadable")
    else:
        if idx.index.ntotal != len(expected):
            problems.append(f"{idx.index.ntotal} rows for {len(expected)} embedded visible bricks")
        if idx.brick_ids != expected:
            problems.append("the row → brick id map is not in the vault's order")
        if expected and not problems:
            sample = expected[0]
            _, rows = idx.index.search(embed([bricks[sample].content]), 1)
            if idx.brick_ids[rows[0][0]] != sample:
                problems.append(f"brick {sample[:12]} re-embedded does not recall itself first")
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"topic_id": topic_id, "rows": idx.index.ntotal if idx else 0, "expected": len(expected)},
        description=f"{topic_id}: " + ("; ".join(problems) if problems else "index and id map in step"),
    )
