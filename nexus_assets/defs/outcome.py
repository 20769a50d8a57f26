"""What a `compile_topic` run tells the sync service beyond success and its checks, typed.

Each asset that has something to say records one `StepOutcome` as one metadata value under
`OUTCOME_KEY`: its JSON, as text (shown as it is in the UI, not behind a link: test_asset_graph); `TopicRunOutcome.of(result)` reads every one back, in this one place. The figures
the UI shows (runs_incomplete, llm_stopped_by_cost, conflicts_changed) stay beside it for a person;
the sync service never reads a figure by its display name. Standard library only: the sync service
imports it before Dagster is loaded.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable

OUTCOME_KEY = "nexus_outcome"
# What raw_runs records for a topic of a sync's run that has nothing new since its last clean run
# (lifecycle/idle.py): every later step and check of the run leaves that topic alone (defs/partitions.py).
NOTHING_NEW = "nothing_new"
# The assets that record one (defs/assets.py, defs/recall.py).
REPORTING_ASSETS = ("pointer_extractions", "brick_embeddings")


@dataclass(frozen=True)
class StepOutcome:
    """One asset's say: runs whose extraction is unfinished (asked again next sync), whether the
    LLM stopped at the cost ceiling, whether the set of open conflicts changed."""

    runs_incomplete: int = 0
    llm_stopped_by_cost: bool = False
    conflicts_changed: bool = False

    def metadata(self) -> dict[str, Any]:
        """The metadata entry an asset adds to its materialization."""
        import dagster as dg

        return {OUTCOME_KEY: dg.MetadataValue.text(json.dumps(asdict(self), sort_keys=True))}

    @classmethod
    def parse(cls, value: Any) -> StepOutcome:
        """From the recorded value (a TextMetadataValue, or its text); ValueError, one line, for
        anything that is not one."""
        text = getattr(value, "text", value)
        try:
            data = json.loads(text)
        except (TypeError, ValueError):
            raise ValueError(f"{OUTCOME_KEY} is not JSON: {text!r}"[:300]) from None
        if not isinstance(data, dict):
            raise ValueError(f"{OUTCOME_KEY} is not an object: {data!r}")
        known = {f.name: f.type for f in fields(cls)}
        unknown = set(data) - set(known)
        if unknown:
            raise ValueError(f"{OUTCOME_KEY} has unknown fields {sorted(unknown)}")
        out = cls(**data)
        if not isinstance(out.runs_incomplete, int) or isinstance(out.runs_incomplete, bool) or out.runs_incomplete < 0:
            raise ValueError(f"{OUTCOME_KEY}.runs_incomplete is not a count: {out.runs_incomplete!r}")
        if not isinstance(out.llm_stopped_by_cost, bool) or not isinstance(out.conflicts_changed, bool):
            raise ValueError(f"{OUTCOME_KEY} has a switch that is not true or false: {data!r}")
        return out


@dataclass(frozen=True)
class TopicRunOutcome:
    """Every StepOutcome of one run, combined."""

    runs_incomplete: int = 0
    llm_stopped_by_cost: bool = False
    conflicts_changed: bool = False

    @classmethod
    def combine(cls, steps: Iterable[StepOutcome]) -> TopicRunOutcome:
        steps = list(steps)
        return cls(
            runs_incomplete=sum(s.runs_incomplete for s in steps),
            llm_stopped_by_cost=any(s.llm_stopped_by_cost for s in steps),
            conflicts_changed=any(s.conflicts_changed for s in steps),
        )

    @classmethod
    def of(cls, result, topic_id: str | None = None) -> TopicRunOutcome:
        """From a finished run's result (`execute_in_process`): each reporting asset's outcome, of
        one topic's partition when the run covered several (`topic_id`)."""
        steps = [
            StepOutcome.parse(m.metadata[OUTCOME_KEY])
            for node in REPORTING_ASSETS
            for m in result.asset_materializations_for_node(node)
            if OUTCOME_KEY in m.metadata and (topic_id is None or m.partition == topic_id)
        ]
        return cls.combine(steps)
