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


def blended(texts: Sequence[str], speakers: Sequence[str | None], message, previous):
    """Unit vectors (n x 256) of each passage (with its speaker) blended with its message's (with
    its speaker), the previous message's and its neighbours' in its message. `message[i]` numbers
    passage i's message (a message's passages are consecutive); `previous[m]` is the message
    before message m, or -1.

    Each passage is tokenised once: a message's vector is the sum of its passages' word-piece sums
    (`static_embedder.token_sums`: the same as embedding the passages joined), so a 30 MB message
    costs its sentences, not its sentences times its length."""
    import numpy as np
    from scipy.sparse import csr_matrix

    from nexus_assets.embedding.static_embedder import token_sums, unit

    n = len(texts)
    message = np.asarray(message, dtype=np.int64)
    previous = np.asarray(previous, dtype=np.int64)
    sums = token_sums(list(texts))
    names = sorted({s for s in speakers if s})
    who = {s: i + 1 for i, s in enumerate(names)}
    prefix = np.zeros((len(names) + 1, sums.shape[1]), np.float32)
    prefix[1:] = token_sums([f"{s}:" for s in names])  # said(speaker, text) = "speaker: text"
    speaker = np.fromiter((who.get(s, 0) for s in speakers), np.int64, n)
    whole = csr_matrix((np.ones(n, np.float32), (message, np.arange(n))), shape=(int(message.max()) + 1 if n else 0, n)) @ sums
    out = np.empty_like(sums)
    # Blended a block of rows at a time: what is held beside the sums is one block's parts.
    for a in range(0, n, BLOCK):
        b = min(n, a + BLOCK)
        rows = np.arange(a, b)
        spoken = prefix[speaker[a:b]]
        m = message[a:b]
        near = np.zeros((b - a, sums.shape[1]), np.float32)
        left = rows > 0
        left[left] = message[rows[left] - 1] == m[left]
        near[left] += sums[rows[left] - 1]
        right = rows < n - 1
        right[right] = message[rows[right] + 1] == m[right]
        near[right] += sums[rows[right] + 1]
        before = np.zeros_like(near)
        has = previous[m] >= 0
        before[has] = whole[previous[m][has]]
        v = unit(sums[a:b] + spoken)
        v += MESSAGE_WEIGHT * unit(whole[m] + spoken)
        v += PREVIOUS_WEIGHT * unit(before)
        v += NEIGHBOUR_WEIGHT * unit(near)
        out[a:b] = unit(v)
    return out


BLOCK = 8_192


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
