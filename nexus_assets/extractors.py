"""Extractor backends behind one interface: given a topic and a run, return raw pointers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from nexus_assets.core.extract_embedded import EXTRACTOR_VERSION, extract_embedded
from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.core.models import Run, Topic
from nexus_assets.core.scope import in_scope_nodes
from nexus_assets.llm.chunking import DEFAULT_TOKEN_BUDGET
from nexus_assets.llm.client import CallRecord, CallStore, LLMConfig, PointerClient
from nexus_assets.llm.prompt import PROMPT_VERSION

if TYPE_CHECKING:
    from nexus_assets.vault.store import Vault


@dataclass
class Extraction:
    pointers: list
    # False when a call failed: nothing is cached, so the next sync tries again.
    complete: bool = True
    notes: list[str] = field(default_factory=list)


class Extractor(Protocol):
    @property
    def identity(self) -> str:
        """Everything that changes what this extractor returns (name, version, model, prompt)."""

    def extract(self, topic: Topic, run: Run) -> Extraction: ...


class EmbeddedExtractor:
    identity = EXTRACTOR_VERSION

    def extract(self, topic: Topic, run: Run) -> Extraction:
        return Extraction(extract_embedded(topic, run))


def extraction_key(extractor: Extractor, topic: Topic, version_id: str) -> str:
    """Same extractor + same topic scope + same run content = same pointers; no need to ask again."""
    scope = {"topic_id": topic.topic_id, "policy": topic.extraction_policy.model_dump(mode="json")}
    # Only a non-default node selection enters the key, so keys recorded before it existed still match.
    if topic.include_hidden:
        scope["include_hidden"] = True
    if topic.branches != "all":
        scope["branches"] = topic.branches
    return sha256_hex(canonical_json([extractor.identity, scope, version_id]))


class VaultCallStore:
    """The LLM client's CallStore over the vault's `llm_calls` table."""

    def __init__(self, vault: "Vault"):
        self.vault = vault

    def get(self, key: str) -> CallRecord | None:
        row = self.vault.successful_llm_call(key)
        if row is None:
            return None
        return CallRecord(
            key=row["call_key"],
            pointers=json.loads(row["pointers_json"]),
            **{k: v for k, v in row.items() if k not in ("call_key", "pointers_json")},
        )

    def put(self, record: CallRecord) -> None:
        row = record.model_dump(exclude={"key", "pointers", "cached"})
        self.vault.record_llm_call({**row, "call_key": record.key}, record.pointers)


class OpenAIExtractor:
    """Pointers from an OpenAI-compatible Chat Completions endpoint, each call replayable from the vault."""

    def __init__(self, config: LLMConfig, store: CallStore, *, replay_only: bool = False, token_budget: int = DEFAULT_TOKEN_BUDGET):
        self.config = config
        self.store = store
        self.replay_only = replay_only
        self.token_budget = token_budget
        self.client = PointerClient(config)
        self.failed: list[CallRecord] = []
        self.requests_sent = 0
        self.calls = 0
        # Tokens of the calls sent in this run (replays cost nothing).
        self.prompt_tokens = 0
        self.completion_tokens = 0

    @property
    def identity(self) -> str:
        return f"openai:{self.config.model}:{PROMPT_VERSION}:{self.token_budget}"

    def extract(self, topic: Topic, run: Run) -> Extraction:
        nodes = [node for node, _ in in_scope_nodes(topic.extraction_policy, run, topic)]
        if not nodes:
            return Extraction([])
        outcome = self.client.extract(
            topic, run, nodes, store=self.store, replay_only=self.replay_only, token_budget=self.token_budget
        )
        self.failed += outcome.failed
        self.requests_sent += outcome.requests_sent
        self.calls += len(outcome.calls)
        for r in outcome.calls:
            if not r.cached:
                self.prompt_tokens += r.prompt_tokens or 0
                self.completion_tokens += r.completion_tokens or 0
        return Extraction(outcome.pointers, complete=outcome.complete, notes=[r.error or "" for r in outcome.failed])

    @property
    def cost_usd(self) -> float | None:
        """Estimated USD of what this run sent; None when no price is configured (unknown, not free)."""
        c = self.config
        if c.price_in_per_mtok is None or c.price_out_per_mtok is None:
            return None
        return (self.prompt_tokens * c.price_in_per_mtok + self.completion_tokens * c.price_out_per_mtok) / 1_000_000

    def close(self) -> None:
        self.client.close()
