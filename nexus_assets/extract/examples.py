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


# Teaching that generalises (DESIGN §5): a topic's keep and drop examples fitted as one scorer over
# what a sentence says (its MiniLM vector) and how it is written (the selector's form features), so
# dropping ten bricks of narration moves the topic's *other* narration too, not only near twins.
# A ridge-regularised logistic fit taken as one Newton step from "no change" (the shipped selector
# is the prior): its dual form makes the shift of any sentence an exact sum over the examples, so
# `nexus explain` can say which example moved it and by how much. Each class weighs half whatever
# its count, and features are centred on the midpoint of the two classes' means, so a sentence as
# like the keeps as the drops is not moved. Everything depends on the topic's examples only (never
# on which runs are read beside them), is computed in float64 in a fixed order and is rounded
# before it decides: the same topic file gives the same bricks in a fresh vault.
TAUGHT_RIDGE = 0.05
# A sentence the selector would keep is dropped when the examples pull it below their bar: at most
# -TAUGHT_MARGIN (a logit), and no higher than the lowest a keep example scores when left out of the
# fit; one the selector would not keep is never promoted (precision first: a keep example's near
# twins are still kept through EXAMPLE_BAR).
TAUGHT_MARGIN = 0.0
# How much the form features weigh beside the vector (both then have unit scale on average).
FORM_WEIGHT = 1.0


@dataclass(frozen=True)
class Shift:
    """How far a topic's examples move one sentence (a logit, rounded; < 0 toward drop) and the
    examples that moved it most: (side, index into that side's list, rounded share)."""

    value: float
    by: tuple[tuple[Verdict, int, float], ...]


@dataclass(frozen=True)
class Taught:
    """A topic's examples fitted as a scorer (`fit_taught`); `shifts` scores sentences."""

    sides: tuple[tuple[Verdict, int], ...]  # per fitted example: its side and index in that side's list
    rows: "object"  # (n, d) the examples' centred features
    centre: "object"  # (d,)
    alpha: "object"  # (n,) dual weights
    bar: float = 0.0  # a sentence whose shift is under it is dropped (`fit_taught` says how it is set)

    def shifts(self, texts: Sequence[str], vectors: Vectors, *, top: int = 3) -> list[Shift]:
        import numpy as np

        if not texts:
            return []
        z = taught_features(texts, vectors) - self.centre
        parts = (z @ self.rows.T) * self.alpha  # (m, n): each example's share of each sentence's shift
        out = []
        for row in parts:
            order = sorted(range(len(row)), key=lambda i: (-abs(round(float(row[i]), SCORE_DECIMALS)), i))[:top]
            out.append(Shift(
                round(float(np.sum(row)), SCORE_DECIMALS),
                tuple((self.sides[i][0], self.sides[i][1], round(float(row[i]), SCORE_DECIMALS)) for i in order),
            ))
        return out


def taught_features(texts: Sequence[str], vectors: Vectors):
    """Each text's vector beside its standardised form features (the shipped selector's scale)."""
    import numpy as np

    from nexus_assets.extract.selector.features import FORM, form_features

    mean, scale = _form_scale()
    v = np.asarray(vectors(list(texts)), dtype="float64")
    f = (np.asarray([form_features(t) for t in texts], dtype="float64") - mean) / scale
    return np.concatenate([v, f * (FORM_WEIGHT / np.sqrt(len(FORM)))], axis=1)


def _form_scale():
    """The form features' mean and spread as the shipped selector standardises them."""
    from nexus_assets.extract.selector.features import FORM, SCALARS
    from nexus_assets.extract.selector.model import load_selector

    selector = load_selector()
    at = [SCALARS.index(name) for name in FORM]
    return selector.mean[at], selector.scale[at]


def fit_taught(examples: Examples | None, vectors: Vectors | None) -> Taught | None:
    """The examples as one scorer; None without vectors or unless the topic has both keep and drop
    examples (one side alone says what is unwanted, not what is wanted instead)."""
    if vectors is None or examples is None or not examples.keep or not examples.drop:
        return None
    import numpy as np

    sides = tuple([("keep", i) for i in range(len(examples.keep))] + [("drop", i) for i in range(len(examples.drop))])
    z = taught_features([*examples.keep, *examples.drop], vectors)
    y = np.asarray([1.0 if s == "keep" else 0.0 for s, _ in sides])
    centre, rows, alpha = _fit(z, y)
    # The bar: no lower than any keep example scores when the fit is made without it (leave one
    # out), so a sentence is dropped only when the examples pull it further than they pull a
    # sentence the person kept; and never above -TAUGHT_MARGIN.
    bar = -TAUGHT_MARGIN
    if len(examples.keep) > 1:
        for i in range(len(examples.keep)):
            rest = np.arange(len(y)) != i
            c, r, a = _fit(z[rest], y[rest])
            bar = min(bar, round(float(((z[i] - c) @ r.T) @ a), SCORE_DECIMALS))
    return Taught(sides, rows, centre, alpha, bar)


def _fit(z, y):
    import numpy as np

    keep_rows, drop_rows = z[y == 1.0], z[y == 0.0]
    centre = (keep_rows.mean(axis=0) + drop_rows.mean(axis=0)) / 2
    rows = z - centre
    w = np.where(y == 1.0, 0.5 / len(keep_rows), 0.5 / len(drop_rows))
    # One Newton step from theta = 0 (every p = 1/2): theta = H^-1 g, g = sum w (y - 1/2) z,
    # H = 1/4 sum w z z^T + ridge I; in dual form theta = rows^T alpha.
    gram = rows @ rows.T
    alpha = np.linalg.solve(0.25 * w[:, None] * gram + TAUGHT_RIDGE * np.eye(len(y)), w * (y - 0.5))
    return centre, rows, alpha


def taught_verdicts(texts: Sequence[str], taught: Taught | None, vectors: Vectors | None) -> list[Verdict | None]:
    """"drop" for each text the fitted examples pull under their bar, else None."""
    if taught is None or vectors is None or not texts:
        return [None] * len(texts)
    return ["drop" if s.value < taught.bar else None for s in taught.shifts(texts, vectors, top=0)]


def shift_record(shift: Shift, examples: Examples, bar: float) -> dict:
    """A shift as `nexus explain` shows it: the total, the bar under which it drops, and the
    examples that moved the sentence most."""
    lists = {"keep": list(examples.keep), "drop": list(examples.drop)}
    return {
        "shift": shift.value,
        "bar": bar,
        "moved_by": [{"example": side, "text": lists[side][i], "by": by} for side, i, by in shift.by],
    }
