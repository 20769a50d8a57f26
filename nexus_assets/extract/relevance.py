"""Relevance of a candidate statement to a topic (issue 40): pure, given vectors.

A keyword says a sentence *mentions* something; relevance says it is *about* the topic. Each
candidate is embedded once (keyed by the fingerprint of its text, the same key recall uses, so the
kept ones' vectors are the ones recall needs anyway) and compared with the topic's own texts: its
display name with its scope description, and its keywords. The score is the best cosine, rounded
to `SCORE_DECIMALS` before it is compared with the topic's `min_relevance`, so float noise between
two runs of the model cannot flip a decision; and the decision itself is stored as the extractor's
answer (docs/invariants.md §3), replayed by every later sync.
"""

from __future__ import annotations

from typing import Callable, Sequence

from nexus_assets.core.models import Topic

SCORE_DECIMALS = 3

# Texts → unit-length vectors (n, d), one row per text, in order.
Vectors = Callable[[Sequence[str]], "object"]


def topic_texts(topic: Topic) -> list[str]:
    """What the topic is about, as texts to compare a candidate with."""
    policy = topic.extraction_policy
    texts = [f"{topic.display_name}. {policy.scope_description}".strip()]
    keywords = [k.strip() for k in policy.required_keywords or () if k.strip()]
    if keywords:
        texts.append(f"{topic.display_name}: {', '.join(keywords)}")
    return texts


def relevance_scores(candidates: Sequence[str], topic: Topic, vectors: Vectors) -> list[float]:
    """Each candidate's relevance to `topic`: its best cosine with `topic_texts`, rounded."""
    import numpy as np

    if not candidates:
        return []
    queries = topic_texts(topic)
    matrix = np.asarray(vectors([*queries, *candidates]), dtype="float32")
    query, rows = matrix[: len(queries)], matrix[len(queries) :]
    best = (rows @ query.T).max(axis=1)
    return [round(float(s), SCORE_DECIMALS) for s in best]


def relevant(candidates: Sequence[str], topic: Topic, vectors: Vectors) -> list[bool]:
    """Whether each candidate is relevant enough for the topic to keep."""
    threshold = topic.min_relevance
    return [score >= threshold for score in relevance_scores(candidates, topic, vectors)]
