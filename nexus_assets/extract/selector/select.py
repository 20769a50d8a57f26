"""embedded-v4's reading of a run for a topic: candidates, conversation scope, features, decision.

1. Candidates: every sentence unit of the topic's in-scope nodes (`scope.py`). A topic that does not
   name `tool_message`, `tool_call` or `system_message` in its target_node_types never gets them
   (tool output and harness-injected text are not notes, docs/inputs.md).
2. Form rules that need no model decide the obvious drops first (code, tables, headings, markup,
   one- and two-word fragments, questions, tool-output lines): those sentences are never embedded.
3. Conversation scope: the conversation (its title and the person's turns) is compared with the
   topic; one below `CONVERSATION_BAR` contributes nothing unless the topic's `sources` names it.
4. The rest is embedded once each and scored by the shipped model (`model.py`) from its vector and
   the scalars of `features.py`; kept when the rounded score reaches the model's threshold.
Every score is rounded before it decides anything, and the decisions are stored as the extractor's
answer, so a re-sync replays them (docs/invariants.md inv. 3).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from nexus_assets.core.models import Run, Topic
from nexus_assets.extract.relevance import Vectors, topic_texts
from nexus_assets.ingest.scope import in_scope_nodes
from nexus_assets.extract.selector.features import SCORE_DECIMALS, Context, restatement, scalar_features
from nexus_assets.core.sentences import CODE, HEADING, TABLE, sentence_units
from nexus_assets.ingest.formats.claude import ARTIFACT, region_of, tagged_regions

# A conversation whose relevance to the topic is below this contributes no bricks (unless named).
CONVERSATION_BAR = 0.08
# Node types a topic gets only when its target_node_types names them.
NOT_NOTES = frozenset({"tool_message", "tool_call", "system_message"})
# The person's own turns (their answers through a tool are user_message too, docs/inputs.md).
PERSON = "user_message"
CONVERSATION_CHARS = 2000  # the model reads 256 word pieces; more text is not read anyway


@dataclass
class Candidate:
    json_path: str
    start: int
    end: int
    text: str
    node_type: str
    kind: str
    node_position: int
    index_in_message: int
    sentences_in_message: int
    previous_turn: str | None
    reason: str | None = None  # why it was dropped before the model (form, conversation), else None
    context: Context | None = None
    score: float | None = None
    keep: bool = False


@dataclass
class RunReading:
    run_id: str
    conversation_relevance: float | None
    named: bool
    nodes: int
    candidates: list[Candidate] = field(default_factory=list)


def cheap_reason(text: str, kind: str) -> str | None:
    """A form no person keeps as a note, decided without the model; None when the model must judge."""
    if kind == CODE:
        return "form: code block"
    if kind == TABLE:
        return "form: table row"
    if kind == HEADING:
        return "form: heading"
    stripped = text.strip()
    if "\x1b[" in stripped:
        return "form: tool output (terminal colour codes)"
    body = stripped.rstrip("\"'”’»)]}*_` ")
    if body.endswith(("?", "？", "؟")):
        return "form: question"
    words = [w for w in stripped.split() if any(c.isalnum() for c in w)]
    if len(words) < 3 and not any("\u3040" <= c <= "\u9fff" or "\uac00" <= c <= "\ud7af" for c in stripped):
        return "form: fragment (under three words)"
    if len(stripped) > 1500:
        return "form: over 1,500 characters (a dump, not a sentence)"
    return None


def conversation_text(run: Run, title: str | None, texts: Mapping[str, str]) -> str:
    """What the conversation is about: its title and the person's turns, first ones first."""
    parts = [title] if title else []
    size = len(title or "")
    for node in run.nodes:
        if node.node_type == PERSON and (t := texts.get(node.path)):
            parts.append(t[: CONVERSATION_CHARS - size])
            size += len(parts[-1])
            if size >= CONVERSATION_CHARS:
                break
    return "\n".join(parts)


def _node_texts(run: Run) -> dict[str, str]:
    from nexus_assets.ingest.scope import node_text

    out = {}
    for node in run.nodes:
        t = node_text(run, node)
        if isinstance(t, str):
            out[node.path] = t
    return out


