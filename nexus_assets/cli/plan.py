"""`nexus plan`: what a sync with the openai extractor would call and cost; sends nothing."""

from __future__ import annotations

import argparse
from pathlib import Path

from nexus_assets.cli.common import UsageError, emit, require_folder, settings_of
from nexus_assets.cli.parsing import Commands, positive_int, runs_dir_flag, topics_dir_flag


def cmd_plan(args: argparse.Namespace) -> int:
    from nexus_assets.services.llm_plan import PlanRefused, PlanRequest, plan_config, plan_sync

    env = settings_of(args).as_env()
    try:
        config, default_model = plan_config(env)
        topics_dir = require_folder(Path(args.topics_dir), "topics", "--topics-dir")
        runs_dir = require_folder(Path(args.runs_dir), "runs", "--runs-dir")
        request = PlanRequest(env, args.db, topics_dir, runs_dir, args.topic, args.token_budget, args.explain_cache, args.basics.extractor)
        data = plan_sync(request, config, default_model)
    except PlanRefused as exc:
        raise UsageError(str(exc)) from None
    budget, plans, summary = data["token_budget"], data["topics"], data["requests"]
    lines = [f"model {config.model}, {budget} source tokens per request; nothing was sent"]
    if default_model:
        lines[0] = (
            f"model {config.model} (a default: NEXUS_LLM_MODEL is not set; set it to plan for the model you will use), "
            f"{budget} source tokens per request; nothing was sent"
        )
    for p in plans:
        cost = f"${p['cost_usd']:.4f}" if p["cost_usd"] is not None else "cost unknown (set NEXUS_PRICE_IN_PER_MTOK/NEXUS_PRICE_OUT_PER_MTOK)"
        lines.append(
            f"{p['topic_id']}: {p['runs_in_scope']}/{p['runs_total']} runs in scope; {p['calls']} calls "
            f"({p['cached_calls']} cached, {p['uncached_calls']} to send); ~{p['input_tokens_to_send']} input + "
            f"~{p['output_tokens_to_send']} output tokens to send (~{p['input_tokens_without_prefilter']} input without the "
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


def register(commands: Commands) -> None:
    p = commands.add("plan", cmd_plan, help="what a sync with the openai extractor would call and cost; sends nothing")
    p.add_argument("--topic", action="append", help="a topic to plan (repeatable); default every ACTIVE topic")
    runs_dir_flag(p)
    topics_dir_flag(p)
    p.add_argument("--token-budget", type=positive_int, default=None, help="source tokens per request (default $NEXUS_LLM_TOKEN_BUDGET, else what $NEXUS_LLM_CONTEXT_TOKENS and $NEXUS_LLM_MAX_OUTPUT_TOKENS allow)")
    p.add_argument("--explain-cache", action="store_true", help="per run and topic: cached or will call, and why")
