"""`nexus plan`: what a sync with the openai extractor would send and cost. Sends nothing, writes nothing.

The plan is made of the very requests a sync would send (`llm.requests.plan_jobs`): each chunk
once, with every topic that has no stored answer for it, so the tokens shown are the tokens paid
(`RequestPlan`, `plan_runs`); per topic and run, `plan_topics` and `explain_cache` say which
answers are stored and which would be asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from nexus_assets.core.models import Run, Topic
from nexus_assets.ingest.runfiles import iter_run_file, scan_run_files
from nexus_assets.llm.chunking import DEFAULT_TOKEN_BUDGET, RUNS_PER_EXTRACTION, estimate_tokens
from nexus_assets.llm.client import CallRecord, LLMConfig
from nexus_assets.llm.prompt import PROMPT_VERSION, topic_block_of
from nexus_assets.llm.requests import Request, plan_jobs, run_shares


@dataclass
class RequestPlan:
    """The requests one sync would send for some runs and topics, and what they would cost."""

    requests: list[Request] = field(default_factory=list)
    cached_shares: int = 0  # topic answers replayed from the store
    asked_shares: int = 0  # topic answers the requests would bring

    @property
    def input_tokens(self) -> int:
        return sum(r.input_tokens_est for r in self.requests)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens_est for r in self.requests)

    @property
    def chunks(self) -> int:
        return len({(s.run_id, s.window_index) for r in self.requests for s in r.shares})

    @property
    def chars_read(self) -> int:
        """Characters the model would read: every message of every request."""
        return sum(r.chars for r in self.requests)

    @property
    def text_chars(self) -> int:
        """Characters of run text the requests carry (each node once per request)."""
        return sum(r.text_chars for r in self.requests)

    @property
    def prefix_chars(self) -> int:
        """The stable prefix (system message) every request of the sync begins with."""
        return self.requests[0].prefix_chars if self.requests else 0

    @property
    def runs(self) -> int:
        return len({run_id for r in self.requests for run_id in r.run_ids})

    def figures(self) -> dict:
        """What the requests cost in requests and characters read (`nexus plan`, the benchmarks)."""
        text = self.text_chars
        return {
            "runs_to_send": self.runs,
            "requests_per_run": round(len(self.requests) / self.runs, 3) if self.runs else None,
            "chars_read": self.chars_read,
            "text_chars": text,
            "chars_read_per_text_char": round(self.chars_read / text, 3) if text else None,
            "cacheable_prefix_chars": self.prefix_chars,
            "cacheable_prefix_tokens": estimate_tokens(self.requests[0].messages[0]["content"]) if self.requests else 0,
            # Read once, then served from a provider's prompt cache: the characters billed in full.
            "chars_read_per_text_char_prefix_cached": (
                round((self.chars_read - self.prefix_chars * (len(self.requests) - 1)) / text, 3) if text else None
            ),
        }


def plan_runs(
    runs: Iterable[Run],
    topics: list[Topic],
    *,
    config: LLMConfig,
    token_budget: int,
    answered: Callable[[str], bool],
) -> RequestPlan:
    plan = RequestPlan()
    runs = sorted(runs, key=lambda r: r.run_id)
    # As the extract step asks them: RUNS_PER_EXTRACTION runs at a time, packed within each batch.
    for start in range(0, len(runs), RUNS_PER_EXTRACTION):
        stored, requests = plan_jobs(
            [(run, topics) for run in runs[start : start + RUNS_PER_EXTRACTION]],
            model=config.model, token_budget=token_budget, max_output_tokens=config.max_output_tokens, answered=answered,
        )
        plan.cached_shares += len(stored)
        plan.asked_shares += sum(len(r.shares) for r in requests)
        plan.requests += requests
    return plan


def estimate_cost(input_tokens: int, output_tokens: int, config: LLMConfig) -> float | None:
    """USD for these tokens; None when a price is not configured (unknown, not free)."""
    if config.price_in_per_mtok is None or config.price_out_per_mtok is None:
        return None
    return (input_tokens * config.price_in_per_mtok + output_tokens * config.price_out_per_mtok) / 1_000_000


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
