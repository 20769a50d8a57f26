"""The default sync of a large ChatGPT export, this build against an earlier one, in one run
(issue 40: "no slower and no larger than today").

One export is generated (bench_sync's generator, `--export-mb`, default 100) with bench_sync's two
topics; then `nexus sync` (the default: offline extractor, recall on) compiles it into a fresh
vault, once with the code of `--before` (a git ref, checked out into a temporary worktree and run
with this interpreter) and once with this checkout. Each command runs in a fresh child process,
so its wall seconds and peak RSS are its own.

    python benchmarks/bench_export_sync.py [--export-mb 100] [--before b83e293] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sync import write_chatgpt_export, write_topics  # noqa: E402  (the same generator)

REPO = Path(__file__).resolve().parents[1]


def child(code_dir: Path, argv: list[str], cwd: Path) -> dict:
    """Wall seconds, peak RSS and the tail of the output of one `nexus` command run from `code_dir`."""
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env["PYTHONPATH"] = str(code_dir)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "nexus_assets.cli", *argv], cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return {"exit": proc.returncode, "seconds": round(seconds, 1), "peak_rss": peak, "tail": (proc.stdout + proc.stderr)[-600:]}


def measured(code_dir: Path, argv: list[str], cwd: Path) -> dict:
    """`child` in a fresh interpreter of this script, so RUSAGE_CHILDREN holds that command alone."""
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps([str(code_dir), argv, str(cwd)])], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export-mb", type=float, default=100.0)
    parser.add_argument("--before", default="b83e293", help="git ref of the earlier build (default: the release before issue 40)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=("before", "after"), help="measure one build (another run's figure for the other)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        code_dir, command, cwd = json.loads(args.child)
        print(json.dumps(child(Path(code_dir), command, Path(cwd))))
        return 0

    work = Path(tempfile.mkdtemp(prefix="nexus-export-bench-"))
    before_dir = work / "before-code"
    try:
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(before_dir), args.before],
                       check=True, capture_output=True)
        runs, topics = work / "runs", work / "topics"
        write_topics(topics)
        generated = write_chatgpt_export(runs / "export" / "conversations.json", int(args.export_mb * 1024 * 1024), args.seed)
        result = {"export": generated, "before_ref": args.before}
        for name, code in (("before", before_dir), ("after", REPO)):
            if args.only and name != args.only:
                continue
            db = work / f"{name}.duckdb"
            result[name] = measured(code, ["--db", str(db), "sync", "--runs-dir", str(runs), "--topics-dir", str(topics)], work)
            result[name]["vault_bytes"] = sum(p.stat().st_size for p in work.glob(f"{name}.duckdb*") if p.is_file())
        if not args.only:
            b, a = result["before"], result["after"]
            result["after_over_before_seconds"] = round(a["seconds"] / b["seconds"], 2)
            result["after_over_before_peak_rss"] = round(a["peak_rss"] / b["peak_rss"], 2)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            mb = generated["bytes"] / 1024 / 1024
            print(f"export: {mb:.0f} MB, {generated['conversations']} conversations")
            for name in ("before", "after"):
                if name not in result:
                    continue
                r = result[name]
                print(f"{name:6} ({args.before if name == 'before' else 'this build'}): {r['seconds']:7.1f} s  "
                      f"peak RSS {r['peak_rss'] / 2**30:.2f} GiB  vault {r['vault_bytes'] / 2**20:.0f} MiB  exit {r['exit']}")
            if not args.only:
                print(f"after/before: {result['after_over_before_seconds']}x time, {result['after_over_before_peak_rss']}x peak RSS")
        return 0
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(before_dir)], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
