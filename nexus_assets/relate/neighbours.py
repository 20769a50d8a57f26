"""Exact nearest related bricks over unit vectors: blocked inner products, no approximate index.

Pure computation (numpy; no I/O). An approximate index (HNSW, IVF) answers after the order its
vectors went in, so two run orders could disagree; the exact product cannot. Candidates are taken
in float32 a little under the threshold, then scored again in float64 (exact products of float32
numbers, summed in a fixed order) and rounded, so the verdict never depends on the block a pair
was computed in.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from nexus_assets.relate.rules import MAX_RELATED, SIMILARITY_DECIMALS

# float32 products of unit vectors are off by ~1e-6; a pair this far under the threshold cannot reach it.
MARGIN = 1e-3
ROWS = 2048  # query rows per block
COLUMNS = 16384  # vectors per block: a block's scores are 128 MB of float32


def exact_similarities(vectors: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Rounded float64 similarity of each pair (left[k], right[k])."""
    if not len(left):
        return np.zeros(0)
    a = vectors[left].astype(np.float64)
    b = vectors[right].astype(np.float64)
    return np.round(np.einsum("ij,ij->i", a, b), SIMILARITY_DECIMALS)


def candidate_pairs(vectors: np.ndarray, rows: np.ndarray | None, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair (i, j), i != j, i among `rows` (None: all, and each unordered pair is found once
    and given both ways), whose rounded similarity is at least `threshold`: (i, j, similarity)."""
    n = len(vectors)
    floor = np.float32(threshold - MARGIN)
    found_i, found_j = [], []
    everything = rows is None
    queries = np.arange(n) if everything else np.asarray(rows, dtype=np.int64)
    for r0 in range(0, len(queries), ROWS):
        q = queries[r0 : r0 + ROWS]
        block = vectors[q]
        # All rows against all: only columns from this block's first row on (the rest were seen).
        first = int(q[0]) if everything else 0
        for c0 in range(first, n, COLUMNS):
            scores = block @ vectors[c0 : c0 + COLUMNS].T
            qi, cj = np.nonzero(scores >= floor)
            i, j = q[qi], cj + c0
            keep = (j > i) if everything else (j != i)
            found_i.append(i[keep])
            found_j.append(j[keep])
    i = np.concatenate(found_i) if found_i else np.zeros(0, np.int64)
    j = np.concatenate(found_j) if found_j else np.zeros(0, np.int64)
    sim = exact_similarities(vectors, i, j)
    keep = sim >= round(threshold, SIMILARITY_DECIMALS)
    i, j, sim = i[keep], j[keep], sim[keep]
    if everything:
        i, j, sim = np.concatenate([i, j]), np.concatenate([j, i]), np.concatenate([sim, sim])
    return i, j, sim


def nearest_lists(
    rows: Iterable[int],
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
    *,
    excluded: Callable[[int, int], bool] = lambda i, j: False,
    limit: int = MAX_RELATED,
) -> dict[int, list[tuple[int, float]]]:
    """Each row's `limit` nearest partners among `pairs` (highest similarity first, ties by the
    partner's index, which is brick id order), skipping pairs `excluded` says are no relation."""
    i, j, sim = pairs
    wanted = np.fromiter(rows, dtype=np.int64)
    out: dict[int, list[tuple[int, float]]] = {int(r): [] for r in wanted}
    mask = np.isin(i, wanted)
    i, j, sim = i[mask], j[mask], sim[mask]
    order = np.lexsort((j, -sim, i))
    for k in order:
        row = int(i[k])
        kept = out[row]
        if len(kept) >= limit:
            continue
        col = int(j[k])
        if excluded(row, col):
            continue
        kept.append((col, float(sim[k])))
    return out
