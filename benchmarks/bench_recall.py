"""Benchmark recall: embedding throughput, and `recall` latency at 10k and 100k bricks against a
bare FAISS search over the same vectors.

Embedding: all-MiniLM-L6-v2 over generated sentences (bricks/s, once the model is loaded).
Recall: a vault filled directly with N visible bricks and their embeddings (random unit vectors:
embedding 100k texts here would take ~7 minutes and measure the model, not recall), then the
whole `nexus recall` path warm (index load and in-step check, query embedding, search, vault
fetch, heuristic rerank) against `IndexFlatIP.search` alone. Ratios from one run are the figures
to compare; absolute times depend on the machine.

    python benchmarks/bench_recall.py [--sizes 10000 100000] [--embed 2000] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from nexus_assets.embedding.embedder import DIMENSIONS, MODEL, embed
from nexus_assets.services.answers import recall
from nexus_assets.store import Vault

WORDS = "vault sync brick topic manifest drift checksum duckdb export branch recall answer source run node path".split()


def sentences(n: int, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=12)).capitalize() + f" number {i}." for i in range(n)]


def fill_vault(db: Path, n: int, seed: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, DIMENSIONS)).astype("float32")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    texts = sentences(n, seed)
    fps = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    ids = [hashlib.sha256(f"bench:{fp}".encode()).hexdigest() for fp in fps]
    now = datetime.now(timezone.utc)
    with Vault.open(db) as v:
        v.conn.execute(
            """INSERT INTO topics VALUES ('bench', 'Bench', 'ACTIVE', 'chronological',
               '{"topic_id": "bench", "display_name": "Bench", "extraction_policy": {"scope_description": "bench"}}', NULL, ?)""",
            [now],
        )
        v.conn.execute(
            "INSERT INTO bricks SELECT unnest(?), 'bench', unnest(?), unnest(?), 'FORMING', unnest(?), NULL, false, ?, ?",
            [ids, texts, fps, list(range(n)), now, now],
        )
        v.conn.execute(
            """INSERT INTO brick_sources (brick_id, seq, run_id, json_path, start_offset, end_offset, node_checksum)
               SELECT unnest(?), 0, 'bench-run', '$[''messages''][0][''content'']', 0, 10, 'x'""",
            [ids],
        )
        v.recall.store_embeddings(MODEL, fps, vectors, now)
        v.conn.execute(
            "INSERT INTO manifests (topic_id, seq, manifest_hash, previous_hash, bricks_json, sealed, dagster_run_id, created_at) "
            "VALUES ('bench', 0, 'bench', NULL, '[]', false, NULL, ?)",
            [now],
        )
    return vectors


def timed(fn, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--embed", type=int, default=2000, help="sentences to embed for the throughput figure")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import faiss

    embed(["warm the model up"])
    texts = sentences(args.embed)
    t = time.perf_counter()
    embed(texts)
    rate = args.embed / (time.perf_counter() - t)
    figures = {"embedding_bricks_per_s": round(rate, 1), "recall": []}
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "bench.duckdb"
            vectors = fill_vault(db, n)
            bare = faiss.IndexFlatIP(DIMENSIONS)
            bare.add(vectors)
            query = embed(["where does the vault live"])
            faiss_s = timed(lambda: bare.search(query, 20))
            recall(db, "where does the vault live", ["bench"], k=5)  # builds the index once
            ours_s = timed(lambda: recall(db, "where does the vault live", ["bench"], k=5))
            figures["recall"].append(
                {"bricks": n, "recall_ms": round(ours_s * 1000, 2), "faiss_ms": round(faiss_s * 1000, 3), "ratio": round(ours_s / faiss_s, 1)}
            )
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"embedding: {figures['embedding_bricks_per_s']} bricks/s ({args.embed} sentences, model warm)")
    for r in figures["recall"]:
        print(f"recall at {r['bricks']:>7} bricks: {r['recall_ms']:>9.2f} ms vs bare FAISS {r['faiss_ms']:>8.3f} ms = {r['ratio']}x")


if __name__ == "__main__":
    main()
