"""Asset checks: the promises a person must be able to see hold — no invented text, no silent drift,
and no edit to what was sealed.

Every check is partitioned by topic (docs/architecture.md), so one topic's pass never hides another's
failure, and every evaluation names its topic. Checks only read: drift is recorded by the
`resolved_brick_states` asset, and the checks report what is recorded.
"""

import warnings

import dagster as dg

from nexus_assets.defs.assets import FULL_VERIFY_TAG, topic_manifest, validated_bricks
from nexus_assets.defs.metadata import (
    counts_table,
    figure,
    non_empty,
    problems_table,
    stale_table,
    table,
)
from nexus_assets.defs.partitions import topic_check
from nexus_assets.defs.recall import brick_embeddings
from nexus_assets.defs.resources import VaultResource
from nexus_assets.drift.step import verbatim_problems
from nexus_assets.eval.rules import GoldError
from nexus_assets.eval.step import evaluate, quality_gold_path
from nexus_assets.lifecycle.step import immutability_problems, sealed_manifest
from nexus_assets.embedding.embedder import (
    MODEL as EMBEDDING_MODEL,  # the constant only: no model loads
)
from nexus_assets.relate.step import conflict_rows

# Partitioned asset checks are a preview feature in Dagster 1.13; they are what docs/architecture.md asks for.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


@topic_check(
    asset=validated_bricks,
    blocking=True,
    description="Every stored brick and occurrence is the exact slice of its source node (a sync checks those of the "
    "runs it changed; the nightly run checks all); rejections counted by reason.",
)
def hallucination_rejection(context: dg.AssetCheckExecutionContext, vault: VaultResource, topic_id: str) -> dg.AssetCheckResult:
    with vault.open() as v:
        # A sync checks what it added (the runs whose inputs changed since the last resolution):
        # stored texts never change after. The nightly run, and a topic with no such record, check all.
        runs = None if context.run.tags.get(FULL_VERIFY_TAG) == "true" else v.stage.changed_runs(topic_id)
        occurrences_checked, bricks_checked, bad = verbatim_problems(v, topic_id, runs)
        counts = v.occurrences.rejection_counts(topic_id)
    return dg.AssetCheckResult(
        passed=not bad,
        metadata={
            "topic_id": topic_id,
            "checked": "every stored text" if runs is None else f"the texts of {len(runs)} changed runs",
            "occurrences_checked": figure(occurrences_checked),
            "bricks_checked": figure(bricks_checked),
            "mismatches": figure(len(bad)),
            "rejected_total": figure(sum(counts.values())),
            **non_empty(mismatched_texts=problems_table(bad), rejected_by_reason=counts_table(counts, "reason")),
        },
        description=(
            f"{topic_id}: {len(bad)} stored texts do not match their source" if bad else f"{topic_id}: every stored text is verbatim"
        ),
    )


@topic_check(
    asset=topic_manifest,
    description="No visible brick is stale: each brick's canonical source still has its checksum in the files as "
    "they stand now (checked by the sync: what moved; by the nightly run: every file). Restoring a file clears it.",
)
def checksum_drift(context: dg.AssetCheckExecutionContext, vault: VaultResource, topic_id: str) -> dg.AssetCheckResult:
    with vault.open() as v:
        stale = v.drift.stale_bricks(topic_id)
        checked = v.history.brick_count(topic_id)
        names = v.runs.run_names(r["run_id"] for r in stale)
    ids = [r["brick_id"] for r in stale]
    return dg.AssetCheckResult(
        passed=not stale,
        metadata={
            "topic_id": topic_id,
            "bricks_checked": figure(checked),
            "stale_bricks": figure(len(stale)),
            **non_empty(stale=stale_table(stale, names=names)),
        },
        description=(
            f"{topic_id}: {len(stale)} stale bricks: {', '.join(b[:12] for b in ids[:10])}" if stale else f"{topic_id}: no drift"
        ),
    )


@topic_check(
    asset=topic_manifest,
    description="FINAL bricks equal the sealed manifest and seal-time snapshot (ids, recomputed fingerprints, "
    "text, order, state, sources), and the manifest hash chain is intact: every link, and the newest "
    "manifest's hash (every manifest's hash in the nightly run).",
)
def final_immutability(context: dg.AssetCheckExecutionContext, vault: VaultResource, topic_id: str) -> dg.AssetCheckResult:
    # After a sync, the newest manifest is re-hashed; the nightly run re-hashes the whole chain.
    full = context.run.tags.get(FULL_VERIFY_TAG) == "true"
    with vault.open() as v:
        problems = immutability_problems(v, topic_id, full=full)
        sealed = sealed_manifest(v, topic_id)
        final = v.history.brick_count(topic_id, state="FINAL")
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={
            "topic_id": topic_id,
            "sealed": sealed is not None,
            **non_empty(sealed_manifest=sealed.manifest_hash if sealed else None),
            "final_bricks": figure(final),
            "problems": figure(len(problems)),
            **non_empty(problem_list=problems_table(problems)),
        },
        description=(
            f"{topic_id}: {len(problems)} problems: {problems[0]}"
            if problems
            else f"{topic_id}: " + ("FINAL bricks match the sealed manifest" if sealed else "not sealed; manifest chain intact")
        ),
    )


