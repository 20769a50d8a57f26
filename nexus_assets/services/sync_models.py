"""What a sync is asked and what it says back: the request a shell parses, the request once its
inputs passed (`check` in services/sync.py), the progress events a shell renders and the outcome
of the whole sync."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from nexus_assets import settings
from nexus_assets.extract.registry import ExtractorName
from nexus_assets.topics.selection import TopicSelection


@dataclass(frozen=True)
class SyncRequest:
    """What a shell asks for, already parsed. Folders are final here (the shell resolved defaults)."""

    db: str
    runs_dir: str
    topics_dir: str
    topics: tuple[str, ...] = ()  # empty: every ACTIVE topic
    extractor: ExtractorName = "embedded"  # a registered extractor (extract/registry.py)
    replay_only: bool = False
    open_after: str | None = None
    no_recall: bool = False
    batch: bool = False
    max_cost: float | None = None
    parallel: int | None = None  # topics compiled at once (PostgreSQL; a DuckDB vault compiles one at a time)
    force: bool = False  # compile even when nothing changed since the last clean sync
    reselect: bool = False  # move the topics to this release's selector and keyword rule (docs/teaching.md); always compiles
    progress: bool = False  # Dagster steps' progress lines on stderr (a person at a terminal)
    tags: Mapping[str, str] = field(default_factory=dict)  # on every Dagster run of this sync
    basics: settings.Basics | None = None  # the shell's settings for the engine's resources (None: read there)


@dataclass
class CheckedSync:
    """A request whose inputs passed: the folders, the LLM options as resource fields, the topics."""

    request: SyncRequest
    topics_dir: Path
    runs_dir: Path
    llm: dict
    selection: TopicSelection

    @property
    def selected(self) -> list[str]:
        return self.selection.selected


@dataclass(frozen=True)
class SyncEvent:
    """Progress a shell may show: `ingesting` (runs_dir), `compiling` (topic n of total),
    `step_error`, `check_failed`, `check_warning` (topic, message)."""

    kind: str
    message: str = ""
    topic_id: str | None = None
    n: int = 0
    total: int = 0


@dataclass
class SyncOutcome:
    """What a sync did, read from its Dagster runs' public results and from the vault afterwards.
    `results`: one object per topic, as `nexus sync --json` prints them."""

    results: list[dict] = field(default_factory=list)
    unchanged: bool = False
    ingest_ok: bool = True
    ingest_run_id: str | None = None
    ingest_errors: list[str] = field(default_factory=list)
    failed: bool = False
    interrupted: bool = False
    not_extracted: dict[str, int] = field(default_factory=dict)
    cost_stop: bool = False
    ingestion_errors_total: int = 0
    dagster_run_ids: list[str] = field(default_factory=list)
    # One line per topic an older selector version or keyword rule selects, and what `--reselect` would do (docs/teaching.md).
    selector_notes: list[str] = field(default_factory=list)

