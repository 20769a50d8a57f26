"""Every setting Nexus reads from the environment, with its default: the one place that reads it
(docs/configuration.md). Each entry point — a `nexus` command (cli.main), Dagster's definitions,
the API and the MCP server (built by `nexus api` / `nexus mcp`) — makes its settings once when it
starts acting and passes the values down; nothing else in `nexus_assets` reads `os.environ`
(test_settings), and nothing writes a module global with them: the vault's memory and pool size
travel with the vault address (`VaultOptions`), the input limits as an `InputLimits`, the
viewer's address as an argument. A fresh `Settings` reads the environment afresh.

`Settings` is a pydantic-settings model, built on first use: importing pydantic costs a read
command more than the rest of its start-up, and `nexus topics` never loads it (test_fast_reads).
What every command needs before it knows what it runs (the vault, the folders, the extractor,
the limits as text) is `Basics`, read with the standard library; `test_settings` checks the two agree.

Values a command parses only when it uses them (the LLM's numbers, the input limits, the token
budget) are kept as the environment gives them, as text, and parsed where they are used, with
the messages a bad value has always had: a bad NEXUS_LLM_RPM fails a sync with the openai
extractor (exit 2, one line), never `nexus topics` or an embedded sync.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

from nexus_assets.vault.address import VaultAddress, VaultOptions, parse_address  # standard library only, like Basics

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings

    from nexus_assets.ingest.formats.limits import InputLimits

DEFAULT_DB = "data/nexus.duckdb"
DEFAULT_RUNS_DIR = "data/runs"
DEFAULT_TOPICS_DIR = "data/topics"
DEFAULT_EXTRACTOR = "embedded"
DEFAULT_VAULT_MEMORY = "512MB"
DEFAULT_VIEWER_URL = "http://127.0.0.1:8765"
# What `nexus plan` estimates for when NEXUS_LLM_MODEL is unset (it says so): a common hosted model.
DEFAULT_PLAN_MODEL = "gpt-4o-mini"

# The input limits (invariant 12) and their defaults are written once, in
# nexus_assets/ingest/formats/limits.py (DEFAULTS); their variables all start with this.
LIMIT_PREFIX = "NEXUS_MAX_"


# Variables that only SET something for a third-party library, never read as our configuration:
# embedding/embedder.py (TOKENIZERS_PARALLELISM), cli/__init__.py (PYDANTIC_DISABLE_PLUGINS), and the DAGSTER_HOME that
# services/sync_runs.py and forget/step.py set for Dagster's own `DagsterInstance.get()`.
WRITTEN_FOR_LIBRARIES = (
    "TOKENIZERS_PARALLELISM",
    "PYDANTIC_DISABLE_PLUGINS",
    "DAGSTER_HOME",
)


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


class Basics(NamedTuple):
    """What every `nexus` command needs before it knows what it runs; standard library only."""

    db: VaultAddress
    runs_dir: str | None  # None: the vault's recorded folder, else DEFAULT_RUNS_DIR
    topics_dir: str | None
    extractor: str
    open_after: str | None
    vault_memory: str | None  # None: DEFAULT_VAULT_MEMORY
    no_recall: bool = False  # NEXUS_NO_RECALL: a sync leaves the recall group (embeddings, vector index) out
    pg_pool_size: str | None = None  # NEXUS_PG_POOL_SIZE, as text (checked when a PostgreSQL vault opens)
    viewer_url: str = DEFAULT_VIEWER_URL  # NEXUS_VIEWER_URL: where links to the viewer point
    limits_given: tuple[tuple[str, str], ...] = ()  # the NEXUS_MAX_* variables set, as text, sorted

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Basics:
        env = _environ(environ)
        options = VaultOptions(env.get("NEXUS_VAULT_MEMORY") or None, env.get("NEXUS_PG_POOL_SIZE") or None)
        return cls(
            db=parse_address(env.get("NEXUS_DB") or DEFAULT_DB, options),  # parsed once, where it enters
            runs_dir=env.get("NEXUS_RUNS_DIR") or None,
            topics_dir=env.get("NEXUS_TOPICS_DIR") or None,
            extractor=env.get("NEXUS_EXTRACTOR", DEFAULT_EXTRACTOR),
            open_after=env.get("NEXUS_OPEN_AFTER"),
            vault_memory=options.memory,
            no_recall=truthy(env.get("NEXUS_NO_RECALL")),
            pg_pool_size=options.pool_size,
            viewer_url=env.get("NEXUS_VIEWER_URL") or DEFAULT_VIEWER_URL,
            limits_given=tuple(sorted((k, v) for k, v in env.items() if k.startswith(LIMIT_PREFIX))),
        )

    @property
    def vault_options(self) -> VaultOptions:
        """How this process opens a vault: what every address it parses carries."""
        return VaultOptions(self.vault_memory, self.pg_pool_size)

    def address(self, text: str) -> VaultAddress:
        """A vault address given elsewhere (a flag, a request), with this process's options."""
        return parse_address(text, self.vault_options)

    def input_limits(self) -> InputLimits:
        """The input limits in effect; ValueError naming the variable for one that is not a whole
        number (0 or less means the default). Parsed here, when a command reads input."""
        from nexus_assets.ingest.formats.limits import InputLimits

        return InputLimits.given(dict(self.limits_given))

    @property
    def node_limit(self) -> str | None:
        """NEXUS_MAX_NODE_CHARS as text, for `limits.node_limit(...)` around a command."""
        return dict(self.limits_given).get("NEXUS_MAX_NODE_CHARS")


