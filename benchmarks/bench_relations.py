"""Benchmark relation building (docs/conflicts.md) against embedding the same bricks, on one topic.

Bricks: `--bricks` distinct brick-like sentences (default 100 000): random word runs over the
vocabulary of the labelled recall corpus, 6-30 words, plus near-repeats the way conversations hold
them: 5% paraphrases of an earlier brick (one word swapped), 2% restatements with another number.
Their vectors come from the shipped ONNX MiniLM (`nexus_assets.embedding.embedder.embed`, timed: the
embedding time the target is measured against; `--embed-sample N` embeds N and scales up, for a
quick run). They are written into a fresh vault as one topic's visible bricks, and then timed:

- the full build: `relate_topic` on the topic from nothing (exact search, nearest related bricks,
  conflict rules, records written);
- an incremental build: 1% more bricks added, `relate_topic` again (only what changed is looked at);
- a no-change build.

    python benchmarks/bench_relations.py [--bricks 100000] [--embed-sample 0] [--json]

Target (issue 35): the full build in at most 0.2x the time of embedding the bricks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nexus_assets.core.models import ExtractionPolicy, Topic
from nexus_assets.embedding.embedder import MODEL, embed
from nexus_assets.relate.step import relate_topic
from nexus_assets.store import Vault

RECALL_SET = REPO / "nexus_assets_tests" / "fixtures" / "embeddings" / "recall_set.json"
TOPIC = Topic(
    topic_id="bench", display_name="Bench", state="ACTIVE", extraction_policy=ExtractionPolicy(scope_description="bench")
)


def brick_texts(n: int, seed: int = 35) -> list[str]:
    corpus = json.loads(RECALL_SET.read_text(encoding="utf-8"))["corpus"]
    vocabulary = sorted({w.strip(".,;:()'\"`").lower() for t in corpus for w in t.split()} - {""})
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        roll = rng.random()
        if out and roll < 0.05:  # a paraphrase: an earlier brick with one word swapped
            words = rng.choice(list(out)[-5000:]).rstrip(".").split()
            words[rng.randrange(len(words))] = rng.choice(vocabulary)
            text = " ".join(words) + "."
        elif out and roll < 0.07:  # a restatement with another value
            text = rng.choice(list(out)[-5000:]).rstrip(".") + f" {rng.randint(2, 9999)}."
        else:
            text = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(6, 30))).capitalize() + "."
        out[text] = None
    return list(out)


def fill(v: Vault, texts: list[str], vectors: np.ndarray, first_order: int) -> None:
    fps = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    ids = [hashlib.sha256(f"bench:{fp}".encode()).hexdigest() for fp in fps]
    now = datetime.now(timezone.utc)
    v.conn.execute(
        "INSERT INTO bricks SELECT unnest(?), 'bench', unnest(?), unnest(?), 'FORMING', unnest(?), NULL, false, ?, ?",
        [ids, texts, fps, list(range(first_order, first_order + len(texts))), now, now],
    )
    v.recall.store_embeddings(MODEL, fps, vectors, now)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bricks", type=int, default=100_000)
    ap.add_argument("--embed-sample", type=int, default=0, help="embed only this many (timed) and scale the time up; 0: embed all")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    extra = args.bricks // 100
    texts = brick_texts(args.bricks + extra)
    base, more = texts[: args.bricks], texts[args.bricks :]
    embed(["warm the model up"])
    if args.embed_sample:
        sample = base[: args.embed_sample]
        t = time.perf_counter()
        embed(sample)
        embed_s = (time.perf_counter() - t) * args.bricks / len(sample)
        rng = np.random.default_rng(1)
        vectors = rng.standard_normal((args.bricks + extra, 384)).astype("float32")
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        print("note: --embed-sample uses random vectors for the relation figures", file=sys.stderr)
    else:
        t = time.perf_counter()
        vectors = np.concatenate([embed(base[k : k + 8192]) for k in range(0, len(base), 8192)])
        embed_s = time.perf_counter() - t
        vectors = np.concatenate([vectors, embed(more)])

    with tempfile.TemporaryDirectory() as tmp:
        with Vault.open(Path(tmp) / "bench.duckdb") as v:
            fill(v, base, vectors[: args.bricks], 0)
            t = time.perf_counter()
            full = relate_topic(v, TOPIC, MODEL)
            full_s = time.perf_counter() - t
            fill(v, more, vectors[args.bricks :], args.bricks)
            t = time.perf_counter()
            incremental = relate_topic(v, TOPIC, MODEL)
            incremental_s = time.perf_counter() - t
            t = time.perf_counter()
            relate_topic(v, TOPIC, MODEL)
            unchanged_s = time.perf_counter() - t
    figures = {
        "bricks": args.bricks,
        "embed_s": round(embed_s, 1),
        "embed_bricks_per_s": round(args.bricks / embed_s, 1),
        "embed_scaled_from": args.embed_sample or None,
        "relate_full_s": round(full_s, 1),
        "ratio_full_to_embed": round(full_s / embed_s, 3),
        "related_pairs": full.pairs,
        "conflicts": full.conflicts,
        "incremental_bricks_added": extra,
        "relate_incremental_s": round(incremental_s, 2),
        "incremental_looked_at": incremental.looked_at,
        "relate_unchanged_s": round(unchanged_s, 3),
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(f"embedding {args.bricks} bricks: {figures['embed_s']} s ({figures['embed_bricks_per_s']} bricks/s)"
          + (f", scaled from {args.embed_sample}" if args.embed_sample else ""))
    print(f"relations from nothing: {figures['relate_full_s']} s = {figures['ratio_full_to_embed']}x the embedding "
          f"(target <= 0.2x); {full.pairs} related pairs, {full.conflicts} conflicts")
    print(f"relations after {extra} new bricks: {figures['relate_incremental_s']} s ({incremental.looked_at} bricks looked at)")
    print(f"relations when nothing changed: {figures['relate_unchanged_s']} s")


if __name__ == "__main__":
    main()
