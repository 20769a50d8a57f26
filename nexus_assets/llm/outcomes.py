"""What an extraction's requests did, per topic and run, and how far a sync's sending has got:
plain records shared by the client (`client.py`) and the Batch API path (`batches.py`), kept apart
from both so neither imports the other to describe a result."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from nexus_assets.llm.config import LLMFatalError
from nexus_assets.llm.records import CallRecord


@dataclass
class ExtractionOutcome:
    """One topic's answers for one run."""

    pointers: list[Any] = field(default_factory=list)  # raw, from every answered chunk, in chunk order
    calls: list[CallRecord] = field(default_factory=list)  # one per chunk; replayed ones have cached=True
    failed: list[CallRecord] = field(default_factory=list)
    unsent: int = 0  # chunks not asked: the cost ceiling was reached, or the sync stopped
    requests_sent: int = 0

    @property
    def complete(self) -> bool:
        """Every chunk has an answer; otherwise some of the run was not looked at."""
        return not self.failed and not self.unsent


@dataclass
class SendProgress:
    """What a sync's LLM requests have done so far (for a progress bar or a log line)."""

    total: int
    done: int = 0
    in_flight: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def eta_s(self) -> float | None:
        if not self.done or self.done >= self.total:
            return None
        elapsed = time.monotonic() - self.started
        return elapsed / self.done * (self.total - self.done)

    def line(self) -> str:
        cost = f"~${self.cost_usd:.4f}" if self.cost_usd is not None else "cost unknown"
        eta = self.eta_s
        eta_text = f", ETA {int(eta) // 60}m{int(eta) % 60:02d}s" if eta is not None else ""
        return (
            f"LLM: {self.done}/{self.total} chunks, {self.in_flight} in flight, "
            f"{self.prompt_tokens + self.completion_tokens:,} tokens, {cost}{eta_text}"
        )


@dataclass
class ExtractionBatch:
    """What `extract_runs` did: each (topic_id, run_id) outcome, and what was sent for them."""

    outcomes: dict[tuple[str, str], ExtractionOutcome] = field(default_factory=dict)
    requests: int = 0  # requests asked (each sent once, possibly retried)
    requests_sent: int = 0  # HTTP requests, retries included
    unsent: int = 0  # requests not sent (cost ceiling, or a fatal error stopped the rest)
    peak_in_flight: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stopped_by_cost: bool = False
    batch_ids: list[str] = field(default_factory=list)
    fatal: LLMFatalError | None = None  # raised once every request under way has been stored
