"""What an `openai` extraction would send and cost (`nexus plan`). Sends nothing.

The plan is made of the very requests a sync would send (`llm.requests.plan_jobs`): each chunk
once, with every topic that has no stored answer for it, so the tokens shown are the tokens paid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from nexus_assets.core.models import Run, Topic
from nexus_assets.llm.chunking import RUNS_PER_EXTRACTION, estimate_tokens
from nexus_assets.llm.client import LLMConfig
from nexus_assets.llm.requests import Request, plan_jobs


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