def read_run(topic: Topic, run: Run) -> tuple[list[Candidate], dict[str, str]]:
    """The run's candidates for the topic (steps 1–2), with every node's text by path."""
    policy = topic.extraction_policy
    targeted = set(policy.target_node_types or ())
    artifacts = "artifact" in targeted
    texts = _node_texts(run)
    previous: dict[str, str | None] = {}
    last_by_type: dict[str, str] = {}
    for node in run.nodes:
        t = texts.get(node.path)
        if node.node_type in ("user_message", "assistant_message"):
            other = "assistant_message" if node.node_type == "user_message" else "user_message"
            previous[node.path] = last_by_type.get(other)
            if t:
                last_by_type[node.node_type] = t
    position = {node.path: i for i, node in enumerate(run.nodes)}
    out = []
    for node, text in in_scope_nodes(policy, run, topic):
        if node.node_type in NOT_NOTES and node.node_type not in targeted:
            continue
        regions = tagged_regions(text) if run.format == "claude" else []
        units = []
        for start, end, kind in sentence_units(text):
            if regions and (inside := region_of(regions, start, end)) is not None and not (inside == ARTIFACT and artifacts):
                continue
            units.append((start, end, kind))
        for i, (start, end, kind) in enumerate(units):
            sentence = text[start:end]
            c = Candidate(
                node.path, start, end, sentence, node.node_type, kind, position[node.path], i, len(units),
                previous.get(node.path),
            )
            c.reason = cheap_reason(sentence, kind)
            out.append(c)
    return out, texts


def _rounded(values) -> list[float]:
    return [round(float(v), SCORE_DECIMALS) for v in values]


def read_runs(
    topic: Topic,
    runs: Sequence[Run],
    vectors: Vectors,
    titles: Mapping[str, str | None],
    *,
    every_candidate: bool = False,
) -> tuple[list[RunReading], dict[int, "object"]]:
    """Steps 1–3 and the features of step 4 for every run; `every_candidate` (training) also
    computes features for what the conversation scope dropped.
    Returns the readings and, by id(candidate), each scored candidate's vector."""
    import numpy as np

    sources = topic.sources
    named = bool(sources is not None and (sources.runs or sources.titles or sources.files))
    pattern = topic.keyword_pattern()
    readings: list[RunReading] = []
    texts_by_run = {}
    for run in runs:
        candidates, texts = read_run(topic, run)
        texts_by_run[run.run_id] = texts
        readings.append(RunReading(run.run_id, None, named, len(run.nodes), candidates))
    queries = topic_texts(topic)
    examples = topic.examples
    keep_ex = list(examples.keep) if examples else []
    drop_ex = list(examples.drop) if examples else []
    head = np.asarray(vectors([*queries, *keep_ex, *drop_ex]), dtype="float32")
    query = head[: len(queries)]
    keep_v = head[len(queries) : len(queries) + len(keep_ex)]
    drop_v = head[len(queries) + len(keep_ex) :]
    _scope_conversations(readings, runs, vectors, titles, texts_by_run, query, named)
    # Form-dropped sentences are never scored (nor ranked among the others); `every_candidate` also
    # scores the sentences the conversation scope dropped, as they would be were the run named.
    todo = [(r, c) for r in readings for c in r.candidates
            if c.reason is None or (every_candidate and c.reason.startswith("conversation"))]
    vecs: dict[int, object] = {}
    if not todo:
        return readings, vecs
    matrix = np.asarray(vectors([c.text for _, c in todo]), dtype="float32")
    rel = _rounded((matrix @ query.T).max(axis=1))
    kex = _rounded((matrix @ keep_v.T).max(axis=1)) if len(keep_ex) else [None] * len(todo)
    dex = _rounded((matrix @ drop_v.T).max(axis=1)) if len(drop_ex) else [None] * len(todo)
    best_in_node: dict[tuple[str, str], float] = {}
    in_run: dict[str, list[float]] = {}
    for (r, c), s in zip(todo, rel):
        key = (r.run_id, c.json_path)
        best_in_node[key] = max(best_in_node.get(key, -1.0), s)
        in_run.setdefault(r.run_id, []).append(s)
    # Within one run only, so a run's answer never depends on which runs were extracted beside it.
    ranked = {rid: sorted(v) for rid, v in in_run.items()}
    means = {rid: round(sum(v) / len(v), SCORE_DECIMALS) for rid, v in in_run.items()}
    for i, (r, c) in enumerate(todo):
        c.context = Context(
            relevance=rel[i],
            message_relevance=best_in_node[(r.run_id, c.json_path)],
            conversation_relevance=r.conversation_relevance if r.conversation_relevance is not None else 0.0,
            keyword=bool(pattern is not None and pattern.search(c.text)),
            rank_in_conversation=round(bisect_left(ranked[r.run_id], rel[i]) / len(ranked[r.run_id]), SCORE_DECIMALS),
            conversation_mean=means[r.run_id],
            index_in_message=c.index_in_message,
            sentences_in_message=c.sentences_in_message,
            node_position=c.node_position,
            nodes_in_conversation=r.nodes,
            node_type=c.node_type,
            kind=c.kind,
            restatement=restatement(c.text, c.previous_turn),
            keep_example=kex[i],
            drop_example=dex[i],
        )
        vecs[id(c)] = matrix[i]
    return readings, vecs


