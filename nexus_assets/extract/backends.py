"""Extractor backends behind one interface: given a topic and a run, return raw pointers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping, Protocol, Sequence

from nexus_assets.core.fingerprint import canonical_json, fingerprint, sha256_hex
from nexus_assets.core.models import DEFAULT_MIN_RELEVANCE, Run, Topic
from nexus_assets.extract.embedded import EXTRACTOR_VERSION, candidate_pointers, keep_relevant
from nexus_assets.extract.relevance import Vectors
from nexus_assets.extract.selector import SELECTOR_VERSION
from nexus_assets.llm.chunking import DEFAULT_TOKEN_BUDGET, LEGACY_TOKEN_BUDGET
from nexus_assets.llm.client import (
    CallRecord,
    CallStore,
    CostBudget,
    ExtractionJob,
    LLMConfig,
    PointerClient,
    SendProgress,
)
from nexus_assets.llm.prompt import LEGACY_PROMPT_VERSIONS, PROMPT_VERSION
from nexus_assets.recall.records import RecallRecords


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

    @property
    def legacy_identities(self) -> tuple[str, ...]:
        """Earlier identities whose stored extractions still count as this extractor's answers."""

    def extract_runs(
        self, topic: Topic, runs: list[Run], companions: Mapping[str, tuple[Topic, ...]] | None = None
    ) -> dict[str, Extraction]:
        """Each run's pointers for `topic`, by run id. `companions` (by run id): other topics
        an extractor that `shares_requests` may answer for in the same breath."""


class StoredVectors:
    """Texts → unit vectors from the shipped embedding model, each text's vector read from the
    vault's embeddings (keyed by model and fingerprint, as recall keys them) when it has one, else
    embedded now. `keep` stores the vectors of the texts that became pointers, so recall finds
    them embedded; a text judged irrelevant leaves no vector behind (nothing for `forget` to find)."""

    def __init__(self, records: RecallRecords | None = None) -> None:
        self.records = records
        self._fresh: dict[str, object] = {}

    def __call__(self, texts: Sequence[str]):
        import numpy as np

        from nexus_assets.recall.embedder import DIMENSIONS, MODEL, embed

        fps = [fingerprint(t) for t in texts]
        known = self.records.vectors_of(MODEL, fps) if self.records is not None else {}
        known.update({fp: v for fp, v in self._fresh.items() if fp not in known})
        todo = {fp: t for fp, t in zip(fps, texts) if fp not in known}
        if todo:
            for fp, vector in zip(todo, embed(list(todo.values()))):
                known[fp] = self._fresh[fp] = vector
        out = np.empty((len(texts), DIMENSIONS), dtype="float32")
        for i, fp in enumerate(fps):
            out[i] = known[fp]
        return out

    def keep(self, texts: Iterable[str]) -> None:
        from nexus_assets.recall.embedder import MODEL

        fresh = {fp: self._fresh[fp] for t in texts if (fp := fingerprint(t)) in self._fresh}
        if fresh and self.records is not None:
            import numpy as np

            self.records.store_embeddings(MODEL, list(fresh), np.stack(list(fresh.values())), datetime.now(timezone.utc))
        self._fresh.clear()


class EmbeddedExtractor:
    """embedded-v3, the offline extractor before the trained selector (`embedded.py`): keyword
    statements, kept when relevant to the topic. Without `vectors` relevance is not judged (every
    keyword statement is kept). Kept unchanged so a vault it compiled replays and compares as it was."""

    identity = EXTRACTOR_VERSION
    legacy_identities: tuple[str, ...] = ()
    shares_requests = False

    def __init__(self, vectors: StoredVectors | None = None) -> None:
        self.vectors = vectors

    def extract(self, topic: Topic, run: Run) -> Extraction:
        return self.extract_runs(topic, [run])[run.run_id]

    def extract_runs(
        self, topic: Topic, runs: list[Run], companions: Mapping[str, tuple[Topic, ...]] | None = None
    ) -> dict[str, Extraction]:
        # One relevance call for the batch: the model embeds in batches of similar length.
        candidates = {run.run_id: candidate_pointers(topic, run) for run in runs}
        pointers = [p for found in candidates.values() for p in found]
        kept = {id(p) for p in keep_relevant(topic, pointers, self.vectors)}
        if self.vectors is not None:
            self.vectors.keep(p["verbatim_quote"] for p in pointers if id(p) in kept)
        return {run_id: Extraction([p for p in found if id(p) in kept]) for run_id, found in candidates.items()}


Names = Callable[[Sequence[str]], Mapping[str, object]]


