"""The extractors Nexus can point at text with: the one list, by the name a person chooses
(`nexus sync --extractor NAME`, `NEXUS_EXTRACTOR`, the API's and the MCP `sync` tool's `extractor`).

Each entry says whether it calls a model endpoint (an OpenAI-compatible server: then `--batch` and
`--max-cost` apply) and how it is built for one topic's step from the vault and the options the
engine's extractor resource carries. This module imports nothing heavy (the CLI's parser reads the
names); a builder imports its extractor when it runs.

To add an extractor: write its module (an `Extractor`, extract/backends.py), add its name to
`ExtractorName` and one `register_extractor(...)` below (docs/extending.md). The embedded
extractor's own versions (embedded-v3, embedded-v4) are a second list, `backends.register_selector`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, get_args

if TYPE_CHECKING:
    from nexus_assets.extract.backends import Extractor

# The names, as the outside surfaces spell them (a typed request field, a JSON schema enum, a CLI
# choice). Kept equal to the registered ones below (checked when this module loads).
ExtractorName = Literal["embedded", "openai"]


class ExtractorUnavailable(ValueError):
    """The extractor cannot be built as configured; the message says what to change."""


@dataclass(frozen=True)
class ExtractorRequest:
    """What a topic's extraction step hands a builder: the vault's stores, the settings, and the
    resource's options (each None: the setting's default)."""

    vault: Any  # the stores an extractor reads and writes (recall, runs, llm_calls, teaching, extractions)
    topic_id: str | None
    env: Mapping[str, str]  # the settings by variable (`Settings.as_env()`)
    embedded_selector: str | None = None  # NEXUS_EMBEDDED_EXTRACTOR
    selector_weights: str | None = None  # NEXUS_SELECTOR_WEIGHTS
    progress: Callable[..., None] | None = None
    model: str | None = None
    base_url: str | None = None
    replay_only: bool = False
    token_budget: int | None = None
    concurrency: int | None = None
    max_cost_usd: float | None = None
    batch: bool = False
    reselect: bool = False
    cost_since: str | None = None


@dataclass(frozen=True)
class ExtractorKind:
    name: str
    calls_endpoint: bool  # asks a model over HTTP (OPENAI_BASE_URL ...): not offline, costs money
    summary: str
    build: Callable[[ExtractorRequest], "Extractor"]


EXTRACTORS: dict[str, ExtractorKind] = {}


def register_extractor(kind: ExtractorKind) -> ExtractorKind:
    if kind.name in EXTRACTORS:
        raise ValueError(f"extractor {kind.name!r} is registered twice")
    EXTRACTORS[kind.name] = kind
    return kind


def extractor_names() -> list[str]:
    """The names a person may choose, in the order help texts list them."""
    return list(EXTRACTORS)


def extractor_kind(name: str) -> ExtractorKind:
    try:
        return EXTRACTORS[name]
    except KeyError:
        raise ExtractorUnavailable(f"unknown extractor {name!r}; choose one of {', '.join(EXTRACTORS)}") from None


def _embedded(request: ExtractorRequest) -> "Extractor":
    """The offline extractor, in the selector version the topic is selected with (docs/teaching.md)."""
    from nexus_assets.extract.backends import StoredVectors, embedded_extractor, newest_selector
    from nexus_assets.extract.selection import topic_selector

    vault, topic_id = request.vault, request.topic_id
    newest = request.embedded_selector or newest_selector()
    # Each topic keeps the selector version that selected it unless moved (`--reselect`).
    version = topic_selector(vault, topic_id, reselect=request.reselect, newest=newest) if topic_id else newest
    try:
        return embedded_extractor(version, StoredVectors(vault.recall), vault.runs.run_names, request.selector_weights)
    except ValueError as exc:
        raise ExtractorUnavailable(f"{topic_id}: {exc}") from None


def llm_config(request: ExtractorRequest):
    """The endpoint's configuration: the settings, with the resource's overrides."""
    from nexus_assets.llm.client import LLMConfig, LLMConfigError

    overrides = {
        k: v
        for k, v in {
            "model": request.model,
            "base_url": request.base_url,
            "concurrency": request.concurrency,
            "max_cost_usd": request.max_cost_usd,
        }.items()
        if v not in (None, "")
    }
    try:
        return LLMConfig.from_env(request.env, **overrides)
    except LLMConfigError as exc:
        raise ExtractorUnavailable(str(exc)) from None


def _openai(request: ExtractorRequest) -> "Extractor":
    """Pointers from an OpenAI-compatible endpoint, each answer replayable from the vault (docs/openai.md)."""
    from datetime import datetime

    from nexus_assets.extract.backends import OpenAIExtractor
    from nexus_assets.llm.chunking import token_budget_from_env

    try:
        budget = token_budget_from_env(request.env) if request.token_budget is None else request.token_budget
    except ValueError as exc:
        raise ExtractorUnavailable(str(exc)) from None
    backend = OpenAIExtractor(
        llm_config(request),
        request.vault.llm_calls,
        replay_only=request.replay_only,
        token_budget=budget,
        batch=request.batch,
        progress=request.progress,
    )
    if backend.budget is not None and request.cost_since:
        # One ceiling for the whole sync: what earlier topics' steps sent counts against it.
        spent_in, spent_out = request.vault.llm_calls.tokens_since(datetime.fromisoformat(request.cost_since))
        backend.budget.spent = backend.budget.cost(spent_in, spent_out)
    return backend


register_extractor(ExtractorKind("embedded", False, "offline and deterministic: the shipped selector", _embedded))
register_extractor(ExtractorKind("openai", True, "any OpenAI-compatible Chat Completions endpoint", _openai))

if tuple(EXTRACTORS) != get_args(ExtractorName):
    raise RuntimeError(f"ExtractorName {get_args(ExtractorName)} must list the registered extractors {tuple(EXTRACTORS)}")
