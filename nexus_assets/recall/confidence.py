"""A recall result's confidence (docs/recall.md): a documented mapping of the final ranking score,
calibrated so that results for a question the vault cannot answer score low and `ask` answers only
from results at or above 0.5 (`services/relevance.py`).

Results are listed by that score, best first, and each mapping never decreases as the score grows,
so the confidence never rises down the list. Every result of one recall was ranked by one tier:

- `heuristic`: its score (in [0, 1], `rerank.py`) through the logistic function centred at
  HEURISTIC_CENTER with width HEURISTIC_WIDTH, fitted on related and unrelated questions
  (benchmarks/bench_ask_refusal.py): the score of a question nothing answers stays below the centre;
- `llm`: the model is asked for a score from 0 to 1 per passage; clipped to [0, 1];
- `cross-encoder`: its score is a logit; the logistic function maps it into (0, 1).

Anything else (a future tier) is clipped to [0, 1]. Rounded to 6 places like the scores.
"""

from __future__ import annotations

import math

HEURISTIC_CENTER = 0.55
HEURISTIC_WIDTH = 0.03


def _logistic(x: float) -> float:
    return 0.5 * (1.0 + math.tanh(x / 2.0))  # without overflow for large |x|


def confidence(score: float, reranker_used: str) -> float:
    if reranker_used == "cross-encoder":
        value = _logistic(score)
    elif reranker_used == "heuristic":
        value = _logistic((score - HEURISTIC_CENTER) / HEURISTIC_WIDTH)
    else:
        value = score
    if math.isnan(value):
        return 0.0
    return round(min(1.0, max(0.0, value)), 6)