class SelectorExtractor:
    """embedded-v4 (DESIGN §5): every sentence of the topic's in-scope nodes, judged by the trained
    selector that ships in the package (`selector/`), inside the conversation scope. Each kept
    pointer carries its scores under `why` (the gate reads only the pointer's three fields), so
    the stored answer says why it was kept (`nexus explain`); a dropped sentence's reason is
    recomputed from the same rounded scores when asked.

    `vectors`: texts → unit vectors (`StoredVectors`); `names`: run ids → objects with a `title`
    (`RunRecords.run_names`), the conversation titles the conversation scope reads."""

    identity = SELECTOR_VERSION
    # Answers embedded-v3 stored are replayed, not asked again: an upgrade does not re-select a
    # vault by itself (DESIGN §5); `nexus sync --reselect` moves a topic to this selector.
    legacy_identities: tuple[str, ...] = (EXTRACTOR_VERSION,)
    shares_requests = False

    def __init__(self, vectors: Vectors | None = None, names: Names | None = None, weights: str | None = None) -> None:
        from nexus_assets.extract.selector.model import load_selector

        self.selector = load_selector(weights)  # a missing or corrupt file fails here, before any answer
        self.vectors = vectors if vectors is not None else StoredVectors()
        self.names = names

    def extract(self, topic: Topic, run: Run) -> Extraction:
        return self.extract_runs(topic, [run])[run.run_id]

    def titles(self, runs: Sequence[Run]) -> dict[str, str | None]:
        from nexus_assets.extract.selector.select import document_title

        titles = {run.run_id: document_title(run) for run in runs}
        missing = [r for r, t in titles.items() if t is None]
        if missing and self.names is not None:
            for run_id, name in self.names(missing).items():
                titles[run_id] = getattr(name, "title", None)
        return titles

    def read(self, topic: Topic, runs: list[Run], *, every_candidate: bool = False):
        """The selector's readings of the runs (candidates with their decisions), for extraction and explain."""
        from nexus_assets.extract.selector.select import decide, read_runs

        readings, vecs = read_runs(topic, runs, self.vectors, self.titles(runs), every_candidate=every_candidate)
        decide(readings, vecs, self.selector)
        return readings

    def extract_runs(
        self, topic: Topic, runs: list[Run], companions: Mapping[str, tuple[Topic, ...]] | None = None
    ) -> dict[str, Extraction]:
        from nexus_assets.extract.selector.select import pointer_of

        out = {}
        kept_texts = []
        for reading in self.read(topic, runs):
            pointers = [pointer_of(topic, reading, c) for c in reading.candidates if c.keep]
            kept_texts += [p["verbatim_quote"] for p in pointers]
            out[reading.run_id] = Extraction(pointers)
        if isinstance(self.vectors, StoredVectors):
            self.vectors.keep(kept_texts)
        return out


# The embedded extractors by version. NEWEST_EMBEDDED is the newest this release has; DEFAULT_EMBEDDED
# is what a sync uses unless $NEXUS_EMBEDDED_EXTRACTOR names another. The trained selector is not the
# default yet: on the leave-one-person-out corpus and on the shipped sample's gold it does not beat
# embedded-v3 (selector/CARD.md), so flipping DEFAULT_EMBEDDED waits for a selector that does.
NEWEST_EMBEDDED = SELECTOR_VERSION
DEFAULT_EMBEDDED = EXTRACTOR_VERSION
EMBEDDED_VERSIONS = (EXTRACTOR_VERSION, SELECTOR_VERSION)


def embedded_extractor(
    version: str = DEFAULT_EMBEDDED, vectors: StoredVectors | None = None, names: Names | None = None
) -> EmbeddedExtractor | SelectorExtractor:
    """The offline extractor of one version: "embedded-v3" (keyword statements kept by relevance; the
    default, `DEFAULT_EMBEDDED`) or "embedded-v4" (the trained selector, `NEWEST_EMBEDDED`).
    Each is an `Extractor` whose `identity` is its version. `vectors`: the vault's `StoredVectors`
    (None: embed without storing); `names`: `RunRecords.run_names`, for v4's conversation titles.
    An unknown version is a ValueError naming the known ones."""
    if version == EXTRACTOR_VERSION:
        return EmbeddedExtractor(vectors)
    if version == SELECTOR_VERSION:
        return SelectorExtractor(vectors, names)
    raise ValueError(f"unknown embedded extractor {version!r}: known are {', '.join(EMBEDDED_VERSIONS)}")


