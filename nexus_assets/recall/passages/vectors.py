"""A passage's dense vector: the static model's (`static_embedder.py`) vector of what was said,
with its speaker, blended with its message's and the message before it (DESIGN §3.1: "what a
person later asks about is often said in the next sentence").

Measured on LoCoMo (1,536 questions, hit@10 of an evidence turn among the top ten sentences of its
conversation, dense alone): the sentence 0.492; with its speaker ("Caroline: …") 0.579; blended
with its whole message 0.594; and with the message before it 0.611 (`benchmarks/bench_locomo.py`).
"""

from __future__ import annotations

from typing import Sequence

MESSAGE_WEIGHT = 0.5
PREVIOUS_WEIGHT = 0.3
NEIGHBOUR_WEIGHT = 0.3  # the passages just before and after it in its message


def said(speaker: str | None, text: str) -> str:
    """What the vector is taken of: who said it, then what they said."""
    return f"{speaker}: {text}" if speaker else text


def blended(sentences: Sequence[str], messages: Sequence[str], previous: Sequence[str], neighbours: Sequence[str] | None = None):
    """Unit vectors (n x 256) of each sentence blended with its message's, the previous one's and
    its neighbours' in its message."""
    import numpy as np

    from nexus_assets.recall.static_embedder import embed_static

    distinct = list(dict.fromkeys([*messages, *previous]))
    where = {t: i for i, t in enumerate(distinct)}
    context = embed_static(distinct)
    v = embed_static(list(sentences))
    v += MESSAGE_WEIGHT * context[[where[m] for m in messages]]
    v += PREVIOUS_WEIGHT * context[[where[p] for p in previous]]
    if neighbours is not None:
        v += NEIGHBOUR_WEIGHT * embed_static(list(neighbours))
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)


# Stored as faiss's 8-bit scalar codes with one fixed range for every component (QT_8bit_uniform,
# set, never trained, so a vector's code never depends on the other vectors): a unit vector's
# components are within ±0.6 on real text (max 0.587 on LoCoMo), and one step of 1.28/255 keeps
# dense hit@10 on LoCoMo within 0.002 of float32. (faiss 1.15's QT_8bit_direct answers zeros from
# 32 dimensions up, so it is not used.)
RANGE_MIN = -0.64
RANGE_WIDTH = 1.28


def quantizer_index(dimensions: int):
    """An empty faiss index of 8-bit codes over the fixed range, ready to add unit vectors to."""
    import faiss

    index = faiss.IndexScalarQuantizer(dimensions, faiss.ScalarQuantizer.QT_8bit_uniform, faiss.METRIC_INNER_PRODUCT)
    trained = faiss.Float32Vector()
    trained.push_back(RANGE_MIN)
    trained.push_back(RANGE_WIDTH)
    index.sq.trained = trained
    index.is_trained = True
    return index
