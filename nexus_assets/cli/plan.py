"""`nexus plan`: what a sync with the openai extractor would call and cost; sends nothing."""

from __future__ import annotations

import argparse
from pathlib import Path

from nexus_assets import settings
from nexus_assets.cli.common import (
    COMPILED_STATES,
    UsageError,
    emit,
    open_vault,
    require_folder,
)
from nexus_assets.llm.chunking import token_budget_from_env
from nexus_assets.llm.client import LLMConfig, LLMConfigError
from nexus_assets.llm.planning import _NoCalls, current_runs, explain_cache, plan_topics
from nexus_assets.topics.files import read_topic_files


def cmd_plan(args: argparse.Namespace) -> int:
    env = settings.load().as_env()
    # Planning sends nothing, so only the model (part of every call key) and prices matter.
    env.setdefault("OPENAI_BASE_URL", "http://unused.invalid/v1")
    env.setdefault("OPENAI_API_KEY", "unused")
    # The model is part of every call key; without one the plan is for a stated default, not refused.
    default_model = not env.get("NEXUS_LLM_MODEL")
    if default_model:
        env["NEXUS_LLM_MODEL"] = settings.DEFAULT_PLAN_MODEL
    try:
        config = LLMConfig.from_env(env)
    except LLMConfigError as exc:
        raise UsageError(str(exc)) from None
    topics_dir = require_folder(Path(args.topics_dir), "topics", "--topics-dir")
    runs_dir = require_folder(Path(args.runs_dir), "runs", "--runs-dir")
    topics = {tf.topic.topic_id: tf.topic for tf in read_topic_files(topics_dir) if tf.topic is not None}
    if args.topic:
        unknown = [t for t in args.topic if t not in topics]
        if unknown:
            raise UsageError(f"unknown topic {unknown[0]!r}; topic files define: {', '.join(sorted(topics)) or 'none'}")
        selected = [topics[t] for t in dict.fromkeys(args.topic)]
    else:
        selected = [t for _, t in sorted(topics.items()) if t.state in COMPILED_STATES]
    runs = current_runs(runs_dir)
    try:
        # As a sync would chunk: the option, else NEXUS_LLM_TOKEN_BUDGET, else 3000.
        budget = token_budget_from_env(env) if args.token_budget is None else args.token_budget
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    db = Path(args.db)
    if db.exists():
        with open_vault(args) as vault:
            plans, summary = plan_topics(selected, runs, config=config, store=vault.llm_calls, token_budget=budget)
    else:
        plans, summary = plan_topics(selected, runs, config=config, store=_NoCalls(), token_budget=budget)
    data = {"model": config.model, "model_is_default": default_model, "token_budget": budget, "topics": [p.as_dict() for p in plans], "requests": summary}
    if args.explain_cache:
        explained = []
        if db.exists():
            with open_vault(args) as vault:
                store = vault.llm_calls
                seen = vault.history.run_versions_seen([r.run_id for r in runs])
                for t in selected:
                    explained += explain_cache(
                        t, runs, config=config, store=store, last_calls=vault.history.last_calls(t.topic_id), versions_seen=seen, token_budget=budget
                    )
        else:
            for t in selected:
                explained += explain_cache(t, runs, config=config, store=_NoCalls(), last_calls={}, versions_seen={}, token_budget=budget)
        data["cache"] = explained

    lines = [f"model {config.model}, {budget} source tokens per call; nothing was sent"]
    if default_model:
        lines[0] = (
            f"model {config.model} (a default: NEXUS_LLM_MODEL is not set; set it to plan for the model you will use), "
            f"{budget} source tokens per call; nothing was sent"
        )
    for p in plans:
        cost = f"${p.cost_usd:.4f}" if p.cost_usd is not None else "cost unknown (set NEXUS_PRICE_IN_PER_MTOK/NEXUS_PRICE_OUT_PER_MTOK)"
        lines.append(
            f"{p.topic_id}: {p.runs_in_scope}/{p.runs_total} runs in scope; {p.calls} calls "
            f"({p.cached_calls} cached, {p.uncached_calls} to send); ~{p.input_tokens_to_send} input + "
            f"~{p.output_tokens_to_send} output tokens to send (~{p.input_tokens_without_prefilter} input without the "
            f"pre-filter); {cost}"
        )
    total = f"${summary['cost_usd']:.4f} (${summary['batch_cost_usd']:.4f} with --batch)" if summary["cost_usd"] is not None else "cost unknown"
    lines.append(
        f"together: {summary['requests_to_send']} requests for {summary['chunks_to_send']} chunks "
        f"({summary['topic_answers_to_ask']} topic answers asked, {summary['topic_answers_cached']} replayed; "
        f"each chunk is sent once with every topic that needs it); ~{summary['input_tokens_to_send']} input + "
        f"~{summary['output_tokens_to_send']} output tokens; {total}"
    )
    for e in data.get("cache", []):
        lines.append(
            f"  {e['topic_id']} {e['run_id']}: {'cached' if e['status'] == 'cached' else 'will call'} "
            f"({e['cached_calls']}/{e['calls']} calls stored) — {'; '.join(e['reasons'])}"
        )
    emit(args, data, "\n".join(lines))
    return 0
