"""Which recalled results an answer may rest on (`relevant`): those whose confidence is at least
ANSWER_CONFIDENCE, the same calibrated score recall reports (docs/recall.md), so a result recall
ranks first with a high confidence is one `ask` may answer with, and a question the vault cannot
answer is refused. `shares_a_word` and `content_words` are the lexical evidence that confidence
reads (`recall/confidence.py`)."""

from __future__ import annotations

from nexus_assets.recall.evidence import STOPWORDS, content_words, shares_a_word  # noqa: F401 (imported from here)

# The bar on a result's confidence for an answer to rest on it; confidence is calibrated so that
# this is where related and unrelated questions part (benchmarks/bench_ask_refusal.py).
ANSWER_CONFIDENCE = 0.5


def relevant(question: str, result: dict) -> bool:
    """Whether a recalled result is relevant enough for an answer to rest on it (docs/recall.md)."""
    return result["confidence"] >= ANSWER_CONFIDENCE
