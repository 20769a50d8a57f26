"""Extractor backends behind one interface: given a topic and a run, return raw pointers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Protocol, Sequence

from nexus_assets.core.fingerprint import canonical_json, fingerprint, sha256_hex
from nexus_assets.core.models import DEFAULT_MIN_RELEVANCE, Run, Topic
from nexus_assets.extract.embedded import EXTRACTOR_VERSION, TAUGHT_VERSION, candidate_pointers, keep_relevant, keep_taught
from nexus_assets.extract.relevance import Vectors
from nexus_assets.extract.selector import SELECTOR_VERSION, V5_VERSION
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

if TYPE_CHECKING:  # type-only: a phase names a store above it only as an annotation
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

        from nexus_assets.embedding.embedder import DIMENSIONS, MODEL, embed

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
        from nexus_assets.embedding.embedder import MODEL

        fresh = {fp: self._fresh[fp] for t in texts if (fp := fingerprint(t)) in self._fresh}
        if fresh and self.records is not None:
            import numpy as np

            self.records.store_embeddings(MODEL, list(fresh), np.stack(list(fresh.values())), datetime.now(timezone.utc))
        self._fresh.clear()


class EmbeddedExtractor:
    """embedded-v3, the offline extractor before the trained selector (`embedded.py`): keyword
    statements, kept when relevant to the topic or like one of its keep examples, never when like one
    of its drop examples. Without `vectors` relevance is not judged (every keyword statement is kept)
    and only an exact example decides. Kept so a vault it compiled replays and compares as it was."""

    identity = EXTRACTOR_VERSION
    legacy_identities: tuple[str, ...] = ()
    shares_requests = False
    # Each node's pointers depend on that node alone: a grown run's unchanged nodes are replayed (`replay.py`).
    node_local = True

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


class TaughtExtractor(EmbeddedExtractor):
    """embedded-v6: embedded-v3's reading without the assistant's narration of its work ("I'll
    update…", "Now let me…"), and the topic's keep and drop examples fitted as one scorer
    (`examples.fit_taught`) that drops what they pull toward their drops (docs/teaching.md).
    Node by node like v3: each decision depends on the node and the topic's examples only."""

    identity = TAUGHT_VERSION

    def __init__(self, vectors: StoredVectors | None = None) -> None:
        from nexus_assets.extract.selector.model import load_selector

        # The fit standardises the form features as the shipped selector does: a missing or
        # corrupt weights file is one error naming it here, before any answer (as v4's).
        load_selector()
        super().__init__(vectors)

    def extract_runs(
        self, topic: Topic, runs: list[Run], companions: Mapping[str, tuple[Topic, ...]] | None = None
    ) -> dict[str, Extraction]:
        from nexus_assets.extract.selector.features import is_narration

        candidates = {run.run_id: candidate_pointers(topic, run) for run in runs}
        # The assistant narrating its work is never a note (v3 keeps such statements when they hold a keyword).
        assistant = {(run.run_id, n.path) for run in runs for n in run.nodes if n.node_type == "assistant_message"}
        candidates = {
            run_id: [p for p in found if not ((run_id, p["json_path"]) in assistant and is_narration(p["verbatim_quote"]))]
            for run_id, found in candidates.items()
        }
        pointers = [p for found in candidates.values() for p in found]
        kept = {id(p) for p in keep_taught(topic, pointers, self.vectors)}
        if self.vectors is not None:
            self.vectors.keep(p["verbatim_quote"] for p in pointers if id(p) in kept)
        return {run_id: Extraction([p for p in found if id(p) in kept]) for run_id, found in candidates.items()}


class SelectorExtractor:
    """embedded-v4 (docs/quality.md): every sentence of the topic's in-scope nodes, judged by the trained
    selector that ships in the package (`selector/`), inside the conversation scope. Each kept
    pointer carries its scores under `why` (the gate reads only the pointer's three fields), so
    the stored answer says why it was kept (`nexus explain`); a dropped sentence's reason is
    recomputed from the same rounded scores when asked.

    `vectors`: texts → unit vectors (`StoredVectors`); `names`: run ids → objects with a `title`
    (`RunRecords.run_names`), the conversation titles the conversation scope reads."""

    identity = SELECTOR_VERSION
    # A topic embedded-v3 selected stays with it (each topic's version is recorded, `extract/selection.py`),
    # so no older answer stands in for this selector's: `nexus sync --reselect` really selects again.
    legacy_identities: tuple[str, ...] = ()
    shares_requests = False
    # Not node by node: a conversation's relevance reads all of it, so a grown run is selected again whole.
    node_local = False

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


class SelectorV5Extractor(SelectorExtractor):
    """embedded-v5 (`selector/v5.py`): embedded-v4's reading and conversation scope, judged by its own
    weights from v4's features and what the sentence's vector says within its run (a restatement of an
    earlier message, how central it is, its relevance against the run's others)."""

    identity = V5_VERSION

    def __init__(self, vectors: Vectors | None = None, names: Names | None = None, weights: str | None = None) -> None:
        from nexus_assets.extract.selector.model import load_selector_v5

        self.selector = load_selector_v5(weights)  # a missing or corrupt file fails here, before any answer
        self.vectors = vectors if vectors is not None else StoredVectors()
        self.names = names

    def read(self, topic: Topic, runs: list[Run], *, every_candidate: bool = False):
        from nexus_assets.extract.selector.select import read_runs
        from nexus_assets.extract.selector.v5 import conversation_vectors, decide_v5

        titles = self.titles(runs)
        readings, vecs = read_runs(topic, runs, self.vectors, titles, every_candidate=every_candidate)
        conversations = conversation_vectors(runs, readings, titles, self.vectors)
        decide_v5(readings, vecs, conversations, self.selector, topic.min_relevance)
        return readings

# The embedded selector versions this release runs, oldest first, each with what builds it from the
# vault's stored vectors. DEFAULT_EMBEDDED is the one a topic first synced is selected with, and the
# one `nexus sync --reselect` moves a topic to. The trained selector (embedded-v4) is registered but
# not the default yet: on the leave-one-person-out corpus and on the shipped sample's gold it does not
# beat embedded-v3 (selector/CARD.md); flipping DEFAULT_EMBEDDED waits for a selector that does. A topic already selected by an older one stays
# with that one until a person asks (docs/quality.md); each version's decisions are stored under its own
# identity. A new selector is one `register_selector` call in its own module.
_SELECTORS: dict[str, Callable[..., Extractor]] = {}


def register_selector(version: str, build: Callable[..., Extractor]) -> None:
    """`build(vectors, names, weights)` makes the version's extractor (see `embedded_extractor`)."""
    _SELECTORS[version] = build


def selector_versions() -> tuple[str, ...]:
    """The embedded selector versions this release runs, oldest first."""
    return tuple(_SELECTORS)


def newest_selector() -> str:
    """This release's embedded selector: what a new topic is selected with, what --reselect moves to."""
    return DEFAULT_EMBEDDED


def embedded_extractor(
    version: str, vectors: StoredVectors | None = None, names: Names | None = None, weights: str | None = None
) -> Extractor:
    """The embedded extractor of one selector version: "embedded-v3" (keyword statements kept by
    relevance, what vaults made before embedded-v4 hold) or "embedded-v4" (the trained selector).
    `vectors`: the vault's `StoredVectors` (None: embed without storing); `names`:
    `RunRecords.run_names`, for v4's conversation titles; `weights`: v4's weights file (None: the
    shipped one). A version this release cannot run is one
    clear error (the vault names a newer release's selector)."""
    build = _SELECTORS.get(version)
    if build is None:
        raise ValueError(
            f"selector {version!r} is not one this release runs ({', '.join(_SELECTORS)}); "
            "upgrade nexus-sync, or move the topic with `nexus sync --reselect --topic T`"
        )
    return build(vectors, names, weights)


register_selector(EXTRACTOR_VERSION, lambda vectors, names, weights: EmbeddedExtractor(vectors))
register_selector(SELECTOR_VERSION, SelectorExtractor)
register_selector(V5_VERSION, SelectorV5Extractor)
register_selector(TAUGHT_VERSION, lambda vectors, names, weights: TaughtExtractor(vectors))
DEFAULT_EMBEDDED = TAUGHT_VERSION


def extraction_key(extractor: Extractor | str, topic: Topic, version_id: str) -> str:
    """Same extractor + same topic scope + same run content = same pointers; no need to ask again.
    `extractor`: an extractor, or one of its identities."""
    identity = extractor if isinstance(extractor, str) else extractor.identity
    return scoped_key(identity, extraction_scope(topic), version_id)


def scoped_key(identity: str, scope: dict, version_id: str) -> str:
    """`extraction_key` with the topic's `extraction_scope` made once (a topic has many run versions)."""
    return sha256_hex(canonical_json([identity, scope, version_id]))


def extraction_scope(topic: Topic) -> dict:
    """What of a topic's definition an extractor's answer depends on."""
    scope = {"topic_id": topic.topic_id, "policy": topic.extraction_policy.model_dump(mode="json")}
    # Only a non-default node selection enters the key, so keys recorded before it existed still match.
    if topic.include_hidden:
        scope["include_hidden"] = True
    if topic.branches != "all":
        scope["branches"] = topic.branches
    if topic.min_relevance != DEFAULT_MIN_RELEVANCE:
        scope["min_relevance"] = topic.min_relevance
    # Keys recorded before keywords were inflected matched them exactly: only the inflected rule enters.
    if topic.keyword_forms != "exact" and topic.extraction_policy.required_keywords:
        scope["keyword_forms"] = topic.keyword_forms
    # A person's examples are part of the definition: a new one selects again (docs/quality.md).
    if topic.examples is not None and (topic.examples.keep or topic.examples.drop):
        scope["examples"] = topic.examples.model_dump(mode="json")
    return scope


class OpenAIExtractor:
    """Pointers from an OpenAI-compatible Chat Completions endpoint, each answer replayable from
    the vault. `shares_requests`: a chunk is asked once for this topic and every companion topic
    that lacks an answer for it (docs/quality.md "At scale")."""

    shares_requests = True
    # A pointer names one node and quotes it: a grown run's unchanged nodes keep their answers and
    # only the new nodes are sent (`replay.py`).
    node_local = True

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
