"""The semantic veto (docs/conflicts.md, Tier 2): optional and veto-only.

For a topic with `semantic_veto: true`, when an LLM is configured, the gate asks about each text
that would become a new brick and has related bricks already (embedding similarity at least the
topic's `related_threshold`, no containment): does it add information those do not hold? A
`discard` answer makes its pointers rejections with reason `semantic_veto`; `keep`, `unsure`, a
reply that holds no verdict and a failed call all keep the brick. The model never edits.

Each question is keyed like every LLM call (model, prompt version, rendered prompt), stored in
`llm_calls` as asked and answered, and replayed from there: a discard is discarded again without a
request. Questions go out concurrently (NEXUS_LLM_CONCURRENCY). What a text is compared with are
the topic's visible bricks before this sync's new ones, in rounded-similarity order, ties by id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping

from nexus_assets.core.fingerprint import canonical_json
from nexus_assets.core.models import Occurrence, Rejection, Topic
from nexus_assets.llm.client import (
    CallFailed,
    CallRecord,
    CallStore,
    LLMConfig,
    LLMConfigError,
    PointerClient,
    call_key,
    prompt_hash,
)
from nexus_assets.llm.config import ReplyNotJSON
from nexus_assets.relate.prompt import (
    MAX_RELATED_SHOWN,
    VETO_FORMATS,
    VETO_PROMPT_VERSION,
    parse_verdict,
    render_veto,
)
from nexus_assets.relate.rules import contains_either, round_similarity

if TYPE_CHECKING:
    from nexus_assets.relate.step import RelateStores


@dataclass
class VetoTally:
    questions: int = 0  # new texts with related bricks
    replayed: int = 0  # answered from the stored calls, no request
    sent: int = 0
    discarded: int = 0  # texts discarded (each of their pointers is a semantic_veto rejection)
    kept_unsure: int = 0  # unsure, no verdict, or failed: kept
    failed: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Question:
    fingerprint: str
    content: str
    run_id: str
    related: tuple[tuple[str, float], ...]  # (brick id, similarity)
    messages: list[dict[str, Any]]
    key: str


class SemanticVeto:
    """The veto for one topic's gate pass. `embed` maps texts to unit vectors (the recall embedder)."""

    def __init__(self, config: LLMConfig, store: CallStore, embed: Callable[[list[str]], Any], model: str, *, replay_only: bool = False):
        self.config = config
        self.store = store
        self.embed = embed
        self.model = model  # the embedding model the related bricks are found with
        self.replay_only = replay_only
        self.tally = VetoTally()
        self._pool: tuple[list[str], Any, dict[str, str]] | None = None

    def _related_pool(self, vault: RelateStores, topic: Topic):
        """The topic's visible bricks with their vectors (embedding those without one, as recall would)."""
        if self._pool is None:
            todo = vault.recall.fingerprints_without_embedding(topic.topic_id, self.model)
            if todo:
                vault.recall.store_embeddings(self.model, [f for f, _ in todo], self.embed([t for _, t in todo]), datetime.now(timezone.utc))
            ids, vectors = vault.recall.visible_vectors(topic.topic_id, self.model)
            texts = {b.brick_id: b.content for b in vault.bricks.select(brick_ids=ids)} if ids else {}
            self._pool = (ids, vectors, texts)
        return self._pool

    def screen(
        self, vault: RelateStores, topic: Topic, results: list[tuple[str, Any, list[Occurrence], list[Rejection]]]
    ) -> list[tuple[str, Any, list[Occurrence], list[Rejection]]]:
        """The gate's verdicts for a chunk of extractions, with every pointer of a discarded new text
        moved from the occurrences to the rejections (reason `semantic_veto`)."""
        first_seen: dict[str, Occurrence] = {}
        for _, _, occurrences, _ in results:
            for o in occurrences:
                first_seen.setdefault(o.fingerprint, o)
        if not first_seen:
            return results
        known = vault.relations.known_fingerprints(topic.topic_id, list(first_seen))
        new = {fp: o for fp, o in first_seen.items() if fp not in known}
        if not new:
            return results
        questions = self._questions(vault, topic, new)
        verdicts = self._answers(topic, questions)
        if not any(v[0] == "discard" for v in verdicts.values()):
            return results
        out = []
        for key, rv, occurrences, rejections in results:
            kept, vetoed = [], list(rejections)
            for o in occurrences:
                verdict = verdicts.get(o.fingerprint)
                if verdict is None or verdict[0] != "discard":
                    kept.append(o)
                    continue
                vetoed.append(
                    Rejection(
                        topic_id=o.topic_id, run_id=o.address.run_id, json_path=o.address.json_path, verbatim_quote=o.content,
                        reason="semantic_veto", detail=verdict[1],
                    )
                )
            out.append((key, rv, kept, vetoed))
        return out

    def _questions(self, vault: RelateStores, topic: Topic, new: Mapping[str, Occurrence]) -> list[_Question]:
        import numpy as np

        ids, vectors, texts = self._related_pool(vault, topic)
        if not ids:
            return []
        order = sorted(new)  # by fingerprint: the questions do not depend on the order pointers came in
        candidates = self.embed([new[fp].content for fp in order])
        threshold = round_similarity(topic.related_threshold)
        scores = np.round(candidates.astype(np.float64) @ vectors.astype(np.float64).T, 4)
        questions = []
        for row, fp in enumerate(order):
            text = new[fp].content
            ranked = sorted(
                ((ids[c], float(scores[row, c])) for c in np.nonzero(scores[row] >= threshold)[0]),
                key=lambda r: (-r[1], r[0]),
            )
            related = tuple(r for r in ranked if not contains_either(text, texts[r[0]]))[:MAX_RELATED_SHOWN]
            if not related:
                continue  # nothing it could repeat: kept without a question
            messages = render_veto(topic, text, [texts[b] for b, _ in related])
            questions.append(_Question(fp, text, new[fp].address.run_id, related, messages, call_key(self.config.model, VETO_PROMPT_VERSION, messages)))
        return questions

    def _answers(self, topic: Topic, questions: Sequence[_Question]) -> dict[str, tuple[str, str]]:
        """fingerprint → (verdict, why), replayed where stored, else asked (concurrently)."""
        t = self.tally
        t.questions += len(questions)
        out: dict[str, tuple[str, str]] = {}
        ask: list[_Question] = []
        for q in questions:
            stored = self.store.get(q.key)
            if stored is None:
                ask.append(q)
                continue
            t.replayed += 1
            out[q.fingerprint] = self._verdict(q, stored.raw_response, replayed=True)
        if ask and self.replay_only:
            t.kept_unsure += len(ask)
            t.notes.append(f"{len(ask)} veto questions have no stored answer (replay only): kept")
            return out
        if ask:
            with PointerClient(self.config) as client:
                replies = client.complete_many([q.messages for q in ask], formats=VETO_FORMATS)
        else:
            replies = []
        for q, reply in zip(ask, replies):
            base = dict(
                key=q.key, topic_id=topic.topic_id, run_id=q.run_id, model=self.config.model, prompt_version=VETO_PROMPT_VERSION,
                prompt_hash=prompt_hash(q.messages), request_json=canonical_json(q.messages),
            )
            if isinstance(reply, CallFailed):
                t.failed += 1
                t.kept_unsure += 1
                if reply.attempts:
                    t.sent += 1
                self.store.put(CallRecord(**base, status="failed", error=str(reply), attempts=reply.attempts))
                out[q.fingerprint] = ("keep", f"the veto call failed ({reply}); kept")
                continue
            t.sent += 1
            fields = reply.record_fields()
            try:
                parse_verdict(reply.text)
            except ReplyNotJSON as exc:
                t.failed += 1
                t.kept_unsure += 1
                self.store.put(CallRecord(**base, **fields, status="failed", error=str(exc)))
                out[q.fingerprint] = ("keep", f"the veto reply held no verdict ({exc}); kept")
                continue
            self.store.put(CallRecord(**base, **fields, status="ok"))
            out[q.fingerprint] = self._verdict(q, reply.text, replayed=False)
        return out

    def _verdict(self, q: _Question, text: str | None, *, replayed: bool) -> tuple[str, str]:
        try:
            verdict = parse_verdict(text)
        except ReplyNotJSON:
            verdict = "unsure"
        if verdict == "discard":
            self.tally.discarded += 1
            related = ", ".join(f"{b[:12]} ({s:.4f})" for b, s in q.related)
            return "discard", (
                f"the LLM ({self.config.model}) found nothing new over related bricks {related}; "
                f"call {q.key[:12]}{' (replayed)' if replayed else ''}"
            )
        if verdict == "unsure":
            self.tally.kept_unsure += 1
        return verdict, ""


