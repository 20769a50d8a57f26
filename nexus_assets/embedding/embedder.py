"""all-MiniLM-L6-v2 as an ONNX graph shipped in this package (`embedding/model/`), run by onnxruntime with
the Hugging Face `tokenizers` tokenizer: no torch, no transformers, nothing fetched at run time.

The graph is exported from the packaged sentence-transformers model by
`benchmarks/export_onnx_model.py` (see `embedding/model/README.md`): BERT, mean pooling over the
attention mask and L2 normalisation are all inside it, so a row out of the session is the sentence
embedding. Texts are cut at 256 word pieces, as sentence-transformers does for this model.

A process builds one session and one tokenizer, on its first `embed` (importing this module loads
neither). `embed` embeds each distinct text once, in batches of texts of similar token length (so
little padding is computed), and returns rows in the order of the texts given.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path

# The vault keys vectors by (MODEL, fingerprint). The weights are int8 (see model/README.md): their
# vectors are not the float32 model's to within rounding, so they have a key of their own and a vault
# embedded with the float32 model re-embeds once.
MODEL = "all-MiniLM-L6-v2-int8"
DIMENSIONS = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2
MODEL_DIR = Path(__file__).with_name("model")
# Rows × padded width per session call. Measured on 2 cores over 2000 brick-like texts: 2048 tokens
# (at most 64 texts) was the fastest, at 224 MB peak RSS; 8192 (256) was 10% slower at 478 MB, the
# attention scores of 32 texts of 256 pieces alone being 100 MB.
BATCH_TOKENS = 2048
MAX_BATCH = 64


# How many processes embed at once on this machine (`nexus sync --parallel`): each takes its share
# of the cores, or their threads would fight over them.
_sharing = 1


def share_cores(processes: int) -> None:
    global _sharing
    _sharing = max(1, processes)


# Whether the session's threads spin while waiting for work. A server (`nexus api`, `nexus mcp`)
# embeds one short query at a time between long idle spells, on a machine it shares: spinning threads
# burn a core per query and, when the other core is busy, wait on each other (measured on 2 busy
# cores: a query's minimum 38 ms without spinning against 135 ms with it). A sync embeds large
# batches, where spinning costs little; it keeps the default.
_spinning = True


def serve_queries() -> None:
    """Set before the first `embed` of a server process."""
    global _spinning
    _spinning = False


def _threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores // _sharing, 8))


@lru_cache(maxsize=1)
def _tokenizer():
    # The tokenizer's own thread pool would be copied, dead, into a forked process (Dagster forks).
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.no_padding()  # each batch is padded to its own longest text below
    return tokenizer


@lru_cache(maxsize=1)
def _session():
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = _threads()
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: nothing on stderr next to --json output
    if not _spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(MODEL_DIR / "model.onnx"), options, providers=["CPUExecutionProvider"])


def _batches(lengths: list[int]):
    """Row indices, shortest texts first, cut so that rows × longest ≤ BATCH_TOKENS."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batch: list[int] = []
    for i in order:
        if batch and (len(batch) + 1 > MAX_BATCH or (len(batch) + 1) * lengths[i] > BATCH_TOKENS):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


# A server is asked the same questions again (an agent's turns, a retry): the vectors of the last
# RECENT single texts embedded are kept (1.5 KB each), so a repeated query is not embedded again.
RECENT = 256
_recent: OrderedDict[str, object] = OrderedDict()
_recent_lock = threading.Lock()


def embed(texts: list[str], batch_size: int | None = None):
    """Unit-length float32 vectors, one row per text, in the texts' order. `batch_size` caps the
    texts per session call (default: by token count, up to MAX_BATCH)."""
    import numpy as np

    texts = list(texts)
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype="float32")
    if len(texts) == 1:
        with _recent_lock:
            known = _recent.get(texts[0])
            if known is not None:
                _recent.move_to_end(texts[0])
                return known.copy()
        vector = _embed(texts, batch_size)
        with _recent_lock:
            _recent[texts[0]] = vector.copy()
            while len(_recent) > RECENT:
                _recent.popitem(last=False)
        return vector
    return _embed(texts, batch_size)


def _embed(texts: list[str], batch_size: int | None):
    import numpy as np

    distinct = list(dict.fromkeys(texts))
    encodings = _tokenizer().encode_batch(distinct, add_special_tokens=True)
    ids = [e.ids for e in encodings]
    lengths = [len(i) for i in ids]
    session = _session()
    vectors = np.empty((len(distinct), DIMENSIONS), dtype="float32")
    for batch in _batches(lengths):
        for start in range(0, len(batch), batch_size or len(batch)):
            rows = batch[start : start + (batch_size or len(batch))]
            width = max(lengths[r] for r in rows)
            input_ids = np.zeros((len(rows), width), dtype="int64")
            mask = np.zeros((len(rows), width), dtype="int64")
            for j, r in enumerate(rows):
                input_ids[j, : lengths[r]] = ids[r]
                mask[j, : lengths[r]] = 1
            (out,) = session.run(["sentence_embedding"], {"input_ids": input_ids, "attention_mask": mask})
            vectors[rows] = out
    if len(distinct) == len(texts):
        return vectors
    where = {t: i for i, t in enumerate(distinct)}
    return vectors[[where[t] for t in texts]]
