"""`nexus explain`: why the selector kept a brick, or why a run's (or node's) sentences were not kept.

A kept brick's answer was stored with its scores (`SelectorExtractor` puts them under `why` in each
pointer): explain reads them back, and names the topic example nearest to the brick. A sentence not
kept has no pointer; its reason is recomputed with the same code and the same rounded scores (the
vault's stored vectors where it has them): out of scope (node type, keywords, hidden, branch, the
topic's `sources`), a form rule, the conversation scope, or the model's score under its threshold.
Nothing is written: the command only reads.
"""

from __future__ import annotations

from nexus_assets.core.models import Topic
from nexus_assets.core.paths import format_path, parse_normalized
from nexus_assets.extract.embedded import EXTRACTOR_VERSION, TAUGHT_VERSION
from nexus_assets.extract.examples import fit_taught, shift_record
from nexus_assets.extract.relevance import relevance_scores
from nexus_assets.ingest.scope import Scope, node_text
from nexus_assets.extract.selector import SELECTOR_VERSION, V5_VERSION


class ExplainError(ValueError):
    """Nothing to explain (unknown brick or run); the message says what."""


def _norm(path: str) -> str:
    steps = parse_normalized(path)
    return format_path(steps) if steps is not None else path


def _vectors(vault):
    from nexus_assets.extract.backends import StoredVectors

    return StoredVectors(vault.recall)  # reads stored vectors; `keep` is never called, so nothing is stored


def nearest_examples(topic: Topic, text: str, vectors) -> dict:
    """The keep and drop example nearest to `text` (rounded cosine), or None for a side without examples."""
    import numpy as np

    out = {"nearest_keep_example": None, "nearest_drop_example": None}
    ex = topic.examples
    if ex is None or not (ex.keep or ex.drop):
        return out
    m = np.asarray(vectors([text, *ex.keep, *ex.drop]), dtype="float32")
    sims = m[1:] @ m[0]
    for name, texts, part in (("nearest_keep_example", ex.keep, sims[: len(ex.keep)]), ("nearest_drop_example", ex.drop, sims[len(ex.keep) :])):
        if len(texts):
            i = int(part.argmax())
            out[name] = {"text": texts[i], "similarity": round(float(part[i]), 3)}
    return out


def explain_brick(vault, brick_id: str) -> dict:
    (brick,) = vault.bricks.select(brick_ids=[brick_id])
    topic = vault.topics.topic(brick.topic_id)
    source = brick.sources[0]
    why, extractor = None, None
    for identity, _, pointers in vault.extractions.answers_for_run(brick.topic_id, source.run_id):
        for p in pointers:
            if isinstance(p, dict) and p.get("verbatim_quote") == brick.content and _norm(str(p.get("json_path"))) == source.json_path:
                why, extractor = p.get("why"), identity
                break
        if extractor:
            break
    vectors = _vectors(vault)
    out = {
        "brick_id": brick.brick_id,
        "topic_id": brick.topic_id,
        "content": brick.content,
        "state": brick.state,
        "source": {"run_id": source.run_id, "json_path": source.json_path, "start": source.start, "end": source.end,
                   "node_type": source.node_type},
        "extractor": extractor,
        "decision": why,
    }
    if extractor in (SELECTOR_VERSION, V5_VERSION) and why:
        from nexus_assets.extract.selector.model import load_selector, load_selector_v5

        out["threshold"] = (load_selector_v5 if extractor == V5_VERSION else load_selector)().threshold
        if extractor == V5_VERSION:
            from nexus_assets.extract.selector.v5 import topic_bar

            out["threshold"] = topic_bar(out["threshold"], topic.min_relevance)
        out["because"] = (
            f"the selector scored it {why.get('score')} (bar {out['threshold']}); relevance to the topic "
            f"{why.get('relevance')}, its message's best {why.get('message_relevance')}, the conversation's "
            f"{why.get('conversation_relevance')}"
        )
    elif extractor in (EXTRACTOR_VERSION, TAUGHT_VERSION) or (extractor and not why):
        rel = relevance_scores([brick.content], topic, vectors)[0] if topic.min_relevance > 0 else None
        out["because"] = (
            f"{extractor} kept it: a statement holding a required keyword, relevance {rel} to the topic "
            f"(bar {topic.min_relevance})"
        )
        out["decision"] = {"keep": True, "relevance": rel}
    elif extractor is None:
        out["because"] = "no stored extractor answer names this text (an LLM pointer, or an answer since replaced)"
    else:
        out["because"] = f"{extractor} pointed at it"
    out |= nearest_examples(topic, brick.content, vectors)
    if extractor == TAUGHT_VERSION and (taught := fit_taught(topic.examples, vectors)) is not None:
        # Kept although the examples were fitted: they moved it by this much, and these most.
        out["taught"] = shift_record(taught.shifts([brick.content], vectors)[0], topic.examples, taught.bar)
    return out


