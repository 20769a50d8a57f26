"""A topic's examples (docs/inputs.md `examples`) as a selector reads them: pure, given vectors.

A person's `keep` and `drop` examples are verbatim sentences. A candidate sentence is judged
against them before anything else the selector weighs:
- its normalised text (`core.fingerprint.normalize`) equals an example's: that example decides;
- else its best cosine with the drop examples and with the keep examples (the shipped MiniLM
  vectors, rounded to `SCORE_DECIMALS` like relevance, so float noise never flips a decision):
  at or above `EXAMPLE_BAR` the nearer side decides (a tie goes to drop: a person said "not this");
- else the examples say nothing and the selector's own rule applies.
`EXAMPLE_BAR` is 0.85: on MiniLM, a sentence and its paraphrase or its templated twin ("File created
successfully at: src/a.ts" / "…: src/b.ts") score above it, two different statements on one topic
below it. The trained selector (`embedded-v4`) may read `nearest_examples` as features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

from nexus_assets.core.fingerprint import normalize
from nexus_assets.core.models import Examples
from nexus_assets.extract.relevance import SCORE_DECIMALS, Vectors

EXAMPLE_BAR = 0.85

Verdict = Literal["keep", "drop"]


@dataclass(frozen=True)
class Nearest:
    """A candidate's nearest keep and drop examples (index into the topic's lists, rounded cosine;
    None where the topic has no such example), and what the examples decide (None: nothing)."""

    keep: tuple[int, float] | None
    drop: tuple[int, float] | None
    verdict: Verdict | None


def has_examples(examples: Examples | None) -> bool:
    return examples is not None and bool(examples.keep or examples.drop)


def nearest_examples(candidates: Sequence[str], examples: Examples | None, vectors: Vectors | None) -> list[Nearest]:
    """Each candidate's nearest examples and the examples' verdict. Without `vectors` only an
    exact (normalised) match decides."""
    if not candidates:
        return []
    if not has_examples(examples):
        return [Nearest(None, None, None) for _ in candidates]
    keep_texts, drop_texts = list(examples.keep), list(examples.drop)
    exact: dict[str, Verdict] = {normalize(t): "keep" for t in keep_texts}
    exact.update({normalize(t): "drop" for t in drop_texts})  # one text given both ways: drop
    keep_best = drop_best = [None] * len(candidates)
    if vectors is not None:
        keep_best = _best(candidates, keep_texts, vectors)
        drop_best = _best(candidates, drop_texts, vectors)
    out = []
    for text, k, d in zip(candidates, keep_best, drop_best):
        verdict = exact.get(normalize(text)) or _by_score(k, d)
        out.append(Nearest(k, d, verdict))
    return out


def example_verdicts(candidates: Sequence[str], examples: Examples | None, vectors: Vectors | None) -> list[Verdict | None]:
    """What the examples decide for each candidate: "keep", "drop", or None (the selector decides)."""
    return [n.verdict for n in nearest_examples(candidates, examples, vectors)]


def _by_score(keep: tuple[int, float] | None, drop: tuple[int, float] | None) -> Verdict | None:
    ks = keep[1] if keep else -1.0
    ds = drop[1] if drop else -1.0
    if ds >= EXAMPLE_BAR and ds >= ks:
        return "drop"
    if ks >= EXAMPLE_BAR:
        return "keep"
    return None


def _best(candidates: Sequence[str], examples: Sequence[str], vectors: Vectors) -> list[tuple[int, float] | None]:
    if not examples:
        return [None] * len(candidates)
    import numpy as np

    matrix = np.asarray(vectors([*examples, *candidates]), dtype="float32")
    ex, rows = matrix[: len(examples)], matrix[len(examples) :]
    scores = rows @ ex.T
    best = scores.argmax(axis=1)
    return [(int(i), round(float(scores[n, i]), SCORE_DECIMALS)) for n, i in enumerate(best)]
