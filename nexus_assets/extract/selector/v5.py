"""embedded-v5: embedded-v4's reading (`select.py`: candidates, form rules, conversation scope) with
what the sentence's vector says about it within its own conversation, judged by its own weights
(`weights_v5.npz`, trained by benchmarks/selection/train_selector.py --version embedded-v5).

The features added to v4's 50 scalars (`EXTRA`) are read from vectors the reading already holds
(each scored candidate's, the conversation's) and from the other candidates of the *same run* only,
so a run's answer never depends on which runs are extracted beside it:
- a restatement: the best cosine with a sentence of another message earlier in the run (the labelling
  rules keep a fact once, at its source) and later in it (a plan amended later is not kept);
- how central the sentence is to the run (cosine with the mean of its candidates, and with the
  conversation's own text), and its relevance against the run's others (z-score, gap to the best);
- its neighbours' relevance in its message, how many candidates the run has, and its best cosine
  with another sentence of its own message.
Every value is rounded to `SCORE_DECIMALS` before it enters a row (docs/invariants.md inv. 3).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from nexus_assets.extract.selector import V5_VERSION  # noqa: F401 (the version these features serve)
from nexus_assets.extract.selector.features import SCALARS, SCORE_DECIMALS
from nexus_assets.extract.selector.select import RunReading, _rounded, conversation_text

WEIGHTS_V5 = Path(__file__).with_name("weights_v5.npz")
EXTRA = (
    "restated_before", "restated_after", "restated_before_closely", "centrality", "relevance_z",
    "relevance_below_best", "conversation_similarity", "previous_relevance", "next_relevance",
    "candidates_log", "same_message_similarity",
)
SCALARS_V5 = (*SCALARS, *EXTRA)
CLOSELY = 0.9  # a cosine this high with an earlier sentence is the same statement again


def run_extras(reading: RunReading, vecs: Mapping[int, object], conversation) -> dict[int, list[float]]:
    """`EXTRA` for every candidate of one run that has a context (was scored), by id(candidate)."""
    import numpy as np

    scored = [c for c in reading.candidates if c.context is not None]
    if not scored:
        return {}
    v = np.stack([np.asarray(vecs[id(c)], dtype="float64") for c in scored])
    sim = v @ v.T
    n = len(scored)
    nodes = np.asarray([c.json_path for c in scored])
    rel = np.asarray([c.context.relevance for c in scored], dtype="float64")
    mean, spread, best = rel.mean(), rel.std() + 1e-3, rel.max()
    centre = v.mean(axis=0)
    centre /= np.linalg.norm(centre) or 1.0
    central = v @ centre
    conv = v @ np.asarray(conversation, dtype="float64") if conversation is not None else np.zeros(n)
    order = np.arange(n)
    out = {}
    for i, c in enumerate(scored):
        other = nodes != nodes[i]
        before, after = other & (order < i), other & (order > i)
        same = ~other
        same[i] = False
        out[id(c)] = _rounded([
            sim[i, before].max() if before.any() else 0.0,
            sim[i, after].max() if after.any() else 0.0,
            float(before.any() and sim[i, before].max() > CLOSELY),
            central[i],
            (rel[i] - mean) / spread,
            rel[i] - best,
            conv[i],
            rel[i - 1] if i > 0 and nodes[i - 1] == nodes[i] else 0.0,
            rel[i + 1] if i + 1 < n and nodes[i + 1] == nodes[i] else 0.0,
            math.log1p(n),
            sim[i, same].max() if same.any() else 0.0,
        ])
    return out


def conversation_vectors(runs: Sequence, readings: Sequence[RunReading], titles: Mapping[str, str | None], vectors) -> dict[str, object]:
    """The conversation text's vector of every run that has a scored candidate (the text `read_runs`
    already embedded for the conversation scope: a vault's `StoredVectors` hands it back from memory)."""
    from nexus_assets.extract.selector.select import _node_texts

    live = {r.run_id for r in readings if any(c.context is not None for c in r.candidates)}
    chosen = [run for run in runs if run.run_id in live]
    if not chosen:
        return {}
    texts = [conversation_text(run, titles.get(run.run_id), _node_texts(run)) for run in chosen]
    return {run.run_id: row for run, row in zip(chosen, vectors(texts))}


def feature_rows_v5(readings: Sequence[RunReading], vecs: Mapping[int, object], conversations: Mapping[str, object], *, pending_only: bool = True):
    """(candidates, vectors (n, 384), scalars (n, len(SCALARS_V5))) of the candidates left to the model
    (`pending_only`) or of every scored one (training)."""
    import numpy as np

    from nexus_assets.extract.selector.features import scalar_features

    chosen, rows = [], []
    for r in readings:
        extras = run_extras(r, vecs, conversations.get(r.run_id))
        for c in r.candidates:
            if c.context is None or (pending_only and c.reason is not None):
                continue
            chosen.append(c)
            rows.append([*scalar_features(c.text, c.context), *extras[id(c)]])
    if not chosen:
        return [], np.zeros((0, 384), dtype="float32"), np.zeros((0, len(SCALARS_V5)))
    v = np.stack([vecs[id(c)] for c in chosen]).astype("float32")
    return chosen, v, np.asarray(rows, dtype="float64")


def topic_bar(threshold: float, min_relevance: float) -> float:
    """The model's bar for a topic: its trained threshold, moved by as much as the topic moved its own
    `min_relevance` from the default (a topic whose conversations are all on topic lowers it, as
    `data/topics/` does; 0 keeps every sentence the form rules and the conversation scope leave)."""
    from nexus_assets.core.models import DEFAULT_MIN_RELEVANCE

    return round(min(max(threshold + min_relevance - DEFAULT_MIN_RELEVANCE, 0.0), 0.99), SCORE_DECIMALS)


def decide_v5(readings: Sequence[RunReading], vecs: Mapping[int, object], conversations: Mapping[str, object], selector,
              min_relevance: float) -> None:
    """embedded-v5's step 4: score every candidate the earlier steps left to the model, in place."""
    pending, v, s = feature_rows_v5(readings, vecs, conversations)
    if not pending:
        return
    bar = topic_bar(selector.threshold, min_relevance)
    for c, score in zip(pending, _rounded(selector.scores(v, s))):
        c.score = score
        c.keep = score >= bar
        if not c.keep:
            c.reason = f"model: score {score:.3f} under {bar:.3f}"