def truthy(value: str | None) -> bool:
    """A switch as the environment gives it: 1, true, yes or on (any case) is on; unset or anything else is off."""
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def user(environ: Mapping[str, str] | None = None) -> str | None:
    """$USER, for audit rows and topic transitions (None: unset; the caller asks for the login name)."""
    return _environ(environ).get("USER") or None


def kill_forget_at(environ: Mapping[str, str] | None = None) -> str | None:
    """Test hook: the named point at which `nexus forget` kills itself (NEXUS_TEST_KILL_FORGET_AT)."""
    return _environ(environ).get("NEXUS_TEST_KILL_FORGET_AT")


def kill_copy_at(environ: Mapping[str, str] | None = None) -> str | None:
    """Test hook: the named point at which `nexus vault copy` kills itself (NEXUS_TEST_KILL_COPY_AT)."""
    return _environ(environ).get("NEXUS_TEST_KILL_COPY_AT")


def dagster_home(environ: Mapping[str, str] | None = None) -> str | None:
    """$DAGSTER_HOME as the user set it (None: unset or empty)."""
    return _environ(environ).get("DAGSTER_HOME") or None


def prefixed(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Every NEXUS_* and OPENAI_* variable as set, sorted: part of what a sync compares to skip
    work when nothing changed (any of them may change what a sync produces)."""
    return sorted((k, v) for k, v in _environ(environ).items() if k.startswith(("NEXUS_", "OPENAI_")))


class _Setting(NamedTuple):
    """One row of the settings table: a `Settings` field, read from `variable`."""

    field: str
    type: Any
    variable: str
    default: Any = None
    description: str = ""
    secret: bool = False  # left out of the repr (and described only when a description is given)


# The settings table, by group, in the order `Settings` lists its fields (docs/configuration.md).
_VAULT = (
    # The vault and its inputs.
    _Setting("db", str, "NEXUS_DB", DEFAULT_DB, "the vault"),
    _Setting("runs_dir", str | None, "NEXUS_RUNS_DIR", None, f"run files (unset: the vault's recorded folder, else {DEFAULT_RUNS_DIR})"),
    _Setting("topics_dir", str | None, "NEXUS_TOPICS_DIR", None, f"topic files (unset: the vault's recorded folder, else {DEFAULT_TOPICS_DIR})"),
    _Setting("extractor", str, "NEXUS_EXTRACTOR", DEFAULT_EXTRACTOR, "embedded or openai"),
    _Setting(
        "embedded_selector", str | None, "NEXUS_EMBEDDED_EXTRACTOR", None,
        "the embedded selector a new topic (or --reselect) takes: embedded-v3 (unset), embedded-v4, embedded-v5 or embedded-v6",
    ),
    _Setting("selector_weights", str | None, "NEXUS_SELECTOR_WEIGHTS", None, "the trained selector's weights file, v4's or v5's (unset: the shipped one)"),
    _Setting("open_after", str | None, "NEXUS_OPEN_AFTER", None, "export conversations updated at or after this ISO time are OPEN"),
    _Setting("vault_memory", str | None, "NEXUS_VAULT_MEMORY", None, f"DuckDB's memory for the vault (unset: {DEFAULT_VAULT_MEMORY})"),
    _Setting("no_recall", str | None, "NEXUS_NO_RECALL", None, "1: a sync builds no embeddings or vector index (as --no-recall)"),
    _Setting("viewer_url", str, "NEXUS_VIEWER_URL", DEFAULT_VIEWER_URL, "where the trace viewer's pages are linked"),
    _Setting("dagster_home", str | None, "DAGSTER_HOME", None, "Dagster's instance (unset: dagster_home/ beside the vault, if any)"),
    _Setting("user", str | None, "USER", None, "who asks, for audit rows (unset: the login name)"),
    _Setting("pg_pool_size", str | None, "NEXUS_PG_POOL_SIZE", None, "a PostgreSQL vault: connections one process opens, at most (unset: 8)"),
    _Setting("test_kill_forget_at", str | None, "NEXUS_TEST_KILL_FORGET_AT", None, "tests only: where forget kills itself"),
    _Setting("test_kill_copy_at", str | None, "NEXUS_TEST_KILL_COPY_AT", None, "tests only: where vault copy kills itself"),
)
# Input limits, as text: parsed by `limits()`. Their defaults are written once, in
# nexus_assets/ingest/formats/limits.py (DEFAULTS); each field is its variable without NEXUS_, lowercased.
_LIMITS = (
    "NEXUS_MAX_RUN_FILE_BYTES", "NEXUS_MAX_JSON_DEPTH", "NEXUS_MAX_NODE_CHARS", "NEXUS_MAX_ZIP_INFLATED_BYTES",
    "NEXUS_MAX_ZIP_RATIO", "NEXUS_MAX_CONVERSATIONS_PER_FILE", "NEXUS_MAX_ERRORS_PER_FILE", "NEXUS_MAX_JSONL_LINE_BYTES",
    "NEXUS_MAX_SESSION_FILE_BYTES", "NEXUS_MAX_SESSION_LINES",
)
_LLM = (
    # The LLM endpoint, as text: parsed by LLMConfig.from_env and token_budget_from_env (their messages).
    _Setting("openai_base_url", str | None, "OPENAI_BASE_URL"),
    _Setting("openai_api_key", str | None, "OPENAI_API_KEY", secret=True),
    _Setting("llm_model", str | None, "NEXUS_LLM_MODEL"),
    _Setting(
        "llm_token_budget", str | None, "NEXUS_LLM_TOKEN_BUDGET", None,
        "source tokens per request (unset: from NEXUS_LLM_CONTEXT_TOKENS and NEXUS_LLM_MAX_OUTPUT_TOKENS)",
    ),
    _Setting("llm_context_tokens", str, "NEXUS_LLM_CONTEXT_TOKENS", "128000", "the model's context window in tokens; sizes each request"),
    _Setting("llm_max_output_tokens", str, "NEXUS_LLM_MAX_OUTPUT_TOKENS", "2048", "a reply's length limit in tokens; sizes each request too"),
    _Setting("llm_concurrency", str, "NEXUS_LLM_CONCURRENCY", "8"),
    _Setting("llm_timeout", str, "NEXUS_LLM_TIMEOUT", "120"),
    _Setting("llm_max_reply_bytes", str, "NEXUS_LLM_MAX_REPLY_BYTES", "1000000"),
    _Setting("llm_rpm", str | None, "NEXUS_LLM_RPM"),
    _Setting("llm_tpm", str | None, "NEXUS_LLM_TPM"),
    _Setting("llm_max_cost", str | None, "NEXUS_LLM_MAX_COST"),
    _Setting("price_in_per_mtok", str | None, "NEXUS_PRICE_IN_PER_MTOK"),
    _Setting("price_out_per_mtok", str | None, "NEXUS_PRICE_OUT_PER_MTOK"),
    _Setting("llm_batch_poll", str, "NEXUS_LLM_BATCH_POLL", "30"),
    _Setting("llm_batch_wait", str, "NEXUS_LLM_BATCH_WAIT", "86400"),
)
_SERVER = (
    # The HTTP API and MCP server (`nexus api`, `nexus mcp`).
    _Setting(
        "api_token", str | None, "NEXUS_API_TOKEN", None,
        "bearer token every API request must carry; unset: the API binds loopback only", secret=True,
    ),
    _Setting("api_cors_origins", str | None, "NEXUS_API_CORS_ORIGINS", None, "comma-separated browser origins the API allows (unset: CORS off)"),
    _Setting("api_max_body_bytes", int, "NEXUS_API_MAX_BODY_BYTES", 1_000_000, "largest request body the API reads (413 above)"),
)
_RECALL = (
    # Recall, reranking and grounded answers.
    _Setting("rerank_base_url", str | None, "NEXUS_RERANK_BASE_URL"),
    _Setting("rerank_model", str | None, "NEXUS_RERANK_MODEL"),
    _Setting("rerank_api_key", str | None, "NEXUS_RERANK_API_KEY", secret=True),
    _Setting("cross_encoder", str | None, "NEXUS_CROSS_ENCODER"),
    _Setting("ask_endpoints", str | None, "NEXUS_ASK_ENDPOINTS"),
)


def _table() -> tuple[_Setting, ...]:
    """Every row, the limits' defaults read from where they are written."""
    from nexus_assets.ingest.formats.limits import DEFAULTS as LIMIT_DEFAULTS

    limits = tuple(_Setting(v.removeprefix("NEXUS_").lower(), str, v, str(LIMIT_DEFAULTS[v])) for v in _LIMITS)
    return _VAULT + limits + _LLM + _SERVER + _RECALL


def _methods() -> dict[str, Any]:
    """What a `Settings` says besides its fields."""

    @classmethod
    def variable(cls, field: str) -> str:
        return cls.model_fields[field].validation_alias.choices[0]  # type: ignore[union-attr]

    def as_env(self) -> dict[str, str]:
        """The settings by variable, those without a value left out: what the functions that
        take an environment-shaped mapping (LLMConfig.from_env, rerank, ask) are given."""
        return {self.variable(f): v for f, v in self if v is not None}

    @property
    def basics(self) -> Basics:
        options = VaultOptions(self.vault_memory or None, self.pg_pool_size or None)
        given = self.model_fields_set  # a limit's default is not "set": Basics holds what was given
        return Basics(
            parse_address(self.db or DEFAULT_DB, options), self.runs_dir or None, self.topics_dir or None, self.extractor,
            self.open_after, options.memory, truthy(self.no_recall), options.pool_size, self.viewer_url or DEFAULT_VIEWER_URL,
            tuple(sorted((self.variable(f), getattr(self, f)) for f in given if self.variable(f).startswith(LIMIT_PREFIX))),
        )

    def input_limits(self) -> InputLimits:
        """The input limits; ValueError naming the variable for one that is not a whole number
        (0 or less means the default)."""
        return self.basics.input_limits()

    def current_user(self) -> str:
        import getpass  # only when $USER is unset
        return self.user or getpass.getuser()

    return {"variable": variable, "as_env": as_env, "basics": basics, "input_limits": input_limits, "current_user": current_user}


def _define() -> type[BaseSettings]:
    """The `Settings` class, made from the table on first use (pydantic is not imported before)."""
    from pydantic import AliasChoices, Field
    from pydantic_settings import BaseSettings, SettingsConfigDict

    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": "Settings",
        "__doc__": "Every setting, by its variable; the default where the variable is unset.",
        "__annotations__": {},
        "model_config": SettingsConfigDict(case_sensitive=True, extra="ignore", frozen=True, populate_by_name=False),
    }
    for row in _table():
        options: dict[str, Any] = {"repr": False} if row.secret else {}
        if row.description or not row.secret:
            options["description"] = row.description
        namespace["__annotations__"][row.field] = row.type
        namespace[row.field] = Field(row.default, validation_alias=AliasChoices(row.variable), **options)
    namespace.update(_methods())
    return type(BaseSettings)("Settings", (BaseSettings,), namespace)


def load(environ: Mapping[str, str] | None = None) -> Any:
    """A `Settings` read from the environment now (or from `environ`, for tests)."""
    cls = __getattr__("Settings")
    if environ is None:
        return cls()
    # pydantic-settings reads os.environ; a given mapping is validated as the environment would be.
    return cls.model_validate(dict(environ))


def __getattr__(name: str) -> Any:
    if name == "Settings":
        cls = globals().get("_Settings") or _define()
        globals()["_Settings"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
