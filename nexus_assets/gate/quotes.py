"""First offsets of many quotes in one long node, in one pass over the node.

The gate uses `str.find` semantics (docs/invariants.md: the quote's first occurrence). Calling `find` once
per quote costs the node's length per quote, so a long message with thousands of sentences takes
hours. Here every window of K characters of the node is hashed (vectorised, block by block) and
only positions whose window equals some quote's first K characters are compared with that quote,
in node order, so each quote's first match is its `str.find` result.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

_K = 16
_BLOCK = 1 << 20
_BASE = np.uint64(1_000_003)
# Below this, plain `find` per quote is cheaper than hashing the node.
_SMALL_NODE = 100_000


def _codes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)


def _window_hashes(codes: np.ndarray, count: int) -> np.ndarray:
    h = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(_K):
            h = h * _BASE + codes[j : j + count]
    return h


def _hash(prefix: str) -> int:
    """The same hash as `_window_hashes`, for one short string."""
    h = 0
    for ch in map(ord, prefix):
        h = (h * 1_000_003 + ch) & 0xFFFFFFFFFFFFFFFF
    return h


def first_offsets(node: str, quotes: Iterable[str]) -> dict[str, int]:
    """{quote: node.find(quote)} for every distinct quote, with the node read once."""
    wanted = set(quotes)
    result: dict[str, int] = {}
    if len(node) < _SMALL_NODE or len(wanted) < 4:
        return {q: node.find(q) for q in wanted}
    # prefix hash -> quote length -> quotes still unmatched: at a candidate position one slice
    # per distinct length settles every quote of that prefix, however many share it.
    long_quotes: dict[int, dict[int, set[str]]] = {}
    for q in wanted:
        if len(q) < _K:
            result[q] = node.find(q)
        else:
            long_quotes.setdefault(_hash(q[:_K]), {}).setdefault(len(q), set()).add(q)
    if not long_quotes:
        return result
    keys = np.fromiter(long_quotes, dtype=np.uint64, count=len(long_quotes))
    windows = len(node) - _K + 1
    for start in range(0, max(windows, 0), _BLOCK):
        count = min(_BLOCK, windows - start)
        hashes = _window_hashes(_codes(node[start : start + count + _K - 1]), count)
        for offset in np.flatnonzero(np.isin(hashes, keys)):
            key = int(hashes[offset])
            group = long_quotes.get(key)
            if not group:
                continue
            position = start + int(offset)
            for length in list(group):
                quotes = group[length]
                candidate = node[position : position + length]
                if candidate in quotes:
                    result[candidate] = position
                    quotes.discard(candidate)
                    if not quotes:
                        del group[length]
            if not group:
                del long_quotes[key]
        if not long_quotes:
            break
    for group in long_quotes.values():
        for quotes in group.values():
            for q in quotes:
                result[q] = -1
    return result