def semantic_veto_for(
    topic: Topic, env: Mapping[str, str], store: CallStore, *, replay_only: bool = False, **overrides: Any
) -> tuple[SemanticVeto | None, str | None]:
    """The veto a topic asks for, or None with why not (None, None: it does not ask)."""
    if not topic.semantic_veto:
        return None, None
    try:
        config = LLMConfig.from_env(env, **{k: v for k, v in overrides.items() if v not in (None, "")})
    except LLMConfigError:
        return None, (
            f"{topic.topic_id}: semantic_veto is on but no LLM is configured (OPENAI_BASE_URL, OPENAI_API_KEY, "
            "NEXUS_LLM_MODEL): nothing was vetoed"
        )
    from nexus_assets.embedding.embedder import MODEL, embed

    return SemanticVeto(config, store, embed, MODEL, replay_only=replay_only), None


VETO_OUTPUT_TOKENS_EST = 32  # {"verdict": ..., "reason": one short sentence}


def plan_veto(topic: Topic, new_texts: Sequence[str] | None, *, stored_answers: int, config: LLMConfig) -> dict:
    """What the veto of one topic would cost a sync (`nexus plan`); sends nothing. `new_texts`:
    the texts the extractor would bring that the topic has not seen (None: not known before the
    extractor runs). Each is asked about at most once, and only when it has related bricks, so the
    figures are a ceiling; each question is costed as if it showed the most related bricks."""
    from nexus_assets.llm.chunking import estimate_tokens
    from nexus_assets.llm.planning import estimate_cost
    from nexus_assets.llm.requests import TOKENS_PER_MESSAGE

    def tokens(text: str) -> int:
        return sum(estimate_tokens(m["content"]) + TOKENS_PER_MESSAGE for m in render_veto(topic, text, [text] * MAX_RELATED_SHOWN))

    per_question = [tokens(t) for t in new_texts] if new_texts else [tokens("x" * 120)]
    typical_in = -(-sum(per_question) // len(per_question))
    out = {
        "topic_id": topic.topic_id,
        "veto_answers_stored": stored_answers,
        "veto_tokens_per_question_est": typical_in + VETO_OUTPUT_TOKENS_EST,
        "veto_cost_per_question_usd": estimate_cost(typical_in, VETO_OUTPUT_TOKENS_EST, config),
    }
    if new_texts is None:
        out |= {"veto_questions_at_most": None, "veto_cost_at_most_usd": None}
    else:
        out |= {
            "veto_questions_at_most": len(new_texts),
            "veto_cost_at_most_usd": estimate_cost(sum(per_question), VETO_OUTPUT_TOKENS_EST * len(new_texts), config),
        }
    return out
