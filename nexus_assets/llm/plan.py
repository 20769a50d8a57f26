"""What an `openai` extraction would send and cost (`nexus plan`). Sends nothing.

The plan is made of the very requests a sync would send (`llm.requests.plan_requests`): each chunk
once, with every topic that has no stored answer for it, so the tokens shown are the tokens paid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from nexus_assets.core.models import Run, Topic
from nexus_assets.llm.client import LLMConfig
from nexus_assets.llm.requests import Request, plan_requests


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
        return len({(r.run_id, r.window_index) for r in self.requests})


def plan_runs(
    runs: Iterable[Run],
    topics: list[Topic],
    *,
    config: LLMConfig,
    token_budget: int,
    answered: Callable[[str], bool],
) -> RequestPlan:
    plan = RequestPlan()
    for run in runs:
        stored, requests = plan_requests(
            run, topics, model=config.model, token_budget=token_budget, max_output_tokens=config.max_output_tokens, answered=answered
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
