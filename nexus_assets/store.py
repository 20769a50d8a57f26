"""`Vault`: everything Nexus Sync knows, as one record store per phase over one DuckDB connection.

Append-only by design (docs/invariants.md §8): a sync inserts; the only updates are a brick's state,
order, stale flag and superseded_by, and a run's latest-version marker. The one thing a sync
deletes is its own stage (`staged_*`): scratch rows holding a resolution until it is published,
in place of a pickled step output, never a record. A topic's visible result (bricks, their
sources and the manifest) is published in one transaction.

Each store lives with its phase and owns that phase's tables; nothing outside a store writes SQL.
A second backend implements these stores over its own connection.
"""

from __future__ import annotations

from functools import cached_property

import duckdb

from nexus_assets.drift.records import DriftRecords
from nexus_assets.extract.about_records import AboutRecords
from nexus_assets.extract.records import ExtractionRecords
from nexus_assets.forget.records import ForgettingRecords
from nexus_assets.gate.records import OccurrenceRecords
from nexus_assets.ingest.passage_records import PassageRecords
from nexus_assets.ingest.records import RunRecords
from nexus_assets.publish.records import BrickRecords
from nexus_assets.recall.records import RecallRecords
from nexus_assets.relate.records import RelationRecords
from nexus_assets.resolve.records import StageRecords
from nexus_assets.teaching.records import TeachingRecords
from nexus_assets.topics.records import TopicRecords
from nexus_assets.upgrades import BACKFILLS
from nexus_assets.vault.catalog import BaseCatalog
from nexus_assets.history.records import HistoryQueries
from nexus_assets.vault.records import RunVersion, storable_json, storable_text  # noqa: F401 (re-exported)


class Vault(BaseCatalog):
    """The vault opened for a phase: the catalog (what `nexus topics` lists) plus one record store
    per phase, all on one connection and one transaction."""

    backfills = BACKFILLS

    def __init__(self, conn: duckdb.DuckDBPyConnection, *, migrate: bool = True):
        super().__init__(conn, migrate=migrate)
        self.topics = TopicRecords(self)  # topic definitions and their states
        self.runs = RunRecords(self)  # ingest: run files, runs, nodes, ingestion errors
        self.passages = PassageRecords(self)  # the record: every run's passages, as addresses into its nodes
        self.extractions = ExtractionRecords(self)  # extract: the extractor's pointers per run version
        self.about = AboutRecords(self)  # which runs each topic is about: its record
        self.occurrences = OccurrenceRecords(self)  # gate: occurrences and rejections
        self.stage = StageRecords(self)  # resolve: the stage and the "nothing changed" digest
        self.bricks = BrickRecords(self)  # publish: bricks, their sources, manifests, syncs
        self.drift = DriftRecords(self)  # each source's status and its flips
        self.history = HistoryQueries(self)  # transitions, syncs, seal snapshots: what happened when
        self.forgetting = ForgettingRecords(self)  # lineage, erasure, tombstones
        self.recall = RecallRecords(self)  # embeddings and the answer audit trail
        self.relations = RelationRecords(self)  # related bricks and their conflicts (derived from embeddings)
        self.teaching = TeachingRecords(self)  # a person's keep/drop verdicts; each topic's selector version

    @cached_property
    def llm_calls(self):
        """The LLM path's records (answers per topic, requests, batches); built on first use, so a
        command that never calls an LLM never imports its client."""
        from nexus_assets.llm.store import LLMCallRecords

        return LLMCallRecords(self.conn)
