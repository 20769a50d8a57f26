"""`nexus plan`: what a sync with the openai extractor would call and cost; sends nothing."""

from __future__ import annotations

import argparse
from pathlib import Path

from nexus_assets import settings
from nexus_assets.cli.common import (
    settings_of,
    COMPILED_STATES,
    UsageError,
    emit,
    open_vault,
    vault_exists,
    require_folder,
)
from nexus_assets.llm.chunking import token_budget_from_env
from nexus_assets.llm.client import LLMConfig, LLMConfigError
from nexus_assets.llm.planning import _NoCalls, current_runs, explain_cache, plan_topics
from nexus_assets.topics.files import read_topic_files


def cmd_plan(args: argparse.Namespace) -> int:
    env = settings_of(args).as_env()
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
        # As a sync would chunk: the option, else NEXUS_LLM_TOKEN_BUDGET, else what the context leaves.
        budget = token_budget_from_env(env) if args.token_budget is None else args.token_budget
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    db_exists = vault_exists(args.db)
    if db_exists:
        with open_vault(args) as vault:
            plans, summary = plan_topics(selected, runs, config=config, store=vault.llm_calls, token_budget=budget)
    else:
        plans, summary = plan_topics(selected, runs, config=config, store=_NoCalls(), token_budget=budget)
    data = {"model": config.model, "model_is_default": default_model, "token_budget": budget, "topics": [p.as_dict() for p in plans], "requests": summary}
    if args.explain_cache:
        explained = []
        if db_exists:
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

    vetoing = [t for t in selected if t.semantic_veto]
    if vetoing:
        data["semantic_veto"] = _plan_veto(args, vetoing, runs, config)
    lines = [f"model {config.model}, {budget} source tokens per request; nothing was sent"]
    if default_model:
        lines[0] = (
            f"model {config.model} (a default: NEXUS_LLM_MODEL is not set; set it to plan for the model you will use), "
            f"{budget} source tokens per request; nothing was sent"
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
    if summary["requests_to_send"]:
        lines.append(
            f"read: {summary['requests_to_send']} requests for {summary['text_chars']:,} characters of text in "
            f"{summary['runs_to_send']} runs ({summary['requests_per_run']} a run); the model reads "
            f"{summary['chars_read_per_text_char']} characters per character of text, "
            f"{summary['chars_read_per_text_char_prefix_cached']} where the provider caches the "
            f"{summary['cacheable_prefix_chars']:,}-character prefix (~{summary['cacheable_prefix_tokens']} tokens) "
            "that every request begins with"
        )
    for v in data.get("semantic_veto", []):
        at_most = v["veto_questions_at_most"]
        per = f"${v['veto_cost_per_question_usd']:.6f}" if v["veto_cost_per_question_usd"] is not None else "cost unknown"
        ceiling = (
            f"at most {at_most} questions (new texts with related bricks only)"
            + (f", ${v['veto_cost_at_most_usd']:.4f}" if v["veto_cost_at_most_usd"] is not None else "")
            if at_most is not None
            else "questions unknown until the openai extractor has answered (one per new text with related bricks)"
        )
        lines.append(
            f"{v['topic_id']}: semantic veto: {ceiling}; ~{v['veto_tokens_per_question_est']} tokens ({per}) a question; "
            f"{v['veto_answers_stored']} answers stored (replayed free)"
        )
    for e in data.get("cache", []):
        lines.append(
            f"  {e['topic_id']} {e['run_id']}: {'cached' if e['status'] == 'cached' else 'will call'} "
            f"({e['cached_calls']}/{e['calls']} calls stored) — {'; '.join(e['reasons'])}"
        )
    emit(args, data, "\n".join(lines))
    return 0


def _plan_veto(args: argparse.Namespace, topics, runs, config: LLMConfig) -> list[dict]:
    """The semantic veto's share of the plan: with the embedded extractor the new texts are known
    offline (a ceiling on the questions); with the openai one, only the cost of one question."""
    from nexus_assets.core.fingerprint import fingerprint
    from nexus_assets.extract.embedded import extract_embedded
    from nexus_assets.relate.prompt import VETO_PROMPT_VERSION
    from nexus_assets.relate.veto import plan_veto

    embedded = args.basics.extractor == "embedded"
    db_exists = vault_exists(args.db)
    out = []
    for topic in topics:
        texts: dict[str, str] | None = None
        if embedded:
            texts = {}
            for run in runs:
                for p in extract_embedded(topic, run):
                    texts.setdefault(fingerprint(p["verbatim_quote"]), p["verbatim_quote"])
        stored = 0
        if db_exists:
            with open_vault(args) as vault:
                if texts:
                    known = vault.relations.known_fingerprints(topic.topic_id, list(texts))
                    texts = {fp: t for fp, t in texts.items() if fp not in known}
                stored = sum(
                    1 for c in vault.llm_calls.calls(topic.topic_id) if c["prompt_version"] == VETO_PROMPT_VERSION and c["status"] == "ok"
                )
        out.append(plan_veto(topic, None if texts is None else list(texts.values()), stored_answers=stored, config=config))
    return out
