"""`nexus plan` as a service: what a sync with the openai extractor would call and cost, from the
run and topic files and the LLM answers the vault already stores; sends nothing. The CLI parses
the flags and prints the plan."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nexus_assets import settings
from nexus_assets.core.models import COMPILED_STATES, Topic
from nexus_assets.llm.chunking import token_budget_from_env
from nexus_assets.llm.client import LLMConfig, LLMConfigError
from nexus_assets.llm.planning import _NoCalls, current_runs, explain_cache, plan_topics
from nexus_assets.store import Vault
from nexus_assets.topics.files import read_topic_files
from nexus_assets.vault.address import vault_exists


class PlanRefused(ValueError):
    """Bad input (a model setting, an unknown topic, a token budget): one line, nothing planned."""


@dataclass(frozen=True)
class PlanRequest:
    env: dict  # the settings as the entry point read them (`settings.load().as_env()`)
    db: str | Path
    topics_dir: Path
    runs_dir: Path
    topic_ids: list[str] | None = None  # None: every compiled topic
    token_budget: int | None = None  # None: NEXUS_LLM_TOKEN_BUDGET, else what the context leaves
    explain_cache: bool = False
    extractor: str = "embedded"  # the sync's extractor as the entry point read it: the veto plan depends on it


def plan_config(env: dict) -> tuple[LLMConfig, bool]:
    """The model configuration a plan prices with, and whether its model is the stated default.
    Planning sends nothing, so only the model (part of every call key) and prices matter."""
    env = dict(env)
    env.setdefault("OPENAI_BASE_URL", "http://unused.invalid/v1")
    env.setdefault("OPENAI_API_KEY", "unused")
    # The model is part of every call key; without one the plan is for a stated default, not refused.
    default_model = not env.get("NEXUS_LLM_MODEL")
    if default_model:
        env["NEXUS_LLM_MODEL"] = settings.DEFAULT_PLAN_MODEL
    try:
        return LLMConfig.from_env(env), default_model
    except LLMConfigError as exc:
        raise PlanRefused(str(exc)) from None


def plan_sync(request: PlanRequest, config: LLMConfig, default_model: bool) -> dict:
    """The plan as `nexus plan --json` prints it."""
    topics = {tf.topic.topic_id: tf.topic for tf in read_topic_files(request.topics_dir) if tf.topic is not None}
    if request.topic_ids:
        unknown = [t for t in request.topic_ids if t not in topics]
        if unknown:
            raise PlanRefused(f"unknown topic {unknown[0]!r}; topic files define: {', '.join(sorted(topics)) or 'none'}")
        selected = [topics[t] for t in dict.fromkeys(request.topic_ids)]
    else:
        selected = [t for _, t in sorted(topics.items()) if t.state in COMPILED_STATES]
    runs = current_runs(request.runs_dir)
    try:
        # As a sync would chunk: the option, else NEXUS_LLM_TOKEN_BUDGET, else what the context leaves.
        budget = token_budget_from_env(request.env) if request.token_budget is None else request.token_budget
    except ValueError as exc:
        raise PlanRefused(str(exc)) from None
    db_exists = vault_exists(request.db)
    if db_exists:
        with Vault.open(request.db, read_only=True) as vault:
            plans, summary = plan_topics(selected, runs, config=config, store=vault.llm_calls, token_budget=budget)
    else:
        plans, summary = plan_topics(selected, runs, config=config, store=_NoCalls(), token_budget=budget)
    data = {"model": config.model, "model_is_default": default_model, "token_budget": budget, "topics": [p.as_dict() for p in plans], "requests": summary}
    if request.explain_cache:
        data["cache"] = _explained(request.db if db_exists else None, selected, runs, config, budget)
    vetoing = [t for t in selected if t.semantic_veto]
    if vetoing:
        data["semantic_veto"] = _plan_veto(request.db if db_exists else None, vetoing, runs, config, request.extractor)
    return data


def _explained(db, selected: list[Topic], runs, config: LLMConfig, budget: int) -> list[dict]:
    explained = []
    if db is not None:
        with Vault.open(db, read_only=True) as vault:
            store = vault.llm_calls
            seen = vault.history.run_versions_seen([r.run_id for r in runs])
            for t in selected:
                explained += explain_cache(
                    t, runs, config=config, store=store, last_calls=vault.history.last_calls(t.topic_id), versions_seen=seen, token_budget=budget
                )
    else:
        for t in selected:
            explained += explain_cache(t, runs, config=config, store=_NoCalls(), last_calls={}, versions_seen={}, token_budget=budget)
    return explained


def _plan_veto(db, topics: list[Topic], runs, config: LLMConfig, extractor: str) -> list[dict]:
    """The semantic veto's share of the plan: with the embedded extractor the new texts are known
    offline (a ceiling on the questions); with the openai one, only the cost of one question."""
    from nexus_assets.core.fingerprint import fingerprint
    from nexus_assets.extract.embedded import extract_embedded
    from nexus_assets.relate.prompt import VETO_PROMPT_VERSION
    from nexus_assets.relate.veto import plan_veto

    from nexus_assets.extract.registry import extractor_kind

    # An extractor that calls no endpoint decides offline: what it would keep is known now.
    embedded = not extractor_kind(extractor).calls_endpoint
    out = []
    for topic in topics:
        texts: dict[str, str] | None = None
        if embedded:
            texts = {}
            for run in runs:
                for p in extract_embedded(topic, run):
                    texts.setdefault(fingerprint(p["verbatim_quote"]), p["verbatim_quote"])
        stored = 0
        if db is not None:
            with Vault.open(db, read_only=True) as vault:
                if texts:
                    known = vault.relations.known_fingerprints(topic.topic_id, list(texts))
                    texts = {fp: t for fp, t in texts.items() if fp not in known}
                stored = sum(
                    1 for c in vault.llm_calls.calls(topic.topic_id) if c["prompt_version"] == VETO_PROMPT_VERSION and c["status"] == "ok"
                )
        out.append(plan_veto(topic, None if texts is None else list(texts.values()), stored_answers=stored, config=config))
    return out
