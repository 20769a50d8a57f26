"""The warm server's memory (issue 52 item 5): `nexus api` on a synced vault (bench_api's, or --db
with its --runs-dir/--topics-dir), its resident memory (VmRSS) after start-up and some recalls,
then after --pushes pushes (`POST /v1/runs/{id}/messages`, one message each, over --runs runs; each
push queues its compile in the server, pushes arriving before it starts join it) and those compiles,
with recalls in between. Targets: under 400 MB warm; the pushes leave it within 10% of the start.
Also the vault's size (file and WAL; the folders beside it apart) before the server starts and after
it stops (issue 61: ≤ start + 64 KiB a push), and the push → recallable seconds of a push at the
start and at the end.

    python benchmarks/bench_warm_memory.py --db VAULT --runs-dir RUNS --topics-dir TOPICS [--pushes 1000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bench_api import beside_bytes, http, rss_mb, vault_bytes  # noqa: E402
from bench_default_sync import QUERIES  # noqa: E402

from nexus_assets_tests import servers  # noqa: E402
from nexus_assets_tests.api_helpers import free_port  # noqa: E402

SETTLE_S = 6.0  # the server hands freed memory back a few seconds after its last read (vault/warm.py)
SENTENCES = [
    "We keep the vault file next to the runs folder so a backup takes both.",
    "The compiler drops duplicate bricks and keeps the first source as canonical.",
    "Checksums of the manifest are verified before every export to parquet.",
    "The sync writes append-only history, so an old brick is never rewritten.",
    "DuckDB holds one writer at a time; the others wait for the lock.",
]


def wait_idle(base: str, job_ids: set[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for job in sorted(job_ids):
        while True:
            status = json.loads(http("GET", f"{base}/v1/sync/{job}"))["status"]
            if status in ("succeeded", "failed"):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"sync job {job} still {status} after {timeout_s} s")
            time.sleep(0.5)


def largest_topic(base: str) -> str:
    """The topic with the most visible bricks (the pushes' target)."""
    topics = json.loads(http("GET", base + "/v1/topics"))
    return max(((t["topic_id"], t.get("visible_bricks", 0)) for t in topics), key=lambda t: t[1])[0]


def recallable_after(base: str, topic: str) -> float:
    """One timed push as bench_api times it (a new run, recalled until it comes first)."""
    from bench_api import pushed_recallable

    return round(pushed_recallable(base, 1, topic, [])[0], 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True, help="a synced vault (copied first: the pushes write to the copy)")
    parser.add_argument("--runs-dir", required=True)
    parser.add_argument("--topics-dir", required=True)
    parser.add_argument("--pushes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=50, help="pushed runs the pushes go round (default 50)")
    parser.add_argument("--in-place", action="store_true", help="push into the vault and runs folder given, not a copy")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    fig: dict = {"pushes": args.pushes}
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "NEXUS_API_TOKEN")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="nexus-warm-mem-") as tmp:
        work = Path(tmp)
        if args.in_place:
            db, runs, topics = Path(args.db), Path(args.runs_dir), Path(args.topics_dir)
        else:
            db, runs, topics = work / "vault.duckdb", work / "runs", work / "topics"
            shutil.copy2(args.db, db)
            shutil.copytree(args.runs_dir, runs)
            shutil.copytree(args.topics_dir, topics)
            # The copy's recorded folders differ from the original's: one sync records them, outside the measure.
            subprocess.run(servers.nexus("--db", str(db), "sync", "--runs-dir", str(runs), "--topics-dir", str(topics)),
                           env=env, check=True, capture_output=True)
        fig["vault_bytes_start"], fig["beside_bytes_start"] = vault_bytes(db), beside_bytes(db)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        argv_ = servers.nexus("--db", str(db), "api", "--port", str(port), "--runs-dir", str(runs), "--topics-dir", str(topics))
        with servers.running(argv_, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
            t0 = time.perf_counter()
            while True:
                try:
                    http("GET", base + "/v1/health")
                    break
                except OSError:
                    if proc.poll() is not None or time.perf_counter() - t0 > 300:
                        raise SystemExit("nexus api did not start")
                    time.sleep(0.2)
            for q in QUERIES:
                http("POST", base + "/v1/recall", {"query": q, "k": 10})
            time.sleep(SETTLE_S)
            fig["warm_rss_mb"] = rss_mb(proc.pid)
            # One push and its sync first: the server's first sync loads what every sync needs (Dagster's
            # job machinery, pandas) once; growth is measured from there too.
            first = json.loads(http("POST", f"{base}/v1/runs/bench-push-first-{int(time.time())}/messages",
                                    {"messages": [{"id": "m0", "role": "user", "content": SENTENCES[0]}]}))
            wait_idle(base, {first["sync_job_id"]} if first.get("sync_job_id") else set(), 3600)
            for q in QUERIES:
                http("POST", base + "/v1/recall", {"query": q, "k": 10})
            time.sleep(SETTLE_S)
            fig["after_first_sync_rss_mb"] = rss_mb(proc.pid)
            topic = largest_topic(base)
            fig["push_recallable_start_s"] = recallable_after(base, topic)
            jobs: set[str] = set()
            t0 = time.perf_counter()
            tag = int(time.time())  # new runs each time the benchmark runs on the same folder
            for i in range(args.pushes):
                run_id = f"bench-push-{tag}-{i % args.runs}"
                message = {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
                           "content": f"{SENTENCES[i % len(SENTENCES)]} Push {i}."}
                out = json.loads(http("POST", f"{base}/v1/runs/{run_id}/messages", {"messages": [message]}))
                if out.get("sync_job_id"):
                    jobs.add(out["sync_job_id"])
                if i % 100 == 99:
                    http("POST", base + "/v1/recall", {"query": QUERIES[i % len(QUERIES)], "k": 10})
                    fig.setdefault("rss_every_100_mb", []).append(rss_mb(proc.pid))
            fig["push_s"] = round(time.perf_counter() - t0, 1)
            wait_idle(base, jobs, 3600)
            fig["sync_jobs"] = len(jobs)
            for q in QUERIES:
                http("POST", base + "/v1/recall", {"query": q, "k": 10})
            time.sleep(SETTLE_S)
            fig["end_rss_mb"] = rss_mb(proc.pid)
            fig["growth"] = round(fig["end_rss_mb"] / fig["warm_rss_mb"] - 1, 3)
            fig["growth_after_first_sync"] = round(fig["end_rss_mb"] / fig["after_first_sync_rss_mb"] - 1, 3)
            fig["load_average"] = os.getloadavg()[0]
            topic = largest_topic(base)
            fig["push_recallable_end_s"] = recallable_after(base, topic)
            servers.stop(proc)  # its close checkpoints
        fig["vault_bytes_end"], fig["beside_bytes_end"] = vault_bytes(db), beside_bytes(db)
        fig["vault_kib_per_push"] = round((fig["vault_bytes_end"] - fig["vault_bytes_start"]) / 1024 / max(args.pushes, 1), 1)
    if args.json:
        print(json.dumps(fig, indent=2))
    else:
        print(f"warm {fig['warm_rss_mb']} MB RSS (target < 400), {fig['after_first_sync_rss_mb']} MB after a first push and its sync; "
              f"after {args.pushes} pushes and {fig['sync_jobs']} syncs {fig['end_rss_mb']} MB ({fig['growth']:+.1%} from warm, "
              f"{fig['growth_after_first_sync']:+.1%} from the first sync; target within 10%); load average {fig['load_average']:.1f}")
        print(f"vault {fig['vault_bytes_start'] / 2**20:.1f} MiB -> {fig['vault_bytes_end'] / 2**20:.1f} MiB "
              f"({fig['vault_kib_per_push']} KiB a push; target ≤ 64); push → recallable {fig['push_recallable_start_s']} s "
              f"at the start, {fig['push_recallable_end_s']} s at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