def _scope_conversations(
    readings: list[RunReading], runs: Sequence[Run], vectors: Vectors, titles: Mapping[str, str | None],
    texts_by_run: Mapping[str, object], query, named: bool,
) -> None:
    """Step 3, the conversation scope: each conversation with a candidate left gets its relevance to
    the topic (one text each); under CONVERSATION_BAR its candidates are dropped, unless the topic
    names its sources."""
    import numpy as np

    live = [r for r in readings if any(c.reason is None for c in r.candidates)]
    if live:
        conv = np.asarray(
            vectors([conversation_text(run, titles.get(run.run_id), texts_by_run[run.run_id]) for run in runs if run.run_id in {r.run_id for r in live}]),
            dtype="float32",
        )
        for r, score in zip(live, _rounded((conv @ query.T).max(axis=1))):
            r.conversation_relevance = score
    for r in readings:
        if r.conversation_relevance is not None and r.conversation_relevance < CONVERSATION_BAR and not named:
            for c in r.candidates:
                c.reason = c.reason or f"conversation: relevance {r.conversation_relevance:.3f} to the topic is under {CONVERSATION_BAR}"


def feature_rows(candidates: Sequence[Candidate], vecs: Mapping[int, object]):
    """(vectors (n, 384), scalars (n, k)) of candidates that have a context."""
    import numpy as np

    v = np.stack([vecs[id(c)] for c in candidates]).astype("float32")
    s = np.asarray([scalar_features(c.text, c.context) for c in candidates], dtype="float64")
    return v, s


def decide(readings: Sequence[RunReading], vecs: Mapping[int, object], selector) -> None:
    """Step 4: score every candidate the earlier steps left to the model, in place."""
    pending = [c for r in readings for c in r.candidates if c.reason is None]
    if not pending:
        return
    v, s = feature_rows(pending, vecs)
    scores = _rounded(selector.scores(v, s))
    for c, score in zip(pending, scores):
        c.score = score
        c.keep = score >= selector.threshold
        if not c.keep:
            c.reason = f"model: score {score:.3f} under {selector.threshold:.3f}"


def document_title(run: Run) -> str | None:
    """The conversation's title when the run's document is at hand (a parsed file); else None."""
    doc = run.document
    if isinstance(doc, dict):
        for key in ("title", "name"):
            if isinstance(doc.get(key), str) and doc[key].strip():
                return doc[key]
    return None


def why(reading: RunReading, c: Candidate) -> dict:
    """A candidate's decision and the rounded scores it rests on (stored with a kept pointer)."""
    ctx = c.context
    out = {"keep": c.keep, "score": c.score, "reason": c.reason, "conversation_relevance": reading.conversation_relevance}
    if ctx is not None:
        out |= {
            "relevance": ctx.relevance,
            "message_relevance": ctx.message_relevance,
            "restatement": ctx.restatement,
            "keep_example": ctx.keep_example,
            "drop_example": ctx.drop_example,
        }
    return out


def pointer_of(topic: Topic, reading: RunReading, c: Candidate) -> dict:
    return {"topic_id": topic.topic_id, "json_path": c.json_path, "verbatim_quote": c.text, "why": why(reading, c)}
