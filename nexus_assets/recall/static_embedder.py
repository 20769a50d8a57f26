"""The static model passages are embedded with (DESIGN §3.1, §8): a table of word-piece vectors
distilled offline from the shipped all-MiniLM-L6-v2 with model2vec (`recall/static/`, built by
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
# Texts tokenised and pooled per numpy call: a batch's gathered rows are at most this many word
# pieces x 256 float32 (64k pieces: 64 MB), whatever the texts' lengths.
BATCH_PIECES = 65_536


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
    import numpy as np

    texts = list(texts)
    out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
    if not texts:
        return out
    table, tokenizer, unk = _model()
    start = 0
    while start < len(texts):
        # Texts whose pieces fill one batch; a single long text is its own batch (truncated at 512).
        with _lock:
            encodings = tokenizer.encode_batch(texts[start : start + 4096], add_special_tokens=False)
        ids: list[int] = []
        bounds: list[int] = []
        taken = 0
        for e in encodings:
            row = [i for i in e.ids if i != unk] if unk is not None else e.ids
            if taken and len(ids) + len(row) > BATCH_PIECES:
                break
            bounds.append(len(ids))
            ids.extend(row)
            taken += 1
        rows = table[np.asarray(ids, dtype=np.int64)] if ids else np.zeros((0, DIMENSIONS), np.float32)
        counts = np.diff(np.asarray(bounds + [len(ids)]))
        filled = counts > 0
        if rows.shape[0]:
            sums = np.add.reduceat(rows, np.asarray(bounds)[filled], axis=0)
            block = np.zeros((taken, DIMENSIONS), dtype=np.float32)
            block[filled] = sums / counts[filled, None]
            norms = np.linalg.norm(block, axis=1, keepdims=True)
            out[start : start + taken] = np.divide(block, norms, out=np.zeros_like(block), where=norms > 0)
        start += taken
    return out
