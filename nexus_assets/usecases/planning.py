"""`nexus plan`: what a sync with the openai extractor would send and cost. Sends nothing, writes nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nexus_assets.core.models import Run, Topic
from nexus_assets.core.scope import in_scope_nodes
from nexus_assets.llm.chunking import DEFAULT_TOKEN_BUDGET
from nexus_assets.llm.client import CallRecord, LLMConfig, prepare_calls
from nexus_assets.llm.plan import estimate_cost, plan_calls
from nexus_assets.llm.prompt import PROMPT_VERSION
from nexus_assets.runfiles import iter_run_file, scan_run_files
from nexus_assets.vault.history import FRAGMENT_MARKER


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


def plan_topic(topic: Topic, runs: list[Run], *, config: LLMConfig, store, token_budget: int = DEFAULT_TOKEN_BUDGET) -> TopicPlan:
    plan = TopicPlan(topic.topic_id, runs_total=len(runs))
    everything = topic.extraction_policy.model_copy(update={"target_node_types": None, "required_keywords": None})
    for run in runs:
        nodes = [n for n, _ in in_scope_nodes(topic.extraction_policy, run, topic)]
        all_nodes = [n for n, _ in in_scope_nodes(everything, run, topic)]
        if all_nodes:
            unfiltered = plan_calls(topic, run, all_nodes, model=config.model, store=_NoCalls(), token_budget=token_budget)
            plan.input_tokens_without_prefilter += sum(c.input_tokens_est for c in unfiltered)
        if not nodes:
            continue
        plan.runs_in_scope += 1
        calls = plan_calls(
            topic, run, nodes, model=config.model, store=store, token_budget=token_budget, max_output_tokens=config.max_output_tokens
        )
        plan.calls += len(calls)
        plan.cached_calls += sum(c.cached for c in calls)
        plan.input_tokens_est += sum(c.input_tokens_est for c in calls)
        plan.output_tokens_est += sum(c.output_tokens_est for c in calls)
        to_send = [c for c in calls if not c.cached]
        plan.input_tokens_to_send += sum(c.input_tokens_est for c in to_send)
        plan.output_tokens_to_send += sum(c.output_tokens_est for c in to_send)
        cost = estimate_cost(calls, config)
        if cost is not None:
            plan.cost_usd = (plan.cost_usd or 0.0) + cost
    plan.uncached_calls = plan.calls - plan.cached_calls
    if topic.state == "LOCKED":
        plan.notes.append("topic is LOCKED: a sync compiles nothing for it")
    return plan


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
    """For each run in the topic's scope: are its calls' replies stored (replayed, free), and if
    not, why not. The reasons are read off the newest stored call of the same topic and run."""
    out = []
    for run in runs:
        nodes = [n for n, _ in in_scope_nodes(topic.extraction_policy, run, topic)]
        if not nodes:
            continue
        calls = prepare_calls(topic, run, nodes, model=config.model, token_budget=token_budget, prompt_version=prompt_version)
        cached = [c for c in calls if (r := store.get(c.key)) is not None and r.status == "ok"]
        entry = {"topic_id": topic.topic_id, "run_id": run.run_id, "calls": len(calls), "cached_calls": len(cached)}
        if len(cached) == len(calls):
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
            topic_part = calls[0].messages[-1]["content"].split(FRAGMENT_MARKER, 1)[0]
            if last["topic_part"] is not None and last["topic_part"] != topic_part:
                reasons.append("topic definition changed (its name, scope or exclusions are part of the prompt)")
            seen = versions_seen.get(run.run_id, {})
            if run.version_id not in seen or (last["recorded_at"] is not None and seen[run.version_id] > last["recorded_at"]):
                reasons.append("new run version: the run's text changed since its last call")
            if not reasons:
                reasons.append("other nodes are in scope or chunked differently (topic keywords, node types or token budget changed)")
        entry |= {"status": "will_call", "reasons": reasons}
        out.append(entry)
    return out