@topic_check(
    asset=topic_manifest,
    description="Extraction quality against the topic's gold spans (`quality:` in its topic file): overlap "
    "precision and recall must reach min_precision and min_recall; exact-span figures and the gate's "
    "acceptance rate are reported too. Passes with nothing to check when no gold is configured.",
)
def extraction_quality(context: dg.AssetCheckExecutionContext, vault: VaultResource, topic_id: str) -> dg.AssetCheckResult:
    with vault.open() as v:
        topic = v.topics.topic(topic_id)
        gate = topic.quality if topic is not None else None
        if gate is None:
            return dg.AssetCheckResult(passed=True, description="no gold configured (add `quality: {gold: …}` to the topic file)")
        gold = quality_gold_path(v, topic_id, gate.gold)
        try:
            r = evaluate(v, topic_id, gold)
        except GoldError as exc:
            return dg.AssetCheckResult(passed=False, metadata={"gold_file": str(gold)}, description=str(exc))
    failed = [
        f"overlap {name} {value:.3f} < {minimum}"
        for name, value, minimum in (
            ("precision", r["overlap_precision"], gate.min_precision),
            ("recall", r["overlap_recall"], gate.min_recall),
        )
        if value < minimum
    ]
    figures = ("overlap_precision", "overlap_recall", "overlap_f1", "exact_precision", "exact_recall", "exact_f1", "acceptance_rate")
    return dg.AssetCheckResult(
        passed=not failed,
        metadata={
            "gold_file": str(gold),
            **{name: figure(float(r[name])) for name in figures},
            "min_precision": figure(float(gate.min_precision)),
            "min_recall": figure(float(gate.min_recall)),
            "predicted_spans": figure(r["predicted"]),
            "gold_spans": figure(r["gold"]),
            "exact_matches": figure(r["exact_matches"]),
            "misses": figure(len(r["misses"])),
            "false_positives": figure(len(r["false_positives"])),
            "per_run": dg.MetadataValue.table(
                [
                    dg.TableRecord({"run_id": p["run_id"], **{k: p[k] for k in ("predicted", "gold", "exact_matches")},
                                    **{k: float(p[k]) for k in figures[:6]}})
                    for p in r["per_run"]
                ],
                schema=dg.TableSchema(
                    columns=[dg.TableColumn("run_id", "string")]
                    + [dg.TableColumn(k, "int") for k in ("predicted", "gold", "exact_matches")]
                    + [dg.TableColumn(k, "float") for k in figures[:6]]
                ),
            ),
        },
        description="; ".join(failed) if failed else (
            f"overlap P {r['overlap_precision']:.3f} ≥ {gate.min_precision}, R {r['overlap_recall']:.3f} ≥ {gate.min_recall}"
        ),
    )


@topic_check(
    asset=topic_manifest,
    # After the bricks are embedded and related, when the sync builds them; a sync without recall
    # reports the relations recorded so far.
    additional_deps=[brick_embeddings],
    description="Warns (never blocks) while related bricks of the topic state different values: a person "
    "reads both sides in `nexus conflicts` or the viewer's Conflict View; Nexus never picks.",
)
def open_conflicts(context: dg.AssetCheckExecutionContext, vault: VaultResource, topic_id: str) -> dg.AssetCheckResult:
    with vault.open() as v:
        rows = conflict_rows(v, topic_id, EMBEDDING_MODEL)
        pairs, _ = v.relations.pair_counts(topic_id, EMBEDDING_MODEL)
    # Ids, runs, paths and the kind of difference only: a check's history is never edited (forgetting).
    listed = table(
        [
            {
                "kind": r["conflict"].split(":", 1)[0],
                "first": r["bricks"][0]["brick_id"][:12],
                "first_run": r["bricks"][0]["source"]["run_id"] or "",
                "second": r["bricks"][1]["brick_id"][:12],
                "second_run": r["bricks"][1]["source"]["run_id"] or "",
                "similarity": float(r["similarity"]),
            }
            for r in rows[:100]
        ],
        [("kind", "string"), ("first", "string"), ("first_run", "string"), ("second", "string"),
         ("second_run", "string"), ("similarity", "float")],
    )
    return dg.AssetCheckResult(
        passed=not rows,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"topic_id": topic_id, "open_conflicts": len(rows), "related_pairs": pairs, **non_empty(conflicts=listed)},
        description=(
            f"{topic_id}: {len(rows)} pairs of related bricks state different values; see `nexus conflicts {topic_id}`"
            if rows
            else f"{topic_id}: no conflicting related bricks"
        ),
    )
