"""The shipped selector weights (`weights.npz`, trained by benchmarks/selection/train_selector.py)
and their inference, numpy only.

The model reads one row per sentence: its 384-d MiniLM vector and its scalars (`features.SCALARS`,
standardised with the training set's mean and spread), and gives the probability that a person
keeps the sentence: a logistic regression (`w`, `b`) or one hidden ReLU layer (`w1`, `b1`, `w2`, `b2`).
`threshold` is the bar on the rounded score. A missing or corrupt file is one `SelectorWeightsError`
naming the file, raised before anything is extracted, so nothing in the vault changes.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from nexus_assets.extract.selector.features import SCALARS

WEIGHTS = Path(__file__).with_name("weights.npz")
DIMENSIONS = 384


class SelectorWeightsError(ValueError):
    """The selector's weights file is missing or not weights this code can read."""


@dataclass(frozen=True)
class Selector:
    mean: "object"
    scale: "object"
    layers: tuple  # ((w, b), ...), ReLU between them, sigmoid after the last
    threshold: float
    name: str

    def scores(self, vectors, scalars):
        """Keep probabilities, one per row (not rounded: callers round before deciding)."""
        import numpy as np

        x = np.concatenate([np.asarray(vectors, dtype="float64"), (np.asarray(scalars, dtype="float64") - self.mean) / self.scale], axis=1)
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if i < len(self.layers) - 1:
                x = np.maximum(x, 0.0)
        return 1.0 / (1.0 + np.exp(-x[:, 0]))


def load_selector(path: str | Path | None = None) -> Selector:
    """The selector from `path` (a retrained file, `NEXUS_SELECTOR_WEIGHTS` as the shell hands it
    over), else the shipped one."""
    return _load(str(Path(path or WEIGHTS)), SCALARS)


def load_selector_v5(path: str | Path | None = None) -> Selector:
    """embedded-v5's selector (its own scalars, `v5.SCALARS_V5`) from `path`, else the shipped one."""
    from nexus_assets.extract.selector.v5 import SCALARS_V5, WEIGHTS_V5

    return _load(str(Path(path or WEIGHTS_V5)), SCALARS_V5)


@lru_cache(maxsize=8)
def _load(path: str, expected: tuple[str, ...]) -> Selector:
    import numpy as np

    def bad(problem: str) -> SelectorWeightsError:
        return SelectorWeightsError(f"selector weights {path}: {problem} (reinstall nexus-sync, or retrain with benchmarks/selection/train_selector.py)")

    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise bad("file not found") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as exc:
        raise bad(f"not a readable weights file ({type(exc).__name__}: {exc})") from None
    try:
        names = tuple(str(n) for n in arrays["scalars"])
        if names != expected:
            raise bad(f"trained on other features ({len(names)} scalars, this code has {len(expected)})")
        mean = arrays["mean"].astype("float64")
        scale = arrays["scale"].astype("float64")
        layers = []
        i = 1
        while f"w{i}" in arrays:
            layers.append((arrays[f"w{i}"].astype("float64"), arrays[f"b{i}"].astype("float64")))
            i += 1
        threshold = float(arrays["threshold"])
        name = str(arrays["name"])
    except KeyError as exc:
        raise bad(f"lacks the array {exc}") from None
    width = DIMENSIONS + len(expected)
    if not layers or mean.shape != (len(expected),) or scale.shape != (len(expected),) or layers[0][0].shape[0] != width:
        raise bad("arrays of the wrong shape")
    for (w, b), nxt in zip(layers, [*layers[1:], None]):
        if b.shape != (w.shape[1],) or (nxt is not None and nxt[0].shape[0] != w.shape[1]):
            raise bad("arrays of the wrong shape")
    if layers[-1][0].shape[1] != 1 or not all(np.isfinite(w).all() and np.isfinite(b).all() for w, b in layers):
        raise bad("arrays of the wrong shape or not finite")
    if not (0.0 < threshold < 1.0) or not (np.isfinite(mean).all() and np.isfinite(scale).all() and (scale > 0).all()):
        raise bad("a threshold or standardisation out of range")
    return Selector(mean, scale, tuple(layers), threshold, name)
