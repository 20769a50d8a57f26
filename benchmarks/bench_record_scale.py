"""The record at scale (issue 58): warm recall over HTTP on a vault of about --passages passages.

Runs are generated (bench_sync's generator) until the vault holds about that many passages, with one
topic whose keyword nothing says (so the sync's cost is the record's, not a selector's). The default
`nexus sync` builds the passages and the record's indexes; then the real `nexus api` serves the vault
and `bench_api.py`'s measurements run against it (recall without a topic reads every run's passages:
over HTTP, a query never asked before, MCP, in-process; the server's resident memory). Reported
beside them: the sync's seconds, the passages, and the bytes the record costs (vault file, index
folder) per passage.

    python benchmarks/bench_record_scale.py [--passages 1000000] [--repeats 20] [--keep DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bench_sync import write_runs  # noqa: E402

from nexus_assets_tests import servers  # noqa: E402

# Passages per byte of generated run files (measured on 2 MB of bench_sync's generator: 182 runs, 104 bytes a passage).
PASSAGES_PER_BYTE = 1 / 104


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="build (or reuse) the vault in this folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "NEXUS_API_TOKEN")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    work = args.keep or Path(tempfile.mkdtemp(prefix="nexus-record-scale-"))
    runs, topics, db = work / "runs", work / "topics", work / "vault.duckdb"
    fig: dict = {"target_passages": args.passages}
    if not db.exists():
        topics.mkdir(parents=True, exist_ok=True)
        (topics / "unobtainium.yaml").write_text(
            "topic_id: unobtainium\ndisplay_name: Unobtainium\nextraction_policy:\n"
            "  scope_description: A metal nobody here talks about.\n  required_keywords: [unobtainium]\n"
            "ordering_rule: chronological\nstate: ACTIVE\n"
        )
        fig["generated"] = write_runs(runs, 0, args.seed, int(args.passages / PASSAGES_PER_BYTE))
        t0 = time.perf_counter()
        done = subprocess.run(servers.nexus("--db", str(db), "sync", "--runs-dir", str(runs), "--topics-dir", str(topics), "--json"),
                              env=env, capture_output=True, text=True)
        fig["sync_s"] = round(time.perf_counter() - t0, 1)
        if done.returncode not in (0, 1):
            raise SystemExit(done.stderr[-3000:])
    from nexus_assets.store import Vault

    with Vault.open(db, read_only=True) as v:
        fig["passages"] = v.passages.latest_count()
        fig["bricks"] = v.conn.execute("SELECT count(*) FROM bricks WHERE state <> 'SUPERSEDED'").fetchone()[0]
    index = work / "vault.passages"
    fig["vault_bytes"], fig["index_bytes"] = db.stat().st_size, folder_bytes(index)
    fig["index_bytes_per_passage"] = round(fig["index_bytes"] / max(1, fig["passages"]), 1)
    api = subprocess.run([sys.executable, str(HERE / "bench_api.py"), "--db", str(db), "--runs-dir", str(runs), "--topics-dir",
                          str(topics), "--pushes", "0", "--repeats", str(args.repeats), "--json"], env=env, capture_output=True, text=True)
    if api.returncode != 0:
        raise SystemExit(api.stderr[-3000:])
    fig["api"] = json.loads(api.stdout)
    if args.json:
        print(json.dumps(fig, indent=2))
    else:
        a = fig["api"]
        print(f"{fig['passages']:,} passages, {fig['bricks']} bricks; sync {fig.get('sync_s', '-')} s; vault {fig['vault_bytes'] / 1e6:.0f} MB, "
              f"record's indexes {fig['index_bytes'] / 1e6:.0f} MB ({fig['index_bytes_per_passage']} bytes a passage)")
        print(f"  recall over HTTP   {a['recall_http']['p50_ms']} ms p50, {a['recall_http']['p90_ms']} ms p90 (target p50 ≤ 50 ms)")
        print(f"  recall, new query  {a['recall_http_distinct']['p50_ms']} ms p50")
        print(f"  server RSS         {a['idle_rss_mb']} MB idle, {a['rss_after_mb']} MB after (target ≤ 800 MB); load {a['load_average']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
