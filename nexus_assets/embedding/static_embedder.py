"""The static model passages are embedded with (DESIGN §3.1, §8): a table of word-piece vectors
distilled offline from the shipped all-MiniLM-L6-v2 with model2vec (`embedding/static/`, built by
`benchmarks/distill_static_model.py`). A sentence's vector is the mean of its word pieces' rows,
L2-normalised: numpy only, no model session, about a hundred times more sentences per CPU-second
than MiniLM, and better on conversational questions (shared/FACTS.md, "Static embeddings").

Bricks and the queries against them stay on MiniLM (`embedder.py`): this is the passages' index's
model, and a query is embedded with each index's own model, never compared across spaces.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from functools import lru_cache
from pathlib import Path

MODEL = "minilm-static-256-int8"
DIMENSIONS = 256
MAX_TOKENS = 512  # model2vec's max_length for the distilled model
MODEL_DIR = Path(__file__).with_name("static")
# Texts tokenised and pooled at a time (at most 512 pieces each).
BATCH_TEXTS = 8_192


class StaticModelMissing(RuntimeError):
    """A file of the static model is missing or not what the manifest says; the message names it."""


def _check(path: Path, expected: str | None) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StaticModelMissing(
            f"the passages' embedding model file {path} cannot be read ({exc.strerror or exc}); reinstall nexus-sync"
        ) from None
    if expected is not None and hashlib.sha256(data).hexdigest() != expected:
        raise StaticModelMissing(
            f"the passages' embedding model file {path} is corrupt (its sha256 is not the one in manifest.json); reinstall nexus-sync"
        )
    return data


_lock = threading.Lock()


@lru_cache(maxsize=1)
def _model():
    """(table float32, tokenizer, unk id), loaded and checked once per process."""
    import io

    import numpy as np

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from tokenizers import Tokenizer

    manifest_path = MODEL_DIR / "manifest.json"
    try:
        files = json.loads(_check(manifest_path, None))["files"]
    except (ValueError, KeyError, TypeError):
        raise StaticModelMissing(f"the passages' embedding model file {manifest_path} is corrupt; reinstall nexus-sync") from None
    try:
        codes = np.load(io.BytesIO(_check(MODEL_DIR / "embeddings.npy", files.get("embeddings.npy"))))
        scales = np.load(io.BytesIO(_check(MODEL_DIR / "scales.npy", files.get("scales.npy"))))
        tokenizer = Tokenizer.from_str(_check(MODEL_DIR / "tokenizer.json", files.get("tokenizer.json")).decode("utf-8"))
    except StaticModelMissing:
        raise
    except Exception as exc:  # noqa: BLE001 (an unreadable artefact is one clear error)
        raise StaticModelMissing(f"the passages' embedding model in {MODEL_DIR} cannot be loaded ({exc}); reinstall nexus-sync") from None
    if codes.ndim != 2 or codes.shape[1] != DIMENSIONS or scales.shape != (codes.shape[0],):
        raise StaticModelMissing(f"the passages' embedding model in {MODEL_DIR} has the wrong shape; reinstall nexus-sync")
    table = codes.astype(np.float32) * scales.astype(np.float32)[:, None]
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_TOKENS)
    unk = tokenizer.token_to_id("[UNK]")
    return table, tokenizer, unk


def check_model() -> None:
    """Load the model now (StaticModelMissing naming the file when it cannot be): a sync checks it
    before it writes anything, so a broken install changes nothing in the vault."""
    _model()


def embed_static(texts: list[str]):
    """Unit-length float32 vectors (n x 256), one row per text in order; a text with no known word
    piece gets the zero vector (it matches nothing)."""
    return unit(token_sums(texts))


def unit(sums):
    """Rows scaled to unit length (a mean and a sum of word-piece rows have one direction); zero
    rows stay zero."""
    import numpy as np

    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return np.divide(sums, norms, out=np.zeros_like(sums), where=norms > 0)


def token_sums(texts: list[str]):
    """The sum of each text's word-piece rows (n x 256 float32; at most MAX_TOKENS pieces a text).
    Texts joined by a space have the sum of their sums (the tokenizer splits at whitespace and
    punctuation), which is how a passage's message and neighbours are embedded without being
    tokenised again (`passages/vectors.py`)."""
    import numpy as np
    from scipy.sparse import csr_matrix

    texts = list(texts)
    out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
    if not texts:
        return out
    table, tokenizer, unk = _model()
    for start in range(0, len(texts), BATCH_TEXTS):
        with _lock:
            encodings = tokenizer.encode_batch(texts[start : start + BATCH_TEXTS], add_special_tokens=False)
        rows = [e.ids for e in encodings]
        lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
        pieces = np.fromiter((i for r in rows for i in r), np.int64, int(lengths.sum()))
        counts = np.ones(len(pieces), np.float32)
        if unk is not None:
            counts[pieces == unk] = 0.0  # an unknown piece adds nothing
        # (texts x word pieces) counts times the table: one sparse product instead of gathering
        # a 1 KB row per piece (40 times faster on 2 cores).
        bag = csr_matrix((counts, pieces, np.r_[0, np.cumsum(lengths)]), shape=(len(rows), table.shape[0]))
        out[start : start + len(rows)] = bag @ table
    return out
