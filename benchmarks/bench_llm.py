"""Benchmark the openai extractor's path against an OpenAI-compatible stub with a fixed latency.

Generates deterministic Nexus runs (one chunk each) and topics that all admit every run, starts
the project's stub server (nexus_assets_tests/llm_server.py) on 127.0.0.1 answering every request
after `--latency` seconds, and runs one `nexus sync --extractor openai` in a subprocess. It reports:

  requests per distinct chunk   requests received / distinct request texts sent (target <= 1.1;
                                since prompt v3 a request may carry several runs' chunks)
  speedup over sequential       (requests x latency) / wall time of the LLM phase (first request
                                in to last reply out): what strictly sequential calls would take,
                                over what they took (target >= 8 at NEXUS_LLM_CONCURRENCY=16)
  peak in flight                the most requests the stub held at once

`--source DIR` runs another checkout's code (e.g. a worktree of an earlier commit) against the
same stub and data, so before and after are measured in one run:

    python benchmarks/bench_llm.py --runs 160 --topics 3 --latency 2 --concurrency 16 --token-budget 100 [--json]
    git worktree add /tmp/before <commit>
    python benchmarks/bench_llm.py --runs 20 --source /tmp/before   # fewer runs: it is sequential
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
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from nexus_assets_tests.llm_server import (  # noqa: E402
    DEFAULT_API_KEY,
    DEFAULT_MODEL,
    FakeOpenAIServer,
    first_sentences,
)
from nexus_assets_tests.project import Project, nexus_run  # noqa: E402


def make_project(root: Path, runs: int, topics: int) -> Project:
    p = Project(root)
    p.runs.mkdir(parents=True)
    p.topics.mkdir(parents=True)
    for t in range(topics):
        p.write_topic(f"topic-{t}", keywords=["vault"])
    for i in range(runs):
        p.write_run(
            f"r{i:04d}.json",
            nexus_run(
                f"run-{i:04d}",
                [
                    ("user", f"How does vault {i} keep history? It must never lose a brick."),
                    ("assistant", f"The vault {i} is append-only. Every change is a new row, and checksums prove it."),
                ],
            ),
        )
    return p


class Timed:
    """Wraps the model: notes when each request arrives and when its answer leaves, per chunk text."""

    def __init__(self, model):
        self.model = model
        self.lock = threading.Lock()
        self.first_in: float | None = None
        self.last_out: float | None = None
        self.chunks: set[str] = set()

    def __call__(self, body):
        now = time.monotonic()
        user = body["messages"][-1]["content"]
        # The fragment's line: '{"runs"' since prompt v3, '{"nodes"' before.
        fragment = next(line for line in user.splitlines() if line.startswith(('{"runs"', '{"nodes"')))
        with self.lock:
            self.first_in = now if self.first_in is None else min(self.first_in, now)
            self.chunks.add(fragment)
        return self.model(body)

    def done(self) -> None:
        with self.lock:
            self.last_out = time.monotonic()


def first_sentences_any_prompt():
    """`first_sentences`, also for the single-topic prompt v1 of earlier releases."""
    model = first_sentences()

    def answer(body):
        user = body["messages"][-1]["content"]
        if "- Topic id: " not in user:
            body = json.loads(json.dumps(body))
            body["messages"][-1]["content"] = user.replace("Topic id: ", "- Topic id: ", 1)
        return model(body)

    return answer


def run_once(args, source: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-llm-") as tmp:
        p = make_project(Path(tmp) / "proj", args.runs, args.topics)
        timed = Timed(first_sentences_any_prompt())
        with FakeOpenAIServer(handler=timed, latency_s=args.latency) as server:
            original = server._chat

            def chat(body, headers):
                try:
                    return original(body, headers)
                finally:
                    if args.latency:
                        # The reply leaves after the latency; note it then (the handler ran first).
                        threading.Timer(args.latency, timed.done).start()
                    else:
                        timed.done()

            server._chat = chat
            env = dict(
                os.environ,
                OPENAI_BASE_URL=server.base_url,
                OPENAI_API_KEY=DEFAULT_API_KEY,
                NEXUS_LLM_MODEL=DEFAULT_MODEL,
                NEXUS_LLM_CONCURRENCY=str(args.concurrency),
                PYTHONPATH=str(source),
            )
            if args.token_budget:
                env["NEXUS_LLM_TOKEN_BUDGET"] = str(args.token_budget)
            started = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "nexus_assets.cli", *p.sync_args(), "--extractor", "openai", "--json"],
                env=env,
                capture_output=True,
                text=True,
                cwd=str(source),
            )
            wall = time.monotonic() - started
            time.sleep(args.latency + 0.1)
            if proc.returncode != 0:
                raise SystemExit(f"sync failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
            results = json.loads(proc.stdout)
        requests = server.request_count
        phase = (timed.last_out or 0) - (timed.first_in or 0)
        return {
            "source": str(source),
            "runs": args.runs,
            "topics": args.topics,
            "latency_s": args.latency,
            "concurrency": args.concurrency,
            "requests": requests,
            "distinct_chunks": len(timed.chunks),
            "requests_per_distinct_chunk": round(requests / max(len(timed.chunks), 1), 3),
            "llm_phase_s": round(phase, 2),
            "sequential_s": round(requests * args.latency, 2),
            "speedup_over_sequential": round(requests * args.latency / phase, 2) if phase > 0 else None,
            "peak_in_flight": server.peak_in_flight,
            "sync_wall_s": round(wall, 2),
            "bricks": {r["topic_id"]: r["bricks"] for r in results},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=160)
    parser.add_argument("--topics", type=int, default=3)
    parser.add_argument("--latency", type=float, default=2.0, help="seconds each request takes at the stub")
    parser.add_argument("--concurrency", type=int, default=16, help="NEXUS_LLM_CONCURRENCY")
    parser.add_argument("--source", type=Path, default=HERE, help="the checkout whose nexus_assets runs")
    parser.add_argument(
        "--token-budget", type=int, default=None,
        help="NEXUS_LLM_TOKEN_BUDGET; since prompt v3 these short runs all share a few requests at the "
        "defaults, so measure concurrency with one run a request: --token-budget 100",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not (args.source / "nexus_assets").is_dir():
        raise SystemExit(f"--source {args.source} holds no nexus_assets package")
    result = run_once(args, args.source.resolve())
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        print(f"{key:>28}: {value}")


if __name__ == "__main__":
    main()
