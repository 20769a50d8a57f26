"""A catch-all topic over real conversation exports, the default sync, this build against an earlier
one, in one run (issue 49 "Targets": a catch-all topic over 301 real conversations in ≤ 60 s).

The exports given are copied into a temporary runs folder (never into the repository), with one
topic that names no keyword ("Everything", the default min_relevance); `nexus sync` then compiles
them into a fresh vault, once with the code of `--before` (a git ref, unpacked by `git archive`)
and once with this checkout. Each sync runs in a child process of its own: its wall seconds, CPU
seconds (user + system, the figure to compare on a shared machine) and peak RSS are its own.
The two vaults must hold the same manifest.

    python benchmarks/bench_catch_all.py /work/corpus/data/chat-*/conversations.json [--before main] [--json]
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

REPO = Path(__file__).resolve().parents[1]
TOPIC = """topic_id: everything
display_name: Everything
extraction_policy:
  scope_description: "Anything the conversation states: facts, decisions, preferences, plans and how-tos."
  exclusion_criteria: []
ordering_rule: chronological
state: ACTIVE
"""


def child(code_dir: str, argv: list[str], cwd: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env["PYTHONPATH"] = code_dir
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "nexus_assets.cli", *argv], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {"exit": proc.returncode, "wall_s": round(wall, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
           "peak_rss_mb": usage.ru_maxrss // 1024}
    if proc.returncode == 0:
        (result,) = json.loads(proc.stdout)
        out |= {"manifest_hash": result.get("manifest_hash"), "bricks": sum(result.get("bricks", {}).values())}
    else:
        out["tail"] = proc.stderr[-800:]
    return out


def measured(code_dir: Path, argv: list[str], cwd: Path) -> dict:
    """`child` in a fresh interpreter, so RUSAGE_CHILDREN holds that one sync alone."""
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps([str(code_dir), argv, str(cwd)])],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("exports", nargs="+", type=Path)
    parser.add_argument("--before", default="main", help="git ref of the earlier build (default main)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="nexus-catch-all-"))
    try:
        runs, topics, before = work / "runs", work / "topics", work / "before-code"
        for d in (runs, topics, before):
            d.mkdir()
        for export in args.exports:
            shutil.copyfile(export, runs / f"{export.parent.name}-{export.name}")
        (topics / "everything.yaml").write_text(TOPIC, encoding="utf-8")
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.before], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
        from nexus_assets.llm.planning import current_runs

        result: dict = {"conversations": len(current_runs(runs)), "before_ref": args.before}
        for name, code in (("before", before), ("after", REPO)):
            sync = ["--db", str(work / f"{name}.duckdb"), "sync", "--runs-dir", str(runs), "--topics-dir", str(topics), "--json"]
            result[name] = measured(code, sync, work)
        result["same_manifest"] = result["before"].get("manifest_hash") == result["after"].get("manifest_hash")
        print(json.dumps(result, indent=2) if args.json else "\n".join(f"{k:14} {v}" for k, v in result.items()))
        return 0 if result["same_manifest"] else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(*json.loads(sys.argv[2]))))
        sys.exit(0)
    sys.exit(main())
