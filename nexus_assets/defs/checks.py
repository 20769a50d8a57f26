"""Asset checks: the promises a person must be able to see hold — no invented text, no silent drift,
and no edit to what was sealed."""


import dagster as dg

from nexus_assets.defs.assets import FULL_VERIFY_TAG, WRITER_POOL, topic_manifest, validated_bricks
from nexus_assets.defs.resources import VaultResource
from nexus_assets.drift import current_drift, file_drift, verbatim_problems
from nexus_assets.lifecycle import immutability_problems, sealed_manifest


@dg.asset_check(
    asset=validated_bricks,
    blocking=True,
    description="Every stored brick and occurrence is the exact slice of its source node; rejections counted by reason.",
)
def hallucination_rejection(context: dg.AssetCheckExecutionContext, vault: VaultResource) -> dg.AssetCheckResult:
    with vault.open() as v:
        occurrences_checked, bricks_checked, bad = verbatim_problems(v, context.partition_key)
        counts = v.rejection_counts(context.partition_key)
    return dg.AssetCheckResult(
        passed=not bad,
        metadata={
            "occurrences_checked": occurrences_checked,
            "bricks_checked": bricks_checked,
            "mismatches": dg.MetadataValue.md("\n".join(f"- {m}" for m in bad[:50]) or "_none_"),
            "rejected_total": sum(counts.values()),
            "rejected_by_reason": dg.MetadataValue.json(counts),
        },
        description=f"{len(bad)} stored texts do not match their source" if bad else "every stored text is verbatim",
    )


@dg.asset_check(
    asset=topic_manifest,
    pool=WRITER_POOL,
    description="Bricks whose source node no longer has its checksum are flagged stale: against newer run versions, "
    "and by re-reading the source files that moved (every file in the nightly run).",
)
def checksum_drift(context: dg.AssetCheckExecutionContext, vault: VaultResource) -> dg.AssetCheckResult:
    topic_id = context.partition_key
    # The nightly schedule asks for the full re-read of every source file; a sync checks what moved.
    full = context.run.tags.get(FULL_VERIFY_TAG) == "true"
    with vault.open() as v:
        drifts = file_drift(v, v.bricks(topic_id)) if full else current_drift(v, topic_id)
        v.flag_stale(d.brick_id for d in drifts)
        checked = v.brick_count(topic_id)
    stale = sorted({d.brick_id for d in drifts})
    return dg.AssetCheckResult(
        passed=not drifts,
        metadata={
            "bricks_checked": checked,
            "full_reread": full,
            "stale_bricks": dg.MetadataValue.json(stale),
            "drift": dg.MetadataValue.md("\n".join(f"- `{d.brick_id[:12]}` {d.problem}" for d in drifts[:50]) or "_none_"),
        },
        description=(f"{len(stale)} stale bricks: {', '.join(b[:12] for b in stale[:10])}" if stale else "no drift"),
    )


@dg.asset_check(
    asset=topic_manifest,
    pool=WRITER_POOL,
    description="FINAL bricks equal the sealed manifest and seal-time snapshot (ids, recomputed fingerprints, "
    "text, order, state, sources), and the manifest hash chain is intact.",
)
def final_immutability(context: dg.AssetCheckExecutionContext, vault: VaultResource) -> dg.AssetCheckResult:
    topic_id = context.partition_key
    with vault.open() as v:
        problems = immutability_problems(v, topic_id)
        sealed = sealed_manifest(v, topic_id)
        final = sum(1 for b in v.bricks(topic_id) if b.state == "FINAL")
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={
            "sealed_manifest": sealed.manifest_hash if sealed else "",
            "final_bricks": final,
            "problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems[:50]) or "_none_"),
        },
        description=(
            f"{len(problems)} problems: {problems[0]}"
            if problems
            else ("FINAL bricks match the sealed manifest" if sealed else "not sealed; manifest chain intact")
        ),
    )


@dg.asset_check(
    asset=topic_manifest,
    description="Extraction quality against the topic's gold spans (`quality:` in its topic file): overlap "
    "precision and recall must reach min_precision and min_recall; exact-span figures and the gate's "
    "acceptance rate are reported too. Passes with nothing to check when no gold is configured.",
)
def extraction_quality(context: dg.AssetCheckExecutionContext, vault: VaultResource) -> dg.AssetCheckResult:
    from nexus_assets.core.quality import GoldError
    from nexus_assets.evaluation import evaluate, quality_gold_path

    topic_id = context.partition_key
    with vault.open() as v:
        topic = v.topic(topic_id)
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
            **{name: float(r[name]) for name in figures},
            "min_precision": float(gate.min_precision),
            "min_recall": float(gate.min_recall),
            "predicted_spans": r["predicted"],
            "gold_spans": r["gold"],
            "exact_matches": r["exact_matches"],
            "misses": len(r["misses"]),
            "false_positives": len(r["false_positives"]),
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