def explain_run(vault, run_id: str, *, node: str | None = None, topics: list[str] | None = None) -> dict:
    from nexus_assets.extract.backends import SelectorExtractor, SelectorV5Extractor
    from nexus_assets.extract.step import admitted
    from nexus_assets.core.models import COMPILED_STATES
    from nexus_assets.vault.records import RunVersion

    latest = vault.runs.latest_versions([run_id])
    if run_id not in latest:
        raise ExplainError(f"no run {run_id!r} in the vault; list runs with `nexus bricks TOPIC` or the trace viewer")
    rv = RunVersion(run_id, latest[run_id])
    run = vault.runs.load_run_nodes([rv])[rv]
    wanted = _norm(node) if node else None
    if wanted is not None and wanted not in {n.path for n in run.nodes}:
        raise ExplainError(f"run {run_id} has no text node {node!r}")
    chosen = [t for t in vault.topics.all() if (topics and t.topic_id in topics) or (not topics and t.state in COMPILED_STATES)]
    if topics:
        missing = set(topics) - {t.topic_id for t in chosen}
        if missing:
            raise ExplainError(f"unknown topic {sorted(missing)[0]!r}")
    vectors = _vectors(vault)
    selectors = {SELECTOR_VERSION: SelectorExtractor, V5_VERSION: SelectorV5Extractor}
    out = {"run_id": run_id, "version_id": rv.version_id, "node": wanted, "topics": []}
    for topic in chosen:
        entry = {"topic_id": topic.topic_id, "extractor": None, "conversation_relevance": None, "sentences": [], "nodes_out_of_scope": []}
        answers = vault.extractions.answers_for_run(topic.topic_id, run_id)
        entry["extractor"] = answers[0][0] if answers else None
        kept = {(_norm(str(p.get("json_path"))), p.get("verbatim_quote")) for _, v, ps in answers if v == rv.version_id for p in ps if isinstance(p, dict)}
        if not admitted(vault, topic, [rv]):
            entry["scope"] = "the topic's sources do not admit this run"
            out["topics"].append(entry)
            continue
        scope = Scope.of(topic.extraction_policy, topic)
        for n in run.nodes:
            if wanted is not None and n.path != wanted:
                continue
            why = scope.excludes_node(n) or scope.excludes_text(node_text(run, n))
            if why:
                entry["nodes_out_of_scope"].append({"json_path": n.path, "node_type": n.node_type, "reason": f"out of scope: {why}"})
        if entry["extractor"] in (EXTRACTOR_VERSION, TAUGHT_VERSION):
            entry["sentences"] = _explain_v3(topic, run, wanted, kept, vectors)
            if entry["extractor"] == TAUGHT_VERSION:
                _explain_taught(topic, entry["sentences"], vectors)
        else:
            selector = selectors.get(entry["extractor"], SelectorExtractor)(vectors, vault.runs.run_names)
            for reading in selector.read(topic, [run]):
                entry["conversation_relevance"] = reading.conversation_relevance
                for c in reading.candidates:
                    if wanted is not None and c.json_path != wanted:
                        continue
                    from nexus_assets.extract.selector.select import why as why_of

                    entry["sentences"].append({"json_path": c.json_path, "start": c.start, "end": c.end, "text": c.text,
                                               "node_type": c.node_type, **why_of(reading, c),
                                               "stored_as_kept": (c.json_path, c.text) in kept})
        out["topics"].append(entry)
    return out


def _explain_v3(topic: Topic, run, wanted, kept, vectors) -> list[dict]:
    from nexus_assets.extract.embedded import is_statement
    from nexus_assets.ingest.scope import in_scope_nodes
    from nexus_assets.core.sentences import sentence_units

    pattern = topic.keyword_pattern()
    rows = []
    for n, text in in_scope_nodes(topic.extraction_policy, run, topic):
        if wanted is not None and n.path != wanted:
            continue
        for start, end, kind in sentence_units(text):
            s = text[start:end]
            if pattern is not None and not pattern.search(s):
                reason = "no required keyword in the sentence"
            elif not is_statement(s, kind):
                reason = "form: not a statement (heading, question, fragment, code, chatter…)"
            else:
                reason = None
            rows.append({"json_path": n.path, "start": start, "end": end, "text": s, "node_type": n.node_type,
                         "keep": (n.path, s) in kept, "reason": reason})
    todo = [r for r in rows if r["reason"] is None and not r["keep"]]
    if todo and topic.min_relevance > 0:
        for r, rel in zip(todo, relevance_scores([r["text"] for r in todo], topic, vectors)):
            r["relevance"] = rel
            r["reason"] = f"relevance {rel:.3f} under the topic's min_relevance {topic.min_relevance}" if rel < topic.min_relevance else None
    return rows


def _explain_taught(topic: Topic, rows: list[dict], vectors) -> None:
    """v6: the assistant's narration, and each sentence v3 would keep with how far the topic's
    fitted examples moved it and which moved it most; one they pulled under their bar has that as
    its reason."""
    from nexus_assets.extract.examples import example_verdicts
    from nexus_assets.extract.selector.features import is_narration

    for r in rows:
        if r["reason"] is None and not r["keep"] and r["node_type"] == "assistant_message" and is_narration(r["text"]):
            r["reason"] = "form: the assistant narrating its work (never a note)"
    taught = fit_taught(topic.examples, vectors)
    todo = [r for r in rows if r["reason"] is None]
    if taught is None or not todo:
        return
    twins = example_verdicts([r["text"] for r in todo], topic.examples, vectors)
    for r, twin, shift in zip(todo, twins, taught.shifts([r["text"] for r in todo], vectors)):
        r["taught"] = shift_record(shift, topic.examples, taught.bar)
        if not r["keep"] and twin != "keep" and shift.value < taught.bar:
            first = shift.by[0] if shift.by else None
            most = f"; most by the {first[0]} example {r['taught']['moved_by'][0]['text'][:60]!r} ({first[2]:+.3f})" if first else ""
            r["reason"] = f"taught: the topic's examples move it {shift.value:+.3f}, under their bar {taught.bar:+.3f}{most}"
