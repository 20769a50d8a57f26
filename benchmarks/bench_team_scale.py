"""Benchmark topics in parallel on PostgreSQL against DuckDB's one writer (issue 43).

Four topics over the same generated runs (about 20 MB), each compiled from a fresh vault, in one run:

  duckdb sequential      `nexus sync` into a DuckDB file (one writer: topic after topic)
  postgresql sequential  `nexus sync` into a fresh PostgreSQL database
  postgresql --parallel  `nexus sync --parallel 4` into another fresh database

Also reported: the peak number of connections to each PostgreSQL database (sampled from
pg_stat_activity every 50 ms; each process's pool is bounded by NEXUS_PG_POOL_SIZE), and whether
the three vaults hold the same manifests (they must).

The server is Debian's, started here in a temp directory as the tests start it (127.0.0.1 only),
unless --postgres URL names one (a database is created on it per measurement).

    python benchmarks/bench_team_scale.py [--runs-mb 20] [--topics 4] [--no-recall] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sync import write_runs  # noqa: E402  (the same generated runs as the other benchmarks)

TOPICS = {
    "nexus-server-sync": ("chronological", ["sync", "manifest"]),
    "storage-decisions": ("source-run-order", ["duckdb", "vault", "parquet", "append-only"]),
    "checksums": ("ingestion-order", ["checksum", "checksums"]),
    "compiler-bricks": ("chronological", ["brick", "bricks", "compiler"]),
    "dagster-runs": ("chronological", ["dagster", "asset", "partition"]),
    "retention": ("source-run-order", ["retention", "delete", "archive"]),
}


def write_topics(folder: Path, count: int) -> list[str]:
    folder.mkdir(parents=True)
    names = list(TOPICS)[:count]
    for name in names:
        rule, keywords = TOPICS[name]
        (folder / f"{name}.yaml").write_text(
            f"topic_id: {name}\ndisplay_name: {name.replace('-', ' ').title()}\n"
            "extraction_policy:\n"
            f"  scope_description: Everything said about {', '.join(keywords)} in the sync engine.\n"
            "  target_node_types: [user_message, assistant_message]\n"
            f"  required_keywords: [{', '.join(keywords)}]\n"
            f"ordering_rule: {rule}\nstate: ACTIVE\n"
        )
    return names


def database(server_url: str) -> str:
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server_url.rsplit("/", 1)[0] + "/" + name


class ConnectionPeak(threading.Thread):
    """The most connections open to one database at a time, sampled from pg_stat_activity."""

    def __init__(self, server_url: str, url: str):
        super().__init__(daemon=True)
        self.server_url, self.name = server_url, url.rsplit("/", 1)[1]
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.server_url, autocommit=True) as conn:
            while not self.done.is_set():
                n = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [self.name]).fetchone()[0]
                self.peak = max(self.peak, n)
                time.sleep(0.05)


def sync(db: str, runs: Path, topics: Path, *extra: str, no_recall: bool) -> tuple[float, list[dict]]:
    argv = [sys.executable, "-m", "nexus_assets.cli", "--db", db, "sync", "--json", "--runs-dir", str(runs), "--topics-dir", str(topics), *extra]
    if no_recall:
        argv.append("--no-recall")
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=runs.parent)
    elapsed = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"nexus sync exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return elapsed, json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs-mb", type=float, default=20.0)
    parser.add_argument("--topics", type=int, default=4, choices=range(2, len(TOPICS) + 1))
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--postgres", help="a server's address (postgresql://user@host:port/postgres); default: start one")
    parser.add_argument("--no-recall", action="store_true", help="syncs build no embeddings (compile only)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    server = None
    with tempfile.TemporaryDirectory(prefix="bench-team-") as tmp:
        work = Path(tmp)
        runs, topics = work / "runs", work / "topics"
        runs.mkdir()
        info = write_runs(runs, 0, args.seed, target_bytes=int(args.runs_mb * 1024 * 1024))
        names = write_topics(topics, args.topics)
        size = sum(f.stat().st_size for f in runs.rglob("*.json"))
        if args.postgres:
            server_url = args.postgres
        else:
            from nexus_assets_tests.postgres import PostgresServer

            server = PostgresServer().start()  # its own temp folder, which the server user can enter
            server_url = server.url()
        try:
            figures: dict = {"runs_bytes": size, "runs": info.get("runs"), "topics": names, "parallel": args.parallel,
                             "cores": os.cpu_count(), "no_recall": args.no_recall}
            manifests = {}
            t, out = sync(str(work / "vault.duckdb"), runs, topics, no_recall=args.no_recall)
            figures["duckdb_sequential_s"] = round(t, 2)
            manifests["duckdb"] = {r["topic_id"]: r.get("manifest_hash") for r in out}
            for label, extra in (("postgresql_sequential", ()), ("postgresql_parallel", ("--parallel", str(args.parallel)))):
                url = database(server_url)
                peak = ConnectionPeak(server_url, url)
                peak.start()
                try:
                    t, out = sync(url, runs, topics, *extra, no_recall=args.no_recall)
                finally:
                    peak.done.set()
                    peak.join()
                figures[f"{label}_s"] = round(t, 2)
                figures[f"{label}_peak_connections"] = peak.peak
                manifests[label] = {r["topic_id"]: r.get("manifest_hash") for r in out}
            figures["parallel_over_duckdb"] = round(figures["postgresql_parallel_s"] / figures["duckdb_sequential_s"], 3)
            figures["parallel_over_postgresql_sequential"] = round(
                figures["postgresql_parallel_s"] / figures["postgresql_sequential_s"], 3
            )
            figures["same_manifests"] = len({json.dumps(m, sort_keys=True) for m in manifests.values()}) == 1
        finally:
            if server is not None:
                server.stop()
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for k, v in figures.items():
            print(f"{k:40} {v}")
    return 0 if figures["same_manifests"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
