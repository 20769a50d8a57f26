"""What an `openai` extraction would send and cost (`nexus plan`). Sends nothing."""

from __future__ import annotations

import math
from dataclasses import dataclass

from nexus_assets.core.models import Node, Run, Topic
from nexus_assets.llm.chunking import DEFAULT_TOKEN_BUDGET, estimate_tokens
from nexus_assets.llm.client import CallStore, LLMConfig, prepare_calls

# Chat templates add a few tokens of framing per message.
_TOKENS_PER_MESSAGE = 4


@dataclass(frozen=True)
class PlannedCall:
    key: str
    cached: bool  # a successful reply is stored: replayed, costs nothing
    input_tokens_est: int
    output_tokens_est: int
    topic_id: str = ""
    run_id: str = ""
    chunk_index: int = 0
    node_count: int = 0


def _output_estimate(fragment_tokens: int, max_output_tokens: int) -> int:
    # Quotes are substrings of the input plus ~25 tokens of path and framing each; a quarter of
    # the fragment is a generous guess for a selective topic, capped by what a reply may hold.
    return min(max_output_tokens, 16 + math.ceil(fragment_tokens / 4))


def plan_calls(
    topic: Topic,
    run: Run,
    nodes: list[Node],
    *,
    model: str,
    store: CallStore,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    max_output_tokens: int = 2048,
) -> list[PlannedCall]:
    """The calls `PointerClient.extract` would make for (topic, run), each marked cached or not."""
    planned = []
    for call in prepare_calls(topic, run, nodes, model=model, token_budget=token_budget):
        stored = store.get(call.key)
        input_tokens = sum(estimate_tokens(m["content"]) + _TOKENS_PER_MESSAGE for m in call.messages)
        fragment_tokens = estimate_tokens(call.messages[-1]["content"])
        planned.append(
            PlannedCall(
                key=call.key,
                cached=stored is not None and stored.status == "ok",
                input_tokens_est=input_tokens,
                output_tokens_est=_output_estimate(fragment_tokens, max_output_tokens),
                topic_id=topic.topic_id,
                run_id=run.run_id,
                chunk_index=call.chunk_index,
                node_count=len(call.nodes),
            )
        )
    return planned


def estimate_cost(planned: list[PlannedCall], config: LLMConfig) -> float | None:
    """USD for the uncached calls; None when a price is not configured (unknown, not free)."""
    if config.price_in_per_mtok is None or config.price_out_per_mtok is None:
        return None
    to_send = [p for p in planned if not p.cached]
    tokens_in = sum(p.input_tokens_est for p in to_send)
    tokens_out = sum(p.output_tokens_est for p in to_send)
    return (tokens_in * config.price_in_per_mtok + tokens_out * config.price_out_per_mtok) / 1_000_000

