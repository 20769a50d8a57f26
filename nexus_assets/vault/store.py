"""`Vault`: typed access to everything Nexus Sync knows, in one DuckDB file.

Append-only by design (DESIGN §2.8): a sync inserts; the only updates are a brick's state,
order, stale flag and superseded_by, and a run's latest-version marker. The one thing a sync
deletes is its own stage (`staged_*`): scratch rows holding a resolution until it is published,
in place of a pickled step output, never a record. A topic's visible result (bricks, their
sources and the manifest) is published in one transaction.
"""

from __future__ import annotations

from nexus_assets.vault.bricks import RESOLUTION_RULES, STAGE_SLICE, BrickRecords  # noqa: F401 (re-exported)
from nexus_assets.vault.catalog import Catalog
from nexus_assets.vault.drift import DriftRecords
from nexus_assets.vault.extractions import ExtractionRecords
from nexus_assets.vault.forgetting import ForgettingRecords
from nexus_assets.vault.history import HistoryQueries
from nexus_assets.vault.recall import RecallRecords
from nexus_assets.vault.records import RunVersion, storable_json, storable_text  # noqa: F401 (re-exported)
from nexus_assets.vault.runs import RunRecords
from nexus_assets.vault.topics import TopicRecords


class Vault(
    Catalog,
    TopicRecords,
    RunRecords,
    ExtractionRecords,
    BrickRecords,
    HistoryQueries,
    DriftRecords,
    ForgettingRecords,
    RecallRecords,
):
    """Typed access to the vault over one DuckDB connection: the record stores of every phase on one
    connection. A phase is typed against the narrow store it uses (e.g. `RunRecords`), never this."""
