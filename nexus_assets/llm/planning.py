"""`nexus plan`: what a sync with the openai extractor would send and cost. Sends nothing, writes nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nexus_assets.core.models import Run, Topic
from nexus_assets.ingest.runfiles import iter_run_file, scan_run_files
from nexus_assets.llm.chunking import DEFAULT_TOKEN_BUDGET
from nexus_assets.llm.client import CallRecord, LLMConfig
from nexus_assets.llm.plan import estimate_cost, plan_runs
from nexus_assets.llm.prompt import PROMPT_VERSION, topic_block_of
from nexus_assets.llm.requests import run_shares


class _NoCalls:
    def get(self, key: str) -> CallRecord | None:
        return None

    def put(self, record: CallRecord) -> None:
        raise AssertionError("planning never records calls")


@dataclass
class TopicPlan:
    topic_id: str
    runs_total: int = 0
    runs_in_scope: int = 0
    calls: int = 0
    cached_calls: int = 0
    uncached_calls: int = 0
    input_tokens_est: int = 0
    output_tokens_est: int = 0
    input_tokens_to_send: int = 0
    output_tokens_to_send: int = 0
    input_tokens_without_prefilter: int = 0
    cost_usd: float | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def current_runs(runs_dir: Path, open_after: str | None = None) -> list[Run]:
    """The latest content of every run in the run files, as a sync would see it."""
    latest: dict[str, Run] = {}
    for path in scan_run_files(runs_dir):
        for item in iter_run_file(path, str(path), open_after=open_after):
            if isinstance(item, Run):
                latest[item.run_id] = item
    return [latest[k] for k in sorted(latest)]


def plan_topics(
    topics: list[Topic], runs: list[Run], *, config: LLMConfig, store, token_budget: int = DEFAULT_TOKEN_BUDGET
) -> tuple[list[TopicPlan], dict]:
    """Per topic, and for the requests a sync would send for all of them together (each chunk
    once with every topic that needs it). A request's tokens are shared out among its topics."""
    answered = lambda key: (r := store.get(key)) is not None and r.status == "ok"  # noqa: E731
    compiled = [t for t in topics if t.state != "LOCKED"]
    plan = plan_runs(runs, compiled, config=config, token_budget=token_budget, answered=answered)
    plans = {t.topic_id: TopicPlan(t.topic_id, runs_total=len(runs)) for t in topics}
    in_scope_runs: dict[str, set[str]] = {t.topic_id: set() for t in topics}
    for request in plan.requests:
        n = len(request.shares)
        for i, share in enumerate(request.shares):
            tp = plans[share.topic.topic_id]
            # An even split, remainders to the first topics: the per-topic figures add up to the request's.
            tp.input_tokens_to_send += request.input_tokens_est // n + (i < request.input_tokens_est % n)
            tp.output_tokens_to_send += request.output_tokens_est // n + (i < request.output_tokens_est % n)
            tp.uncached_calls += 1
            in_scope_runs[share.topic.topic_id].add(share.run_id)
    for t in compiled:
        tp = plans[t.topic_id]
        alone = plan_runs(runs, [t], config=config, token_budget=token_budget, answered=lambda key: False)
        # A topic's calls are its answers (one per window of a run in its scope), asked or replayed.
        tp.calls = alone.asked_shares
        tp.cached_calls = tp.calls - tp.uncached_calls
        tp.input_tokens_est, tp.output_tokens_est = alone.input_tokens, alone.output_tokens
        tp.runs_in_scope = alone.runs
        unfiltered = t.model_copy(
            update={"extraction_policy": t.extraction_policy.model_copy(update={"target_node_types": None, "required_keywords": None})}
        )
        tp.input_tokens_without_prefilter = plan_runs(
            runs, [unfiltered], config=config, token_budget=token_budget, answered=lambda key: False
        ).input_tokens
        tp.cost_usd = estimate_cost(tp.input_tokens_to_send, tp.output_tokens_to_send, config)
    for t in topics:
        if t.state == "LOCKED":
            plans[t.topic_id].notes.append("topic is LOCKED: a sync compiles nothing for it")
    summary = {
        "requests_to_send": len(plan.requests),
        "chunks_to_send": plan.chunks,
        "topic_answers_to_ask": plan.asked_shares,
        "topic_answers_cached": plan.cached_shares,
        "input_tokens_to_send": plan.input_tokens,
        **plan.figures(),
        "output_tokens_to_send": plan.output_tokens,
        "cost_usd": estimate_cost(plan.input_tokens, plan.output_tokens, config),
        "batch_cost_usd": None if (c := estimate_cost(plan.input_tokens, plan.output_tokens, config)) is None else c / 2,
    }
    return [plans[t.topic_id] for t in topics], summary


def explain_cache(
    topic: Topic,
    runs: list[Run],
    *,
    config: LLMConfig,
    store,
    last_calls: dict[str, dict],
    versions_seen: dict[str, dict],
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    prompt_version: str = PROMPT_VERSION,
) -> list[dict]:
    """For each run in the topic's scope: are its answers stored (replayed, free), and if not,
    why not. The reasons are read off the newest stored call of the same topic and run."""
    out = []
    block = topic_block_of(topic)
    for run in runs:
        shares = run_shares(run, [topic], model=config.model, token_budget=token_budget)
        if not shares:
            continue
        cached = [s for s in shares if (r := store.get(s.key)) is not None and r.status == "ok"]
        entry = {"topic_id": topic.topic_id, "run_id": run.run_id, "calls": len(shares), "cached_calls": len(cached)}
        if len(cached) == len(shares):
            entry |= {"status": "cached", "reasons": ["every call's reply is stored: it is replayed and sends nothing"]}
            out.append(entry)
            continue
        last = last_calls.get(run.run_id)
        reasons = []
        if last is None:
            reasons.append("new run: no call for this run and topic yet")
        else:
            if last["model"] != config.model:
                reasons.append(f"model changed: {last['model']} → {config.model}")
            if last["prompt_version"] != prompt_version:
                reasons.append(f"prompt version changed: {last['prompt_version']} → {prompt_version}")
            elif last["topic_part"] is not None and last["topic_part"] != block:
                reasons.append("topic definition changed (its name, scope or exclusions are part of the prompt)")
            seen = versions_seen.get(run.run_id, {})
            if run.version_id not in seen or (last["recorded_at"] is not None and seen[run.version_id] > last["recorded_at"]):
                reasons.append("new run version: the run's text changed since its last call")
            if not reasons:
                reasons.append("other nodes are in scope or chunked differently (topic keywords, node types or token budget changed)")
        entry |= {"status": "will_call", "reasons": reasons}
        out.append(entry)
    return out
