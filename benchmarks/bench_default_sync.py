"""Benchmark the default sync (recall on) against the compile alone, and what recall costs a user
(issue 33): in one run, over the same generated runs (bench_sync's generator, sized to about
--bricks distinct bricks):

  compile only   `nexus sync --no-recall` into a fresh vault: wall seconds, peak RSS
  default sync   `nexus sync` into another fresh vault: wall seconds, peak RSS (target ≤ 1.5× the
                 compile only, ≤ 600 MB)
  no-change      the default sync again, nothing new: peak RSS (target ≤ ~250 MB)
  read command   `nexus bricks TOPIC --json`: peak RSS (target ≤ ~250 MB)
  cold recall    `nexus recall QUERY` in a fresh process: wall seconds (target ≤ 1.5 s), peak RSS
  warm recall    `recall()` again in one process that has answered before: ms per query (target ≤ 50)

Every command is the real `nexus` in a subprocess; peak RSS is that process's own (wait4).

    python benchmarks/bench_default_sync.py [--bricks 10000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sync import write_runs, write_topics  # noqa: E402  (the same generator)

QUERIES = [
    "Where should the vault live?",
    "how are checksums of the manifest verified",
    "duckdb file next to the runs",
    "what does the compiler do with duplicate bricks",
    "append-only storage and parquet exports",
]
# Measured on bench_sync's generator with the default selector (embedded-v3, conversation scope):
# 10,358 visible bricks from 36.0 MB (1,327 from 4.7 MB). v2 kept one brick per 470 bytes, so a
# "--bricks 10000" vault sized by that figure held about 1,300 bricks.
BYTES_PER_BRICK = 3_500


def run(argv: list[str], cwd: Path) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in bytes and stdout of one `nexus` process. Called in a fresh
    interpreter (`measured`), so RUSAGE_CHILDREN holds this one command alone."""
    import resource

    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "nexus_assets.cli", *argv], cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"nexus {' '.join(argv[:3])} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return elapsed, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, proc.stdout


def measured(argv: list[str], cwd: Path) -> tuple[float, int, str]:
    """`run` in a fresh interpreter of this script, so RUSAGE_CHILDREN holds that command alone."""
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps([argv, str(cwd)])], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    seconds, peak, out = json.loads(proc.stdout)
    return seconds, peak, out


def warm_recall(db: Path, repeats: int = 5) -> dict:
    """ms per recall in a process that answered once already (the viewer's, the API's)."""
    from nexus_assets.services.answers import recall

    t0 = time.perf_counter()
    recall(db, QUERIES[0], None, k=5)
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        for q in QUERIES:
            t0 = time.perf_counter()
            recall(db, q, None, k=5)
            times.append((time.perf_counter() - t0) * 1000)
    return {"first_s": round(first, 3), "warm_ms_median": round(statistics.median(times), 1), "warm_ms_p95": round(sorted(times)[int(len(times) * 0.95)], 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bricks", type=int, default=10_000, help="about this many distinct bricks (default 10000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    fig: dict = {}
    with tempfile.TemporaryDirectory(prefix="nexus-default-") as tmp:
        work = Path(tmp)
        runs, topics = work / "runs", work / "topics"
        write_topics(topics)
        fig["generated"] = write_runs(runs, 0, args.seed, args.bricks * BYTES_PER_BRICK)
        common = ["--runs-dir", str(runs), "--topics-dir", str(topics), "--json"]
        s, peak, _ = measured(["--db", str(work / "compile.duckdb"), "sync", *common, "--no-recall"], work)
        fig["compile_only"] = {"s": round(s, 2), "peak_mb": round(peak / 2**20)}
        s, peak, out = measured(["--db", str(work / "default.duckdb"), "sync", *common], work)
        results = json.loads(out)
        fig["bricks"] = sum(n for r in results for st, n in r.get("bricks", {}).items() if st != "SUPERSEDED")
        fig["default_sync"] = {"s": round(s, 2), "peak_mb": round(peak / 2**20)}
        fig["default_over_compile"] = round(fig["default_sync"]["s"] / fig["compile_only"]["s"], 2)
        db = work / "default.duckdb"
        s, peak, _ = measured(["--db", str(db), "sync", *common], work)
        fig["no_change_sync"] = {"s": round(s, 2), "peak_mb": round(peak / 2**20)}
        s, peak, _ = measured(["--db", str(db), "bricks", "nexus-server-sync", "--json"], work)
        fig["read_command"] = {"s": round(s, 2), "peak_mb": round(peak / 2**20)}
        colds = [measured(["--db", str(db), "recall", q, "--json"], work) for q in QUERIES[:3]]
        fig["cold_recall"] = {"s_median": round(statistics.median(c[0] for c in colds), 2), "peak_mb": round(max(c[1] for c in colds) / 2**20)}
        fig["warm_recall"] = warm_recall(db)
    if args.json:
        print(json.dumps(fig, indent=2))
    else:
        print(f"{fig['bricks']} visible bricks from {fig['generated']['runs']} runs ({fig['generated']['bytes'] / 1e6:.1f} MB)")
        for name in ("compile_only", "default_sync", "no_change_sync", "read_command"):
            print(f"  {name:<16}{fig[name]['s']:>8.2f} s {fig[name]['peak_mb']:>7} MB peak")
        print(f"  default / compile only: {fig['default_over_compile']}x (target ≤ 1.5)")
        print(f"  cold recall {fig['cold_recall']['s_median']} s ({fig['cold_recall']['peak_mb']} MB); "
              f"warm recall {fig['warm_recall']['warm_ms_median']} ms median, {fig['warm_recall']['warm_ms_p95']} ms p95")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        command, cwd = json.loads(sys.argv[2])
        print(json.dumps(run(command, Path(cwd))))
        sys.exit(0)
    sys.exit(main())
