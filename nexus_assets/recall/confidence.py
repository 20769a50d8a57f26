"""A recall result's confidence (docs/recall.md): a documented mapping of the final ranking score.

Results are listed by that score, best first, and the mapping never decreases as the score grows,
so the confidence never rises down the list. Every result of one recall was ranked by one tier:

- `heuristic`: its score is a weighted sum in [0, 1] (similarity, word overlap, exact phrase,
  recency, state; weights summing to 1), taken as it is, clipped to [0, 1];
- `llm`: the model is asked for a score from 0 to 1 per passage; clipped to [0, 1];
- `cross-encoder`: its score is a logit; the logistic function maps it into (0, 1).

Anything else (a future tier) is clipped to [0, 1]. Rounded to 6 places like the scores.
"""

from __future__ import annotations

import math


def confidence(score: float, reranker_used: str) -> float:
    if reranker_used == "cross-encoder":
        value = 0.5 * (1.0 + math.tanh(score / 2.0))  # the logistic function, without overflow for large |score|
    else:
        value = score
    if math.isnan(value):
        return 0.0
    return round(min(1.0, max(0.0, value)), 6)
