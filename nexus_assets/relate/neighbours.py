"""Exact nearest related bricks over unit vectors: blocked inner products, no approximate index.

Pure computation (numpy; no I/O). An approximate index (HNSW, IVF) answers after the order its
vectors went in, so two run orders could disagree; the exact product cannot. Candidates are taken
in float32 a little under the threshold, then scored again in float64 (exact products of float32
numbers, summed in a fixed order) and rounded, so the verdict never depends on the block a pair
was computed in.

Memory stays bounded on a topic of near-repeats: each brick's candidates are cut to its
`CANDIDATES` nearest as blocks come in. Its `MAX_RELATED` are chosen among those, so only a brick
with more than `CANDIDATES - MAX_RELATED` near-containments among its nearest could miss one.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from nexus_assets.relate.rules import MAX_RELATED, SIMILARITY_DECIMALS

# float32 products of unit vectors are off by ~1e-6; a pair this far under the threshold cannot reach it.
MARGIN = 1e-3
ROWS = 2048  # query rows per block
COLUMNS = 16384  # vectors per block: a block's scores are 128 MB of float32
CANDIDATES = 4 * MAX_RELATED  # per brick, kept while searching
_PRUNE_AT = 4_000_000  # candidate entries held before they are cut to CANDIDATES a brick


def exact_similarities(vectors: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Rounded float64 similarity of each pair (left[k], right[k])."""
    out = np.zeros(len(left))
    for k in range(0, len(left), 262_144):  # bounded gathers
        a = vectors[left[k : k + 262_144]].astype(np.float64)
        b = vectors[right[k : k + 262_144]].astype(np.float64)
        out[k : k + 262_144] = np.einsum("ij,ij->i", a, b)
    return np.round(out, SIMILARITY_DECIMALS)


def _top_per_row(i: np.ndarray, j: np.ndarray, s: np.ndarray, keep: int):
    """Each row's `keep` best entries (highest score, ties by partner index)."""
    if not len(i):
        return i, j, s
    order = np.lexsort((j, -s, i))
    i, j, s = i[order], j[order], s[order]
    starts = np.flatnonzero(np.r_[True, i[1:] != i[:-1]])
    rank = np.arange(len(i)) - np.repeat(starts, np.diff(np.r_[starts, len(i)]))
    kept = rank < keep
    return i[kept], j[kept], s[kept]


def candidate_pairs(
    vectors: np.ndarray, rows: Iterable[int] | None, threshold: float
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """Pairs (i, j), i != j, i among `rows` (None: all; each unordered pair is computed once and
    given both ways), whose rounded similarity is at least `threshold`, cut to each row's
    CANDIDATES nearest: ((i, j, similarity), every j that was within the threshold of a row)."""
    n = len(vectors)
    floor = np.float32(threshold - MARGIN)
    everything = rows is None
    queries = np.arange(n) if everything else np.asarray(sorted(rows), dtype=np.int64)
    held: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    partners: list[np.ndarray] = []
    count = 0
    for r0 in range(0, len(queries), ROWS):
        q = queries[r0 : r0 + ROWS]
        block = vectors[q]
        # All rows against all: only columns from this block's first row on (the rest were seen).
        first = int(q[0]) if everything else 0
        for c0 in range((first // COLUMNS) * COLUMNS if everything else 0, n, COLUMNS):
            scores = block @ vectors[c0 : c0 + COLUMNS].T
            qi, cj = np.nonzero(scores >= floor)
            s = scores[qi, cj]
            i, j = q[qi], cj + c0
            keep = (j > i) if everything else (j != i)
            i, j, s = i[keep], j[keep], s[keep]
            if not len(i):
                continue
            if everything:
                i, j, s = np.concatenate([i, j]), np.concatenate([j, i]), np.concatenate([s, s])
            else:
                partners.append(np.unique(j))
            held.append((i, j, s))
            count += len(i)
            if count > _PRUNE_AT:
                held = [_top_per_row(*(np.concatenate(x) for x in zip(*held)), CANDIDATES)]
                count = len(held[0][0])
    if held:
        i, j, _ = _top_per_row(*(np.concatenate(x) for x in zip(*held)), CANDIDATES)
    else:
        i = j = np.zeros(0, np.int64)
    sim = exact_similarities(vectors, i, j)
    kept = sim >= round(threshold, SIMILARITY_DECIMALS)
    near = np.unique(np.concatenate(partners)) if partners else np.zeros(0, np.int64)
    return (i[kept], j[kept], sim[kept]), near


def nearest_lists(
    rows: Iterable[int],
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
    *,
    excluded: Callable[[int, int], bool] = lambda i, j: False,
    limit: int = MAX_RELATED,
) -> dict[int, list[tuple[int, float]]]:
    """Each row's `limit` nearest partners among `pairs` (highest rounded similarity first, ties by
    the partner's index, which is brick id order), skipping pairs `excluded` says are no relation."""
    i, j, sim = pairs
    wanted = np.fromiter(rows, dtype=np.int64)
    out: dict[int, list[tuple[int, float]]] = {int(r): [] for r in wanted}
    mask = np.isin(i, wanted)
    i, j, sim = i[mask], j[mask], sim[mask]
    order = np.lexsort((j, -sim, i))
    i, j, sim = i[order].tolist(), j[order].tolist(), sim[order].tolist()
    for row, col, s in zip(i, j, sim):
        kept = out[row]
        if len(kept) < limit and not excluded(row, col):
            kept.append((col, s))
    return out
