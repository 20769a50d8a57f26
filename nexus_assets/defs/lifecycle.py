"""The `seal_topic` job: seal one topic partition from the Dagster UI, through the same code as `nexus seal`.

An op job, not an asset: "Materialize all" in the UI must never seal a topic; sealing is a
person's decision, launched on purpose from this job's page.
"""


import dagster as dg

from nexus_assets.defs.assets import WRITER_POOL
from nexus_assets.defs.partitions import topics_partitions
from nexus_assets.defs.resources import NexusSettings, VaultResource
from nexus_assets.lifecycle.step import LifecycleError, SealRefused, seal


@dg.op(
    pool=WRITER_POOL,
    description="Check the gates (runs closed, nothing stale, sync current), make every visible brick FINAL, "
    "record the sealed manifest and lock the topic.",
)
def seal_topic_partition(context: dg.OpExecutionContext, vault: VaultResource, settings: NexusSettings) -> None:
    topic_id = context.partition_key
    with vault.open() as v:
        try:
            result = seal(
                v,
                topic_id,
                actor=f"seal_topic job (run {context.run.run_id[:8]})",
                topics_dir=settings.path("topics_dir"),
                runs_dir=settings.path("runs_dir"),
                dagster_run_id=context.run.run_id,
            )
        except SealRefused as exc:
            raise dg.Failure(str(exc), metadata={"failed_gates": dg.MetadataValue.json([f.as_dict() for f in exc.failures])}) from None
        except LifecycleError as exc:
            raise dg.Failure(str(exc)) from None
    for note in result.notes:
        context.log.warning(note)
    if result.already_sealed:
        context.log.info(f"{topic_id} was already LOCKED; nothing changed")
        return
    settings.say(context, f"{topic_id}: sealed, {result.bricks} FINAL bricks, manifest {result.manifest_hash[:12]}")
    # The sealed manifest is a new version of the topic_manifest partition; say so in its history.
    context.log_event(
        dg.AssetMaterialization(
            asset_key=dg.AssetKey("topic_manifest"),
            partition=topic_id,
            description="sealed: every visible brick FINAL, order frozen",
            metadata={
                "manifest_hash": result.manifest_hash,
                "sealed": True,
                "bricks": result.bricks,
                "new_manifest": result.new_manifest,
            },
        )
    )


@dg.job(
    partitions_def=topics_partitions,
    description="Seal one topic (ACTIVE → SEALING → LOCKED): its bricks become FINAL and immutable.",
)
def seal_topic():
    seal_topic_partition()
