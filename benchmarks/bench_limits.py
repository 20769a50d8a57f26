"""Benchmark the bounds of invariant 12: per-node work on one long message, and the cost of
refusing deeply nested files.

  message   one message of ordinary sentences of 1, 10 and 30 MB: the embedded extractor
            (sentence splitting), the gate and the drift check over its pointers, as seconds per
            MB. Linear work shows as a flat column.
  deep      files nested 200k..2M levels (arrays and objects; a run file, an export, a zip), each
            read by the run-file reader in a fresh child process: peak RSS against the file's
            size, and the time to refuse it.

    python benchmarks/bench_limits.py [--sizes 1 10 30] [--depths 200000 1000000 2000000] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WORDS = "the quick brown fox jumps over a lazy dog near our river bank while storage grows".split()


def ordinary_text(megabytes: float, keyword_every: int = 20) -> str:
    out, size, i = [], 0, 0
    while size < megabytes * 1_000_000:
        body = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(11))
        if i % keyword_every == 0:
            body += " and the vault remembers it"
        sentence = body[0].upper() + body[1:] + f" {i}. "
        out.append(sentence)
        size += len(sentence)
        i += 1
    return "".join(out)


def bench_message(sizes: list[float]) -> list[dict]:
    from nexus_assets.core.models import ExtractionPolicy, Node, Run, Topic
    from nexus_assets.drift.rules import NodeCache, slice_problem
    from nexus_assets.extract.embedded import extract_embedded
    from nexus_assets.gate.rules import validate_pointers

    topic = Topic(topic_id="t", display_name="t", extraction_policy=ExtractionPolicy(scope_description="x", required_keywords=("vault",)))
    rows = []
    for mb in sizes:
        text = ordinary_text(mb)
        doc = {"run_id": "r", "status": "CLOSED", "messages": [{"role": "user", "content": text}]}
        run = Run("r", "CLOSED", None, "nexus", doc, (Node(("messages", 0, "content"), "user_message", None, ("messages", 0)),))
        t = time.perf_counter()
        pointers = extract_embedded(topic, run)
        extract = time.perf_counter() - t
        t = time.perf_counter()
        occurrences, _ = validate_pointers(pointers, topic_id="t", run=run)
        gate = time.perf_counter() - t
        t = time.perf_counter()
        cache = NodeCache(doc)
        assert not any(slice_problem(doc, o.address, o.content, cache) for o in occurrences)
        verify = time.perf_counter() - t
        rows.append(
            {
                "mb": mb,
                "pointers": len(pointers),
                "extract_s_per_mb": round(extract / mb, 3),
                "gate_s_per_mb": round(gate / mb, 3),
                "verify_s_per_mb": round(verify / mb, 3),
            }
        )
    return rows


READER = """
import json, sys, time
from pathlib import Path
from nexus_assets.ingest.runfiles import iter_run_file
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the (larger) benchmark process.
def hwm():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
before = hwm()
t = time.perf_counter()
items = list(iter_run_file(Path(sys.argv[1]), sys.argv[1]))
elapsed = time.perf_counter() - t
problems = [i.problem for i in items if hasattr(i, "problem")]
print(json.dumps({"seconds": elapsed, "baseline_kb": before, "peak_kb": hwm(), "problems": problems}))
"""


def deep_files(root: Path, depth: int) -> dict[str, Path]:
    arrays = "[" * depth + "]" * depth
    objects = '{"a":' * depth + "1" + "}" * depth
    files = {
        "run-arrays.json": '{"run_id": "d", "status": "CLOSED", "messages": [], "extra": ' + arrays + "}",
        "run-objects.json": '{"run_id": "d", "status": "CLOSED", "messages": [], "extra": ' + objects + "}",
        "export-arrays.json": arrays,
    }
    out = {}
    for name, text in files.items():
        out[name] = root / f"{depth}-{name}"
        out[name].write_text(text)
    out["export.zip"] = root / f"{depth}-export.zip"
    with zipfile.ZipFile(out["export.zip"], "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("conversations.json", arrays)
    return out


def bench_deep(depths: list[int]) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for depth in depths:
            for name, path in deep_files(Path(tmp), depth).items():
                done = subprocess.run([sys.executable, "-c", READER, str(path)], capture_output=True, text=True, timeout=600, cwd=REPO)
                result = json.loads(done.stdout)
                rows.append(
                    {
                        "file": name,
                        "depth": depth,
                        "file_mb": round(path.stat().st_size / 1e6, 2),
                        "refuse_s": round(result["seconds"], 3),
                        "peak_rss_mb": round(result["peak_kb"] / 1024, 1),
                        "rss_over_baseline_mb": round((result["peak_kb"] - result["baseline_kb"]) / 1024, 1),
                        # Deep zips are tiny and inflate hundreds of times: the ratio limit may refuse them first.
                        "refused_by": next(
                            (v for v in ("NEXUS_MAX_JSON_DEPTH", "NEXUS_MAX_ZIP_RATIO") if result["problems"] and v in result["problems"][0]),
                            "NOT REFUSED",
                        ),
                    }
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 10, 30])
    parser.add_argument("--depths", type=int, nargs="+", default=[200_000, 1_000_000, 2_000_000])
    parser.add_argument("--skip-deep", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = {"message": bench_message(args.sizes), "deep": [] if args.skip_deep else bench_deep(args.depths)}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print("one long message (seconds per MB; flat = linear)")
    print(f"{'MB':>6} {'pointers':>9} {'extract':>8} {'gate':>8} {'verify':>8}")
    for r in report["message"]:
        print(f"{r['mb']:>6} {r['pointers']:>9} {r['extract_s_per_mb']:>8} {r['gate_s_per_mb']:>8} {r['verify_s_per_mb']:>8}")
    print("\nrefusing deep files (peak RSS of the reading process)")
    print(f"{'file':<20} {'depth':>9} {'file MB':>8} {'seconds':>8} {'peak MB':>8} {'+MB':>6} refused by")
    for r in report["deep"]:
        print(f"{r['file']:<20} {r['depth']:>9} {r['file_mb']:>8} {r['refuse_s']:>8} {r['peak_rss_mb']:>8} {r['rss_over_baseline_mb']:>6} {r['refused_by']}")


if __name__ == "__main__":
    main()
