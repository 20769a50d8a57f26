"""Train embedded-v4's selector (nexus_assets/extract/selector/weights.npz) from the labelled corpus.

    python benchmarks/selection/train_selector.py [--corpus DIR] [--data DIR] [--out FILE] [--lopo]

Deterministic: the rows are built as the extractor sees them at run time (`dataset.py`: the real
reader on each raw file, whose sha256 must be one its sources name; the real sentence splitter,
scope, form rules and conversation scope; the shipped embedder), sorted, and fitted by Newton's
method on an L2-regularised logistic regression (no random start, no shuffling). The threshold is
chosen on out-of-fold scores (leave one person out inside the training set), never on the
training fit. `--lopo` also prints the leave-one-person-out figures (`benchmarks/bench_selection.py`
prints them with embedded-v3's beside them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from dataset import CachedVectors, Row, build, matrices  # noqa: E402

from nexus_assets.extract.selector.features import SCALARS  # noqa: E402
from nexus_assets.extract.selector.v5 import SCALARS_V5  # noqa: E402

# The vector's part of the model is off: with it, leave-one-person-out figures were no better and
# thresholds swung between people (CARD.md); 0 leaves its columns out of the fit. math.sqrt(384.0)
# scales a unit vector's coordinates to about unit spread, to try it again on a larger corpus.
VECTOR_SCALE = 0.0
L2 = 30.0
L2_VECTOR = 30.0  # the penalty on the vector's coordinates (the scalars' is L2)
POSITIVE_WEIGHT = 2.0  # keeps are rare (about 1 in 10 candidates): weigh them up
BETA = 0.8  # the threshold maximises F-beta on out-of-fold scores (precision a little ahead)
NAME = "embedded-v4 logistic selector"


def trainable(rows: list[Row]) -> list[Row]:
    """What the model is fitted on: the candidates it judges at run time."""
    return [r for r in rows if r.found and r.reason is None and r.scalars is not None]


# What each selector version is fitted on and written as (`--version`): its row features, their
# names, its weights file and name. embedded-v4's entry reproduces its shipped weights byte for byte.
VERSIONS = {
    "embedded-v4": ("scalars", SCALARS, HERE.parents[1] / "nexus_assets/extract/selector/weights.npz", NAME),
    "embedded-v5": ("scalars_v5", SCALARS_V5, HERE.parents[1] / "nexus_assets/extract/selector/weights_v5.npz",
                    "embedded-v5 logistic selector"),
}


def _design(v, s, mean, scale):
    # Without the vector (VECTOR_SCALE 0) its columns are left out of the fit, and exported as zeros.
    parts = [v * VECTOR_SCALE] if VECTOR_SCALE else []
    return np.concatenate([*parts, (s - mean) / scale, np.ones((len(v), 1))], axis=1)


def fit(rows: list[Row], l2: float = L2, features: str = "scalars"):
    v, s, y = matrices(rows, features)
    mean = s.mean(axis=0)
    scale = s.std(axis=0)
    scale[scale < 1e-6] = 1.0
    x = _design(v, s, mean, scale)
    weight = np.where(y > 0, POSITIVE_WEIGHT, 1.0)
    w = np.zeros(x.shape[1])
    reg = np.full(x.shape[1], l2)
    if VECTOR_SCALE:
        reg[:384] = L2_VECTOR
    reg[-1] = 0.0  # the bias is not shrunk
    for _ in range(15):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        grad = x.T @ (weight * (p - y)) + reg * w
        hess = (x * (weight * p * (1 - p))[:, None]).T @ x + np.diag(reg)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-5:
            break
    return {"mean": mean, "scale": scale, "w": w}


def scores(model, rows: list[Row], features: str = "scalars") -> np.ndarray:
    v, s, _ = matrices(rows, features)
    return 1.0 / (1.0 + np.exp(-(_design(v, s, model["mean"], model["scale"]) @ model["w"])))


INNER_FOLDS = 0  # 0: leave one person out inside the training set too


def choose_threshold(rows: list[Row], features: str = "scalars") -> float:
    """The bar that maximises F-beta over out-of-fold scores: each person (or each of `INNER_FOLDS`
    groups of people, dealt in name order) scored by a model fitted on the others; every
    labelled keep the model never sees (form rules, conversation scope, not a candidate) counts as missed."""
    people = sorted({r.person for r in rows})
    pairs = []  # (score, keep)
    folds = [{p} for p in people] if not INNER_FOLDS else [set(people[k::INNER_FOLDS]) for k in range(INNER_FOLDS)]
    for fold in folds:
        train = trainable([r for r in rows if r.person not in fold])
        judged = trainable([r for r in rows if r.person in fold])
        if train and judged:
            pairs += list(zip(np.round(scores(fit(train, features=features), judged, features), 3), [r.keep for r in judged]))
    keeps = sum(r.keep for r in rows)
    best, bar = -1.0, 0.5
    for t in np.arange(0.05, 0.96, 0.01):
        tp = sum(1 for s, k in pairs if s >= t and k)
        fp = sum(1 for s, k in pairs if s >= t and not k)
        if tp == 0:
            continue
        p, r = tp / (tp + fp), tp / keeps
        f = (1 + BETA**2) * p * r / (BETA**2 * p + r)
        if f > best:
            best, bar = f, round(float(t), 2)
    return bar


def export(model, threshold: float, out: Path, names=SCALARS, name: str = NAME) -> None:
    w = model["w"]
    d = 384 if VECTOR_SCALE else 0
    vector = w[:d] * VECTOR_SCALE if VECTOR_SCALE else np.zeros(384)
    w1 = np.concatenate([vector, w[d:-1]])[:, None]
    np.savez_compressed(
        out,
        scalars=np.asarray(names),
        mean=model["mean"],
        scale=model["scale"],
        w1=w1,
        b1=np.asarray([w[-1]]),
        threshold=np.asarray(threshold),
        name=np.asarray(name),
    )


def lopo_kept(rows: list[Row], thresholds: dict | None = None, features: str = "scalars") -> set[int]:
    """id() of every row kept when its person is scored by a model (and threshold) fitted on everyone else."""
    kept: set[int] = set()
    for person in sorted({r.person for r in rows}):
        others = [r for r in rows if r.person != person]
        judged = trainable([r for r in rows if r.person == person])
        if not judged:
            continue
        model = fit(trainable(others), features=features)
        bar = choose_threshold(others, features)
        if thresholds is not None:
            thresholds[person] = bar
        for r, s in zip(judged, np.round(scores(model, judged, features), 3)):
            if s >= bar:
                kept.add(id(r))
    return kept


def lopo(rows: list[Row], features: str = "scalars") -> dict[str, dict]:
    """For each person: precision and recall of a model (and its threshold) from everyone else."""
    bars: dict[str, float] = {}
    kept = lopo_kept(rows, bars, features)
    return {p: figures([r for r in rows if r.person == p], kept) | {"threshold": bars.get(p)} for p in sorted({r.person for r in rows})}


def figures(rows: list[Row], kept: set[int]) -> dict:
    tp = sum(1 for r in rows if r.keep and id(r) in kept)
    fp = sum(1 for r in rows if not r.keep and id(r) in kept)
    fn = sum(1 for r in rows if r.keep and id(r) not in kept)
    return {
        "kind": rows[0].kind if rows else "",
        "rows": len(rows),
        "keeps": tp + fn,
        "kept": tp + fp,
        "precision": round(tp / (tp + fp), 3) if tp + fp else 0.0,
        "recall": round(tp / (tp + fn), 3) if tp + fn else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=HERE / "corpus")
    parser.add_argument("--data", type=Path, default=Path("/work/corpus/data"))
    parser.add_argument("--old-labels", type=Path, default=HERE / "labels.jsonl")
    parser.add_argument("--version", choices=sorted(VERSIONS), default="embedded-v4", help="the selector to train")
    parser.add_argument("--out", type=Path, default=None, help="the weights file (default: the version's shipped one)")
    parser.add_argument("--cache", type=Path, default=None, help="a pickle of embeddings to reuse between runs")
    parser.add_argument("--lopo", action="store_true")
    args = parser.parse_args(argv)
    corpus = build(args.corpus, args.data, args.old_labels, CachedVectors(args.cache), with_v3=False)
    for line in corpus.skipped:
        print(f"skipped: {line}", file=sys.stderr)
    rows = corpus.rows
    features, names, default_out, name = VERSIONS[args.version]
    out = args.out or default_out
    if args.lopo:
        for person, f in lopo(rows, features).items():
            print(person, f)
    model = fit(trainable(rows), features=features)
    bar = choose_threshold(rows, features)
    export(model, bar, out, names, name)
    print(f"{len(rows)} labelled sentences of {len({r.person for r in rows})} people; "
          f"fitted on {len(trainable(rows))}; threshold {bar}; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
