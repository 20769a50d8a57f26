"""Pay for what is new (issue 52 item 3), on real coding-agent sessions, each step the real
`nexus sync` command in a subprocess:

grown     a session synced without its last --tail lines, then synced again grown by them (the
          same file, a new version of the run), against
new-run   the same vault before the growth, synced with those --tail lines as a new session of
          their own (the same lines under another session id): what the new nodes cost alone.
          Target: grown ≤ 1.1 × new-run.
new-small four topics over two synced sessions, then one new small session added: against a sync
          with nothing new. Target: new-small ≤ 2 × no-change + the work of that session, the work
          being the seconds its Dagster steps took (read from the project's instance beside the vault).

    python benchmarks/bench_new_work.py [--sessions PATH ...] [--tail 20] [--no-recall] [--json]

Sessions default to the public ones under /work/corpus/data/agent-*/ (0.1–3 MB); their topics to
the same folder's topics under /work/corpus/topics/.
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

CORPUS = Path("/work/corpus")
DEFAULT_SESSIONS = [
    "agent-sgan0420/dex-claude-session.jsonl",
    "agent-leolin/posthog-claude-session.jsonl",
    "agent-akshatairan/pv-claude-code-session.jsonl",
]
SMALL = "agent-sarthib7/fundwise-codex-session.jsonl"
FOUR_TOPICS = ["agent-sarthib7", "agent-leolin"]


def sync(db: Path, runs: Path, topics: Path, no_recall: bool) -> tuple[float, list[dict]]:
    argv = [sys.executable, "-m", "nexus_assets.cli", "--db", str(db), "sync", "--json", "--runs-dir", str(runs),
            "--topics-dir", str(topics)]
    if no_recall:
        argv.append("--no-recall")
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=db.parent)
    elapsed = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"nexus sync exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return elapsed, json.loads(proc.stdout)


def session_id(lines: list[str]) -> str | None:
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        sid = doc.get("sessionId") or (doc.get("payload") or {}).get("id")
        if isinstance(sid, str):
            return sid
    return None


def as_new_session(lines: list[str], old: str, head: list[str]) -> list[str]:
    """The tail lines as a session of their own: another id, and the head's meta line (a Codex
    session names itself in its first line) so the reader sees a session."""
    new = "0000aaaa-0000-4000-8000-" + old[-12:]
    meta = [line for line in head[:3] if '"session_meta"' in line]
    return [line.replace(old, new) for line in [*meta, *lines]]


def copy_topics(folders: list[str], into: Path) -> Path:
    into.mkdir(parents=True)
    for folder in folders:
        for f in (CORPUS / "topics" / folder).glob("*.yaml"):
            shutil.copy(f, into / f.name)
    return into


def grown(session: Path, work: Path, tail: int, no_recall: bool) -> dict:
    lines = session.read_text(encoding="utf-8").splitlines(keepends=True)
    head, new = lines[:-tail], lines[-tail:]
    topics = copy_topics([session.parent.name], work / "topics")
    runs, db = work / "runs", work / "vault.duckdb"
    runs.mkdir()
    (runs / session.name).write_text("".join(head), encoding="utf-8")
    first_s, _ = sync(db, runs, topics, no_recall)
    # The same vault, before the growth, for the new-run case.
    other = work / "other"
    shutil.copytree(work, other, ignore=shutil.ignore_patterns("other"))
    (runs / session.name).write_text("".join(lines), encoding="utf-8")
    grown_s, _ = sync(db, runs, topics, no_recall)
    sid = session_id(lines)
    (other / "runs" / f"tail-{session.name}").write_text("".join(as_new_session(new, sid, head)), encoding="utf-8")
    new_run_s, _ = sync(other / "vault.duckdb", other / "runs", other / "topics", no_recall)
    return {
        "session": session.parent.name + "/" + session.name,
        "mb": round(session.stat().st_size / 1e6, 2),
        "tail_lines": tail,
        "first_sync_s": round(first_s, 2),
        "grown_s": round(grown_s, 2),
        "new_run_s": round(new_run_s, 2),
        "grown_over_new_run": round(grown_s / new_run_s, 2),
    }


def step_seconds(home: Path, run_ids: list[str]) -> float:
    """Seconds the Dagster steps of these runs took: the pipeline's work, without the process,
    imports, instance and run bookkeeping around it."""
    os.environ["DAGSTER_HOME"] = str(home)
    from dagster import DagsterInstance

    with DagsterInstance.get() as instance:
        return sum((s.end_time or 0) - (s.start_time or 0) for r in run_ids for s in instance.get_run_step_stats(r))


def new_small(work: Path, no_recall: bool) -> dict:
    topics = copy_topics(FOUR_TOPICS, work / "topics")
    runs, db = work / "runs", work / "vault.duckdb"
    runs.mkdir()
    # A project's own Dagster instance beside the vault (as `nexus init` makes), so step times can be read.
    (work / "dagster_home").mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "dagster_home" / "dagster.yaml", work / "dagster_home" / "dagster.yaml")
    for s in ["agent-sarthib7/fundwise-claude-session.jsonl", "agent-leolin/posthog-claude-session.jsonl"]:
        shutil.copy(CORPUS / "data" / s, runs / Path(s).name)
    sync(db, runs, topics, no_recall)
    no_change = min(sync(db, runs, topics, no_recall)[0] for _ in range(2))
    shutil.copy(CORPUS / "data" / SMALL, runs / Path(SMALL).name)
    new_s, results = sync(db, runs, topics, no_recall)
    # The runs that compiled (one run holds every topic of a sync since issue 60: counted once).
    compiled = sorted({r["dagster_run_id"] for r in results if r.get("dagster_run_id")})
    steps = step_seconds(work / "dagster_home", compiled)
    # A sync after it with nothing new: every topic is checked, none compiled.
    again_s, again = sync(db, runs, topics, no_recall)
    return {
        "session": SMALL,
        "kb": round((CORPUS / "data" / SMALL).stat().st_size / 1e3),
        "topics": len(list(topics.glob("*.yaml"))),
        "no_change_s": round(no_change, 2),
        "new_session_s": round(new_s, 2),
        "steps_s": round(steps, 2),
        "dagster_runs": len(compiled),
        "target_s": round(2 * no_change + steps, 2),
        "over_target": round(new_s / (2 * no_change + steps), 2),
        "sync_after_s": round(again_s, 2),
        "dagster_runs_after": len({r["dagster_run_id"] for r in again if r.get("dagster_run_id")}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", nargs="*", default=[str(CORPUS / "data" / s) for s in DEFAULT_SESSIONS])
    parser.add_argument("--tail", type=int, default=20, help="lines the session grows by")
    parser.add_argument("--no-recall", action="store_true")
    parser.add_argument("--skip-small", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out: dict = {"recall": not args.no_recall, "grown": []}
    for s in args.sessions:
        with tempfile.TemporaryDirectory(prefix="nexus-grown-") as tmp:
            row = grown(Path(s), Path(tmp), args.tail, args.no_recall)
        out["grown"].append(row)
        if not args.json:
            print(f"{row['session']:<50} {row['mb']:>5} MB  grown {row['grown_s']:>6.2f} s  new run {row['new_run_s']:>6.2f} s  "
                  f"ratio {row['grown_over_new_run']:>5.2f}x  (first sync {row['first_sync_s']:.1f} s)", flush=True)
    if not args.skip_small:
        with tempfile.TemporaryDirectory(prefix="nexus-small-") as tmp:
            out["new_small"] = r = new_small(Path(tmp), args.no_recall)
        if not args.json:
            print(f"new small session, {r['topics']} topics: {r['new_session_s']:.2f} s ({r['dagster_runs']} Dagster runs, "
                  f"steps {r['steps_s']:.2f} s); no change {r['no_change_s']:.2f} s; target 2x no-change + steps "
                  f"{r['target_s']:.2f} s: {r['over_target']}x; next sync {r['sync_after_s']:.2f} s "
                  f"({r['dagster_runs_after']} Dagster runs)", flush=True)
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