def extraction_key(extractor: Extractor | str, topic: Topic, version_id: str) -> str:
    """Same extractor + same topic scope + same run content = same pointers; no need to ask again.
    `extractor`: an extractor, or one of its identities."""
    scope = {"topic_id": topic.topic_id, "policy": topic.extraction_policy.model_dump(mode="json")}
    # Only a non-default node selection enters the key, so keys recorded before it existed still match.
    if topic.include_hidden:
        scope["include_hidden"] = True
    if topic.branches != "all":
        scope["branches"] = topic.branches
    if topic.min_relevance != DEFAULT_MIN_RELEVANCE:
        scope["min_relevance"] = topic.min_relevance
    identity = extractor if isinstance(extractor, str) else extractor.identity
    return sha256_hex(canonical_json([identity, scope, version_id]))


class OpenAIExtractor:
    """Pointers from an OpenAI-compatible Chat Completions endpoint, each answer replayable from
    the vault. `shares_requests`: a chunk is asked once for this topic and every companion topic
    that lacks an answer for it (DESIGN §5 "At scale")."""

    shares_requests = True

    def __init__(
        self,
        config: LLMConfig,
        store: CallStore,
        *,
        replay_only: bool = False,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        batch: bool = False,
        progress: Callable[[SendProgress], None] | None = None,
    ):
        self.config = config
        self.store = store
        self.replay_only = replay_only
        self.token_budget = token_budget
        self.batch = batch
        self.progress = progress
        self.client = PointerClient(config)
        priced = config.price_in_per_mtok is not None and config.price_out_per_mtok is not None
        self.budget = (
            CostBudget(config.max_cost_usd, config.price_in_per_mtok, config.price_out_per_mtok)
            if config.max_cost_usd is not None and priced
            else None
        )
        self.failed: list[CallRecord] = []
        self.requests_sent = 0  # HTTP requests, retries included
        self.requests = 0  # chunks asked (each once, for every topic that needed it)
        self.calls = 0  # this topic's answers, replayed or asked
        self.unsent = 0
        self.peak_in_flight = 0
        self.stopped_by_cost = False
        self.batch_ids: list[str] = []
        # Tokens of the requests sent in this run (replays cost nothing).
        self.prompt_tokens = 0
        self.completion_tokens = 0

    @property
    def identity(self) -> str:
        return self._identity(PROMPT_VERSION)

    @property
    def legacy_identities(self) -> tuple[str, ...]:
        """Identities of earlier prompts whose extractions are still replayed, not asked again: made
        with this token budget, or with the 3000 every sync used before the budget followed the
        model's context."""
        budgets = dict.fromkeys((self.token_budget, LEGACY_TOKEN_BUDGET))
        return tuple(self._identity(v, b) for v in LEGACY_PROMPT_VERSIONS for b in budgets)

    def _identity(self, prompt_version: str, token_budget: int | None = None) -> str:
        return f"openai:{self.config.model}:{prompt_version}:{token_budget or self.token_budget}"

    def extract(self, topic: Topic, run: Run) -> Extraction:
        return self.extract_runs(topic, [run])[run.run_id]

    def extract_runs(
        self, topic: Topic, runs: list[Run], companions: Mapping[str, tuple[Topic, ...]] | None = None
    ) -> dict[str, Extraction]:
        jobs = [ExtractionJob(run, topic, tuple((companions or {}).get(run.run_id, ()))) for run in runs]
        batch = self.client.extract_runs(
            jobs,
            store=self.store,
            replay_only=self.replay_only,
            token_budget=self.token_budget,
            budget=self.budget,
            progress=self.progress,
            batch=self.batch,
        )
        self.requests += batch.requests
        self.requests_sent += batch.requests_sent
        self.unsent += batch.unsent
        self.peak_in_flight = max(self.peak_in_flight, batch.peak_in_flight)
        self.stopped_by_cost |= batch.stopped_by_cost
        self.batch_ids += batch.batch_ids
        self.prompt_tokens += batch.prompt_tokens
        self.completion_tokens += batch.completion_tokens
        out = {}
        for run in runs:
            outcome = batch.outcomes[(topic.topic_id, run.run_id)]
            self.failed += outcome.failed
            self.calls += len(outcome.calls)
            notes = [r.error or "" for r in outcome.failed]
            if outcome.unsent:
                notes.append(f"{outcome.unsent} chunks not sent (cost ceiling reached or batch still running)")
            out[run.run_id] = Extraction(outcome.pointers, complete=outcome.complete, notes=notes)
        return out

    @property
    def cost_usd(self) -> float | None:
        """Estimated USD of what this run sent; None when no price is configured (unknown, not free)."""
        c = self.config
        if c.price_in_per_mtok is None or c.price_out_per_mtok is None:
            return None
        return (self.prompt_tokens * c.price_in_per_mtok + self.completion_tokens * c.price_out_per_mtok) / 1_000_000

    def close(self) -> None:
        self.client.close()
