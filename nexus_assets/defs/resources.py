"""Resources: where the inputs live, which extractor points, and the vault connection."""


import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import dagster as dg
from dagster_duckdb import DuckDBResource
from pydantic import Field

from nexus_assets import settings
from nexus_assets.defs.jobs import without_recall
from nexus_assets.extract.backends import Extractor
from nexus_assets.extract.registry import ExtractorName, ExtractorRequest, ExtractorUnavailable, extractor_kind, llm_config
from nexus_assets.ingest.runfiles import Limits
from nexus_assets.llm.client import LLMConfig, SendProgress
from nexus_assets.store import Vault


class NexusSettings(dg.ConfigurableResource):
    """Where run files and topic files live."""

    runs_dir: str = "data/runs"
    topics_dir: str = "data/topics"
    open_after: str | None = Field(
        default=None,
        description="Export conversations updated at or after this ISO time are treated as OPEN.",
    )
    max_run_file_bytes: int | None = Field(default=None, description="Default: NEXUS_MAX_RUN_FILE_BYTES or 32 MiB.")
    max_json_depth: int | None = Field(default=None, description="Default: NEXUS_MAX_JSON_DEPTH or 64.")
    progress: bool = Field(default=False, description="Print one-line progress to stderr (the CLI sets it).")
    recall: bool = Field(
        default=True,
        description="Scheduled and sensor runs build embeddings and the vector index (off: NEXUS_NO_RECALL=1).",
    )

    def run_selection(self) -> list[dg.AssetKey] | None:
        """What a scheduled or sensor run of `sync_topics` selects: everything (None), or all but recall."""
        return None if self.recall else without_recall(ingest=True)

    @property
    def limits(self) -> Limits:
        given = {"max_file_bytes": self.max_run_file_bytes, "max_depth": self.max_json_depth}
        return Limits(**{k: v for k, v in given.items() if v is not None})

    def say(self, context: dg.OpExecutionContext | dg.AssetCheckExecutionContext, message: str) -> None:
        context.log.info(message)
        if self.progress:
            print(f"  {message}", file=sys.stderr, flush=True)

    def path(self, which: str) -> Path:
        return Path(getattr(self, which))


class ExtractorResource(dg.ConfigurableResource):
    """Which extractor points at text. `embedded` is offline and deterministic; `openai` calls any
    OpenAI-compatible server (OPENAI_BASE_URL, OPENAI_API_KEY, NEXUS_LLM_MODEL)."""

    backend: ExtractorName = "embedded"
    model: str | None = Field(default=None, description="Overrides NEXUS_LLM_MODEL.")
    base_url: str | None = Field(default=None, description="Overrides OPENAI_BASE_URL.")
    replay_only: bool = Field(default=False, description="Fail on a cache miss instead of calling the model.")
    token_budget: int | None = Field(
        default=None, description="Source tokens per request (NEXUS_LLM_TOKEN_BUDGET, else what NEXUS_LLM_CONTEXT_TOKENS and NEXUS_LLM_MAX_OUTPUT_TOKENS allow); larger runs are chunked, small ones share a request."
    )
    concurrency: int | None = Field(default=None, ge=1, description="Requests in flight at once (NEXUS_LLM_CONCURRENCY, else 8).")
    max_cost_usd: float | None = Field(
        default=None, ge=0, description="Stop sending before the estimated spend of this run passes it (NEXUS_LLM_MAX_COST)."
    )
    batch: bool = Field(default=False, description="Send through the OpenAI Batch API (half price, answered within a day).")
    reselect: bool = Field(
        default=False, description="Move each topic to this release's selector (`nexus sync --reselect`, DESIGN §5)."
    )
    cost_since: str | None = Field(
        default=None,
        description="ISO time the spend counted against max_cost_usd starts (a CLI sync sets its start; default: this step's).",
    )

    def request(self, vault: Vault, progress: Callable[[SendProgress], None] | None = None, topic_id: str | None = None) -> ExtractorRequest:
        """What the registered extractor's builder is given: the vault, the settings, these options."""
        chosen = settings.load()
        return ExtractorRequest(
            vault=vault, topic_id=topic_id, env=chosen.as_env(), embedded_selector=chosen.embedded_selector,
            selector_weights=chosen.selector_weights, progress=progress, model=self.model, base_url=self.base_url,
            replay_only=self.replay_only, token_budget=self.token_budget, concurrency=self.concurrency,
            max_cost_usd=self.max_cost_usd, batch=self.batch, reselect=self.reselect, cost_since=self.cost_since,
        )

    def llm_config(self) -> LLMConfig:
        try:
            return llm_config(self.request(None))
        except ExtractorUnavailable as exc:
            raise dg.Failure(str(exc)) from None

    def semantic_veto(self, topic, vault: Vault):
        """The topic's semantic veto (DESIGN §12) with this resource's endpoint options, or None and
        why not; a topic that does not ask for it gets (None, None)."""
        from nexus_assets.relate.veto import semantic_veto_for

        if not topic.semantic_veto:
            return None, None  # the settings are not even read
        return semantic_veto_for(
            topic, settings.load().as_env(), vault.llm_calls, replay_only=self.replay_only,
            model=self.model, base_url=self.base_url, concurrency=self.concurrency,
        )

    def build(self, vault: Vault, progress: Callable[[SendProgress], None] | None = None, topic_id: str | None = None) -> Extractor:
        """The extractor named by `backend`, as registered (extract/registry.py), for one topic's step."""
        try:
            return extractor_kind(self.backend).build(self.request(vault, progress, topic_id))
        except ExtractorUnavailable as exc:
            raise dg.Failure(str(exc)) from None


class VaultResource(dg.ConfigurableResource):
    """The DuckDB vault named by the dagster-duckdb resource, opened the one way every part of
    Nexus opens it (`Vault.open`: writer intent announced, waiting while another writer holds it)."""

    duckdb: dg.ResourceDependency[DuckDBResource]

    @contextmanager
    def open(self) -> Iterator[Vault]:
        with Vault.open(self.duckdb.database) as vault:
            yield vault
