"""Benchmark `nexus api` (issue 41) in one run over generated runs (bench_sync's generator, sized to
about --bricks distinct bricks; the largest topic is measured):

  bricks         GET /v1/topics/{id}/bricks over HTTP against the same query in-process
                 (`queries.bricks` + JSON), median of --repeats (target ≤ 2×)
  recall HTTP    POST /v1/recall, k=10, on the warm server: p50 / p95 ms (target p50 ≤ 50 ms)
  recall new     the same with queries never asked before (each is embedded)
  recall MCP     the `recall` tool at /mcp through the SDK's client, k=10: p50 / p95 ms
  recall local   the same recall in-process, for what HTTP adds (and the machine's load average)
  idle memory    the server's resident memory after start-up and warm-up (VmRSS), and after the runs
  push           (--pushes N) PUT /v1/runs/{id} of a new one-message run, then POST /v1/recall of its
                 text until its brick is the first result: seconds from the PUT, p50 / p90 of N
                 (target p50 ≤ 1 s); run ids and texts are new at each push
  push bytes     with --only-pushes: what the vault file (and its WAL) grew by over the N pushes,
                 measured once the server has stopped and checkpointed (issue 61: ≤ 64 KiB a push)

The server is the real `nexus api` in its own session on a free loopback port, stopped at the end.

    python benchmarks/bench_api.py [--bricks 10000] [--repeats 20] [--pushes 20] [--only-pushes] [--json]
    python benchmarks/bench_api.py --db VAULT --runs-dir D --topics-dir D ...   # an existing vault (pushes write to D/pushed)
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
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bench_default_sync import BYTES_PER_BRICK, QUERIES  # noqa: E402
from bench_sync import KEYWORDS, write_runs  # noqa: E402

from nexus_assets_tests import servers  # noqa: E402
from nexus_assets_tests.api_helpers import free_port  # noqa: E402


def vault_bytes(db: Path) -> int:
    """The vault file and its write-ahead log, as a backup would take them."""
    wal = Path(f"{db}.wal")
    return db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def beside_bytes(db: Path) -> int:
    """The folders the vault keeps beside its file (passages, search and vector indexes)."""
    stem = db.name.removesuffix(".duckdb")
    return sum(f.stat().st_size for d in db.parent.glob(f"{stem}.*") if d.is_dir() for f in d.rglob("*") if f.is_file())


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def http(method: str, url: str, body: dict | None = None) -> bytes:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=300) as r:
        return r.read()


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def summary(ms: list[float]) -> dict:
    ms = sorted(ms)
    def at(q: float) -> float:
        return round(ms[min(len(ms) - 1, int(len(ms) * q))], 1)

    return {"p50_ms": round(statistics.median(ms), 1), "p90_ms": at(0.90), "p95_ms": at(0.95), "n": len(ms)}


def mcp_recall(url: str, repeats: int) -> list[float]:
    import anyio
    from mcp.client.client import Client

    async def run() -> list[float]:
        times = []
        async with Client(url) as client:
            await client.call_tool("recall", {"query": QUERIES[0], "k": 10})
            for i in range(repeats):
                t0 = time.perf_counter()
                result = await client.call_tool("recall", {"query": QUERIES[i % len(QUERIES)], "k": 10})
                times.append((time.perf_counter() - t0) * 1000)
                assert not result.is_error, result.content
        return times

    return anyio.run(run)


def pushed_recallable(base: str, n: int, topic: str, errors: list[str], steps: list[dict] | None = None) -> list[float]:
    """Seconds from each PUT of a new one-message run until recall finds its text first; a recall
    that fails meanwhile (a release whose recall could fail while a sync writes) is noted in
    `errors` and asked again."""
    import urllib.error
    import uuid

    seconds = []
    for i in range(n):
        tag = uuid.uuid4().hex[:10]
        text = f"The sync compiler keeps brick {tag} in the vault with its checksum after push {i}."
        t0 = time.perf_counter()
        job = json.loads(http("PUT", f"{base}/v1/runs/bench-push-{tag}", {"status": "OPEN", "messages": [{"role": "user", "content": text}]}))
        while True:
            try:
                found = json.loads(http("POST", base + "/v1/recall", {"query": text, "topics": [topic], "k": 1}))["results"]
            except urllib.error.HTTPError as exc:
                errors.append(f"recall answered {exc.code} after push {i}")
                found = []
            if found and found[0]["content"] == text:
                break
            if time.perf_counter() - t0 > 120:
                raise SystemExit(f"push {i} was not recallable after 120 s")
            time.sleep(0.02)
        seconds.append(time.perf_counter() - t0)
        # Untimed: the push's job finishes before the next push (an earlier release folded a push
        # into a sync job already running, which had read the runs folder: it was never compiled).
        print(f"push {i}: recallable after {seconds[-1]:.2f} s", file=sys.stderr, flush=True)
        while job.get("sync_job_id"):
            try:
                status = json.loads(http("GET", f"{base}/v1/sync/{job['sync_job_id']}"))
            except urllib.error.HTTPError as exc:
                errors.append(f"sync status answered {exc.code} after push {i}")
                time.sleep(0.5)
                continue
            if status["status"] not in ("queued", "running"):
                if steps is not None:  # where a push compiled in the server spends its time
                    steps += [r["step_ms"] for r in status.get("results", []) if r.get("step_ms")]
                break
            time.sleep(0.05)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bricks", type=int, default=10_000, help="about this many distinct bricks in all (default 10000)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--db", help="an existing synced vault to serve instead of generating one")
    parser.add_argument("--runs-dir", help="with --db: its runs folder (pushes are written under it)")
    parser.add_argument("--topics-dir", help="with --db: its topics folder")
    parser.add_argument("--pushes", type=int, default=20, help="pushed exchanges timed until recallable (0: none)")
    parser.add_argument("--only-pushes", action="store_true", help="time the pushes only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    fig: dict = {}
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "NEXUS_API_TOKEN")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="nexus-api-") as tmp:
        work = Path(tmp)
        runs, topics = work / "runs", work / "topics"
        if args.db:
            db = Path(args.db)
            runs, topics = Path(args.runs_dir or runs), Path(args.topics_dir or topics)
        else:
            # One topic over every keyword of the generator: the whole ~N bricks in one topic.
            topics.mkdir(parents=True)
            (topics / "everything.yaml").write_text(
                "topic_id: everything\ndisplay_name: Everything\nextraction_policy:\n"
                "  scope_description: Every statement about the sync engine and its storage.\n"
                f"  required_keywords: [{', '.join(KEYWORDS)}]\nordering_rule: chronological\nstate: ACTIVE\n"
            )
            fig["generated"] = write_runs(runs, 0, args.seed, args.bricks * BYTES_PER_BRICK)
            db = work / "vault.duckdb"
            t0 = time.perf_counter()
            subprocess.run(servers.nexus("--db", str(db), "sync", "--runs-dir", str(runs), "--topics-dir", str(topics), "--json"),
                           env=env, check=True, capture_output=True)
            fig["sync_s"] = round(time.perf_counter() - t0, 1)
        from nexus_assets.services import queries
        from nexus_assets.services.requests import BricksPage, RecallRequest

        sizes = {t.topic_id: t.visible_bricks for t in queries.topics(db)}
        topic = max(sizes, key=sizes.get)
        fig["topic"], fig["topic_bricks"] = topic, sizes[topic]

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        argv_ = servers.nexus("--db", str(db), "api", "--port", str(port), "--runs-dir", str(runs), "--topics-dir", str(topics))
        fig["vault_bytes_start"] = vault_bytes(db)
        fig["beside_bytes_start"] = beside_bytes(db)
        t0 = time.perf_counter()
        with servers.running(argv_, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
            while True:
                try:
                    http("GET", base + "/v1/health")
                    break
                except OSError:
                    if proc.poll() is not None or time.perf_counter() - t0 > 300:
                        raise SystemExit("nexus api did not start")
                    time.sleep(0.2)
            fig["start_s"] = round(time.perf_counter() - t0, 1)
            time.sleep(2)
            fig["idle_rss_mb"] = rss_mb(proc.pid)
            if args.pushes:
                http("POST", base + "/v1/recall", {"query": QUERIES[0], "k": 10})
                errors: list[str] = []
                steps: list[dict] = []
                took = pushed_recallable(base, args.pushes, topic, errors, steps)
                if steps:
                    fig["push_step_ms_p50"] = {k: statistics.median(s.get(k, 0) for s in steps) for k in steps[0]}
                fig["push_recallable"] = {k.replace("_ms", "_s"): round(v / 1000, 2) if k != "n" else v
                                          for k, v in summary([s * 1000 for s in took]).items()}
                fig["push_http_errors"] = len(errors)
                fig["load_average_pushes"] = os.getloadavg()[0]
                fig["rss_after_pushes_mb"] = rss_mb(proc.pid)
            if args.only_pushes:
                servers.stop(proc)  # its close checkpoints: what the pushes left in the file
                fig["vault_bytes_end"] = vault_bytes(db)
                fig["beside_bytes_end"] = beside_bytes(db)
                if args.pushes:
                    fig["vault_kib_per_push"] = round((fig["vault_bytes_end"] - fig["vault_bytes_start"]) / 1024 / args.pushes, 1)
                print(json.dumps(fig, indent=2))
                return 0

            url = f"{base}/v1/topics/{topic}/bricks"
            http("GET", url)
            over_http = timed(lambda: http("GET", url), args.repeats)
            queries.bricks(db, BricksPage(topic_id=topic))
            in_process = timed(lambda: json.dumps([b.model_dump(mode="json") for b in queries.bricks(db, BricksPage(topic_id=topic))]).encode(), args.repeats)
            fig["bricks_http"] = summary(over_http)
            fig["bricks_in_process"] = summary(in_process)
            fig["bricks_ratio"] = round(fig["bricks_http"]["p50_ms"] / fig["bricks_in_process"]["p50_ms"], 2)

            http("POST", base + "/v1/recall", {"query": QUERIES[0], "k": 10})
            recall_ms = []
            for i in range(args.repeats):
                body = {"query": QUERIES[i % len(QUERIES)], "k": 10}
                recall_ms += timed(lambda body=body: http("POST", base + "/v1/recall", body), 1)
            fig["recall_http"] = summary(recall_ms)
            # Queries never asked before: the server embeds each (a repeated one is not embedded again).
            distinct_ms = []
            for i in range(args.repeats):
                body = {"query": f"{QUERIES[i % len(QUERIES)]} (asked {i} times)", "k": 10}
                distinct_ms += timed(lambda body=body: http("POST", base + "/v1/recall", body), 1)
            fig["recall_http_distinct"] = summary(distinct_ms)
            # The same recall in this process, holding the vault as the server does (issue 52; a
            # release without vault/warm.py opens it per query): what HTTP adds on top.
            try:
                from nexus_assets.vault.warm import hold

                hold(db)
            except ImportError:
                pass
            queries.recall(db, RecallRequest(query=QUERIES[0], k=10))
            local_ms = []
            for i in range(args.repeats):
                local_ms += timed(lambda i=i: queries.recall(db, RecallRequest(query=QUERIES[i % len(QUERIES)], k=10)).model_dump(mode="json"), 1)
            fig["recall_in_process"] = summary(local_ms)
            fig["load_average"] = os.getloadavg()[0]
            fig["recall_mcp"] = summary(mcp_recall(base + "/mcp", args.repeats))
            fig["rss_after_mb"] = rss_mb(proc.pid)
    if args.json:
        print(json.dumps(fig, indent=2))
    else:
        print(f"topic {fig['topic']}: {fig['topic_bricks']} visible bricks; server up in {fig['start_s']} s, idle {fig['idle_rss_mb']} MB RSS "
              f"({fig['rss_after_mb']} MB after the runs)")
        print(f"  bricks over HTTP   {fig['bricks_http']['p50_ms']:>8} ms p50 vs in-process {fig['bricks_in_process']['p50_ms']} ms: "
              f"{fig['bricks_ratio']}x (target ≤ 2)")
        print(f"  recall over HTTP   {fig['recall_http']['p50_ms']:>8} ms p50, {fig['recall_http']['p90_ms']} ms p90 (k=10; target p50 ≤ 20, p90 ≤ 50)")
        print(f"  recall, new query  {fig['recall_http_distinct']['p50_ms']:>8} ms p50, {fig['recall_http_distinct']['p90_ms']} ms p90 (HTTP)")
        print(f"  recall over MCP    {fig['recall_mcp']['p50_ms']:>8} ms p50, {fig['recall_mcp']['p90_ms']} ms p90")
        print(f"  recall in-process  {fig['recall_in_process']['p50_ms']:>8} ms p50 (the same query, no HTTP); load average {fig['load_average']:.1f}")
        if "push_recallable" in fig:
            print(f"  push → recallable  {fig['push_recallable']['p50_s']:>8} s p50, {fig['push_recallable']['p90_s']} s p90 "
                  f"({fig['push_recallable']['n']} pushes; target p50 ≤ 1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
