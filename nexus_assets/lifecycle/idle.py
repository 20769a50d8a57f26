"""A topic with nothing new in a sync is checked, not compiled (docs/architecture.md): no
Dagster run starts for it.

After a topic's run passes everything, its *marks* are recorded: what its run read outside the
vault (its definition, the extractor and its settings, this release) and what it would read in the
vault (the latest version of every run it admits, its resolution inputs, its state, manifests and
teaching, extractions not yet validated). A later sync whose marks for the topic are the same, and
whose quick drift check finds nothing moved, would extract nothing, validate nothing and resolve
nothing: it skips the topic. Any difference, or a failed check last time, runs it as before.
"""

from __future__ import annotations

from typing import Iterable

from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.drift.step import current_drift
from nexus_assets.extract.step import admitted
from nexus_assets.vault.records import RunVersion


def _scope(topic_id: str) -> str:
    return f"topic:{topic_id}"


def topic_marks(vault, topic_id: str, inputs: dict) -> str | None:
    """The topic's marks as one digest (`inputs`: this sync's inputs outside the vault, as
    `sync_inputs` reads them); None when the topic must run whatever was recorded (not compiled
    yet, not in a compiled state, a source moved or drifted)."""
    topic = vault.topics.topic(topic_id)
    if topic is None:
        return None
    if current_drift(vault, topic_id).checked:
        return None
    latest = [RunVersion(r, v) for r, v in sorted(vault.runs.latest_versions().items())]
    counts = vault.history.topic_history_counts(topic_id)
    outside = {k: inputs[k] for k in ("extractor", "recall", "settings", "release", "embedding_model")}
    outside["topic"] = inputs["topics"].get(topic_id)
    outside["gold"] = inputs["gold"].get(topic_id)
    return sha256_hex(
        canonical_json(
            [
                outside,
                topic.model_dump(mode="json"),
                [f"{rv.run_id}:{rv.version_id}" for rv in admitted(vault, topic, latest)],
                vault.stage.topic_inputs_digest(topic_id),
                list(counts),
            ]
        )
    )


def idle_topics(vault, topic_ids: Iterable[str], inputs: dict) -> set[str]:
    """The topics whose marks are the ones recorded after their last run that passed everything."""
    idle = set()
    for topic_id in topic_ids:
        recorded = vault.history.last_clean_sync(_scope(topic_id))
        if recorded is not None and topic_marks(vault, topic_id, inputs) == recorded:
            idle.add(topic_id)
    return idle


def record_idle_marks(vault, topic_id: str, inputs: dict) -> None:
    """After a topic's run passed everything: its marks, for the next sync to compare."""
    marks = topic_marks(vault, topic_id, inputs)
    if marks is not None:
        vault.history.record_clean_sync(marks, _scope(topic_id))
