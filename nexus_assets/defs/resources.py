"""Resources: where the inputs live, which extractor points, and the vault connection. Built by
the code location's entry point (definitions.build_resources) from its settings: a resource never
reads the environment when a step runs."""


import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

import dagster as dg
from pydantic import Field

from nexus_assets import settings
from nexus_assets.defs.jobs import without_recall
from nexus_assets.extract.backends import Extractor
from nexus_assets.extract.registry import ExtractorName, ExtractorRequest, ExtractorUnavailable, extractor_kind, llm_config
from nexus_assets.ingest.formats.limits import InputLimits, node_limit
from nexus_assets.vault.address import VaultAddress, VaultOptions, parse_address
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
    viewer_url: str | None = Field(default=None, description="Where links to the viewer point (NEXUS_VIEWER_URL).")
    limits_given: dict[str, str] = Field(
        default_factory=dict, description="The NEXUS_MAX_* input limits as set, as text (checked when a step reads input)."
    )
    sync_inputs_file: str | None = Field(
        default=None,
        description="`nexus sync`: a JSON file of this sync's inputs; a topic whose marks equal its last clean run's "
        "is skipped in the run (nothing new since). Unset (the UI, the schedule): every topic of a run compiles.",
    )

    def run_selection(self) -> list[dg.AssetKey] | None:
        """What a scheduled or sensor run of `sync_topics` selects: everything (None), or all but recall."""
        return None if self.recall else without_recall(ingest=True)

    @property
    def limits(self) -> InputLimits:
        """The input limits: the settings', with this resource's two fields over them."""
        base = InputLimits.given(self.limits_given)
        given = {"max_file_bytes": self.max_run_file_bytes, "max_depth": self.max_json_depth}
        return replace(base, **{k: v for k, v in given.items() if v is not None})

    @contextmanager
    def node_scope(self) -> Iterator[None]:
        """The extraction scope's node limit (NEXUS_MAX_NODE_CHARS) for the phase run inside."""
        with node_limit(self.limits_given.get("NEXUS_MAX_NODE_CHARS")):
            yield

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
        default=False, description="Move each topic to this release's selector (`nexus sync --reselect`, docs/quality.md)."
    )
    cost_since: str | None = Field(
        default=None,
        description="ISO time the spend counted against max_cost_usd starts (a CLI sync sets its start; default: this step's).",
    )

    def _settings(self):
        """The LLM and selector settings for this step. Read when the step runs, in the run's own
        process (Dagster's run worker is an entry point of its own): the endpoint's key is never a
        resource field, which the UI would show."""
        return settings.load()

    def request(self, vault: Vault, progress: Callable[[SendProgress], None] | None = None, topic_id: str | None = None) -> ExtractorRequest:
        """What the registered extractor's builder is given: the vault, the settings, these options."""
        chosen = self._settings()
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
        """The topic's semantic veto (docs/conflicts.md) with this resource's endpoint options, or None and
        why not; a topic that does not ask for it gets (None, None)."""
        from nexus_assets.relate.veto import semantic_veto_for

        if not topic.semantic_veto:
            return None, None  # the settings are not even read
        return semantic_veto_for(
            topic, self._settings().as_env(), vault.llm_calls, replay_only=self.replay_only,
            model=self.model, base_url=self.base_url, concurrency=self.concurrency,
        )

    def build(self, vault: Vault, progress: Callable[[SendProgress], None] | None = None, topic_id: str | None = None) -> Extractor:
        """The extractor named by `backend`, as registered (extract/registry.py), for one topic's step."""
        try:
            return extractor_kind(self.backend).build(self.request(vault, progress, topic_id))
        except ExtractorUnavailable as exc:
            raise dg.Failure(str(exc)) from None


class VaultResource(dg.ConfigurableResource):
    """The vault, opened the one way every part of Nexus opens it (`Vault.open`: writer intent
    announced, waiting while another writer holds it). One resource per backend below; the code
    location's entry point picks the one its address names (`vault_resource`)."""

    @property
    def address(self) -> VaultAddress:
        raise NotImplementedError

    @contextmanager
    def open(self) -> Iterator[Vault]:
        with Vault.open(self.address) as vault:
            yield vault


class DuckDBVaultResource(VaultResource):
    """The embedded vault: one DuckDB file."""

    path: str = Field(description="The vault file (NEXUS_DB or --db).")
    memory: str | None = Field(default=None, description="DuckDB's memory for the vault (NEXUS_VAULT_MEMORY; unset: 512MB).")

    @property
    def address(self) -> VaultAddress:
        return VaultAddress("duckdb", self.path, VaultOptions(memory=self.memory))


class PostgresVaultResource(VaultResource):
    """A PostgreSQL vault (psycopg 3, a bounded pool per process)."""

    url: str = Field(description="postgresql://user@host:port/db (NEXUS_DB or --db).")
    pool_size: str | None = Field(default=None, description="Connections one process holds at most (NEXUS_PG_POOL_SIZE; unset: 8).")

    @property
    def address(self) -> VaultAddress:
        return VaultAddress("postgresql", self.url, VaultOptions(pool_size=self.pool_size))


def vault_resource(address: str) -> VaultResource:
    """The resource for the backend the address names, with its options."""
    parsed = parse_address(address)
    if parsed.is_postgres:
        return PostgresVaultResource(url=parsed.target, pool_size=parsed.options.pool_size)
    return DuckDBVaultResource(path=parsed.target, memory=parsed.options.memory)


class TopicValues(dg.ConfigurableIOManager):
    """A step's small value by topic handed to the next (resolved_brick_states' resolutions),
    pickled in the instance's storage one file per topic partition: a run over a range of topics
    writes each of its own (Dagster's filesystem IO manager refuses an output of several
    partitions), and a later run of the next step alone reads the latest for its topics."""

    def _path(self, instance, context, topic_id: str) -> Path:
        # Where Dagster's filesystem IO manager keeps a partition's output (and `nexus forget` looks).
        return Path(instance.storage_directory(), *context.asset_key.path, topic_id)

    def handle_output(self, context: dg.OutputContext, obj: dict) -> None:
        import pickle

        for topic_id in context.asset_partition_keys:
            path = self._path(context.step_context.instance, context, topic_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(pickle.dumps(obj[topic_id]))

    def load_input(self, context: dg.InputContext) -> dict:
        import pickle

        return {t: pickle.loads(self._path(context.instance, context, t).read_bytes()) for t in context.asset_partition_keys}
