"""Benchmark the JSON Lines session reader (issue 42) against the floor any reader pays: read the
file a line at a time, `json.loads` each line, sha256 the bytes.

  floor      lines parsed + sha256 of the file, nothing kept
  reader     `iter_run_file`: the line checks (length, nesting, values), the run document, its
             version hash (canonical JSON), the nodes
  +records   the reader, then every node's stored record (text and sha256 checksum), as ingestion
             stores them

A generated Claude Code session of real shape (prompts, replies split over lines, thinking, tool
calls and tool results, bookkeeping lines) is written once per size; figures are the best of
`--repeat` runs, in MB/s of file.

`--file` measures real session files instead (yours, under ~/.claude/projects or ~/.codex).

    python benchmarks/bench_jsonl.py [--sizes 5 20] [--file PATH ...] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WORDS = "the sync runs nightly while the backup waits for its window and every brick keeps its source".split()


def sentence(i: int, n: int = 14) -> str:
    body = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(n))
    return body[0].upper() + body[1:] + f" {i}."


def session_lines(megabytes: float):
    """Claude Code lines until `megabytes` of JSON Lines are written."""
    from nexus_assets_tests.sessions import claude_event

    size, n, i = 0, 0, 0
    while size < megabytes * 1_000_000:
        n += 1
        prompt = claude_event("user", n % 60, " ".join(sentence(i + k) for k in range(3)), parent=None)
        thinking = claude_event("assistant", n % 60, [{"type": "thinking", "thinking": " ".join(sentence(i + k) for k in range(4)), "signature": "x" * 200}])
        reply = claude_event("assistant", n % 60, [{"type": "text", "text": " ".join(sentence(i + k) for k in range(8))}])
        call = claude_event("assistant", n % 60, [{"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": f"grep -n sync file{n}.py", "description": "Find the sync"}}])
        result = claude_event("user", n % 60, [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "\n".join(sentence(i + k, 10) for k in range(20))}])
        snapshot = {"type": "file-history-snapshot", "messageId": f"m{n}", "snapshot": {"trackedFileBackups": {}}, "isSnapshotUpdate": False}
        for value in (prompt, thinking, reply, call, result, snapshot):
            text = json.dumps(value, separators=(",", ":")) + "\n"
            size += len(text)
            yield text
        i += 7


def floor(path: Path) -> None:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for raw in fh:
            digest.update(raw)
            json.loads(raw)
    digest.hexdigest()


def reader(path: Path, *, records: bool) -> int:
    from nexus_assets.core.models import Run
    from nexus_assets.ingest.nodes import node_records
    from nexus_assets.ingest.runfiles import iter_run_file

    nodes = 0
    for item in iter_run_file(path, str(path)):
        if isinstance(item, Run):
            nodes += sum(1 for _ in node_records(item)) if records else len(item.nodes)
    return nodes


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[5, 20], help="session sizes in MB")
    parser.add_argument("--file", type=Path, nargs="*", default=[], help="real session files to measure instead")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = list(args.file)
        for mb in [] if args.file else args.sizes:
            path = Path(tmp) / f"session-{mb}.jsonl"
            with path.open("w", encoding="utf-8") as fh:
                fh.writelines(session_lines(mb))
            paths.append(path)
        reader(paths[0], records=False)  # imports, outside the timings
        for path in paths:
            size = path.stat().st_size / 1_000_000
            lines = sum(1 for _ in path.open("rb"))
            t_floor = best(lambda: floor(path), args.repeat)
            t_reader = best(lambda: reader(path, records=False), args.repeat)
            nodes = reader(path, records=False)
            t_records = best(lambda: reader(path, records=True), args.repeat)
            rows.append(
                {
                    "mb": round(size, 1),
                    "lines": lines,
                    "nodes": nodes,
                    "floor_mb_s": round(size / t_floor, 1),
                    "reader_mb_s": round(size / t_reader, 1),
                    "records_mb_s": round(size / t_records, 1),
                    "reader_vs_floor": round(t_reader / t_floor, 2),
                    "records_vs_floor": round(t_records / t_floor, 2),
                }
            )
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'MB':>6} {'lines':>8} {'nodes':>8} {'floor MB/s':>11} {'reader MB/s':>12} {'+records MB/s':>14} {'reader/floor':>13} {'+records/floor':>15}")
    for r in rows:
        print(
            f"{r['mb']:>6} {r['lines']:>8} {r['nodes']:>8} {r['floor_mb_s']:>11} {r['reader_mb_s']:>12} {r['records_mb_s']:>14} "
            f"{r['reader_vs_floor']:>12}x {r['records_vs_floor']:>14}x"
        )


if __name__ == "__main__":
    main()
