"""Benchmark the cost that follows the change: one new run synced into a large vault, against a
sync of the same vault with nothing new (issue 33 item 4).

For each size: generate that many MB of synthetic Nexus runs (bench_sync's generator), sync them
into a fresh vault, then time, each as the real `nexus sync` command in a subprocess:

  no-change   a sync with nothing new (median of --repeats)
  one run     a sync after one new 30-message run was added (median of --repeats, a new run each time)

The figures to compare are one-run / no-change per size, and the one-run seconds of the largest
size over the smallest's (one new run should cost about the same whatever the vault holds).

    python benchmarks/bench_incremental.py [--sizes-mb 20 100] [--repeats 3] [--no-recall] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sync import ChatText, iso, write_runs, write_topics  # noqa: E402  (the same generator)


def sync(db: Path, runs: Path, topics: Path, no_recall: bool) -> tuple[float, list[dict]]:
    argv = [sys.executable, "-m", "nexus_assets.cli", "--db", str(db), "sync", "--json", "--runs-dir", str(runs), "--topics-dir", str(topics)]
    if no_recall:
        argv.append("--no-recall")
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=db.parent)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"nexus sync exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return elapsed, json.loads(proc.stdout)


def add_run(runs: Path, n: int, seed: int) -> None:
    """One new closed 30-message run, in the same style as the rest (keywords, shared sentences)."""
    from datetime import datetime, timedelta, timezone

    rng = random.Random(seed * 1000 + n)
    text = ChatText(rng, pool_size=50)
    t = datetime(2027, 1, 1, tzinfo=timezone.utc) + timedelta(days=n)
    messages = []
    while len(messages) < 30:
        for role, content in text.conversation():
            t += timedelta(seconds=rng.randint(5, 400))
            messages.append({"role": role, "content": content, "timestamp": iso(t)})
    doc = {"run_id": f"new-run-{n:04d}", "status": "CLOSED", "started_at": iso(t), "messages": messages[:30]}
    folder = runs / "new"
    folder.mkdir(exist_ok=True)
    (folder / f"new-run-{n:04d}.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1))


def measure(size_mb: float, work: Path, repeats: int, no_recall: bool, seed: int) -> dict:
    runs, topics, db = work / "runs", work / "topics", work / "vault.duckdb"
    write_topics(topics)
    generated = write_runs(runs, 0, seed, int(size_mb * 1024 * 1024))
    full_s, results = sync(db, runs, topics, no_recall)
    bricks = sum(sum(r.get("bricks", {}).values()) for r in results)
    unchanged = [sync(db, runs, topics, no_recall)[0] for _ in range(repeats)]
    one_run = []
    for n in range(repeats):
        add_run(runs, n, seed)
        one_run.append(sync(db, runs, topics, no_recall)[0])
        # The sync after it has nothing new again; not timed, it re-primes the no-change path.
    return {
        "size_mb": size_mb,
        "runs": generated["runs"],
        "bricks": bricks,
        "vault_mb": round(db.stat().st_size / 1e6, 1),
        "full_s": round(full_s, 2),
        "no_change_s": round(statistics.median(unchanged), 3),
        "one_run_s": round(statistics.median(one_run), 3),
        "one_run_over_no_change": round(statistics.median(one_run) / statistics.median(unchanged), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[20.0, 100.0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-recall", action="store_true", help="every sync leaves the recall group out")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for size in args.sizes_mb:
        with tempfile.TemporaryDirectory(prefix="nexus-incr-") as tmp:
            rows.append(measure(size, Path(tmp), args.repeats, args.no_recall, args.seed))
        if not args.json:
            r = rows[-1]
            print(f"{r['size_mb']:>6.0f} MB  {r['runs']:>6} runs {r['bricks']:>8} bricks  full {r['full_s']:>7.1f} s  "
                  f"no-change {r['no_change_s']:>6.2f} s  one run {r['one_run_s']:>6.2f} s  ratio {r['one_run_over_no_change']:>5.1f}x", flush=True)
    out = {"recall": not args.no_recall, "sizes": rows}
    if len(rows) > 1:
        out["largest_over_smallest_one_run"] = round(rows[-1]["one_run_s"] / rows[0]["one_run_s"], 2)
    if args.json:
        print(json.dumps(out, indent=2))
    elif "largest_over_smallest_one_run" in out:
        print(f"one run, largest vault over smallest: {out['largest_over_smallest_one_run']}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
