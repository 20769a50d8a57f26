#!/usr/bin/env python3
"""Real-data recall benchmark (issue 58): can `nexus recall` find the one sentence that answers a
question a person would ask months later, in their own words?

For each person in questions.jsonl:
  1. lay out a folder with data/runs/ (the person's raw files) and data/topics/ (their topic files);
  2. run `<nexus> sync` there (cwd = that folder; it writes data/nexus.duckdb);
  3. for each question run `<nexus> recall QUESTION --k 10 --json` (no --topic): a hit when any
     result's source overlaps the answer's span (same run_id and json_path, overlapping [start, end));
  4. baseline: plain Okapi BM25 (k1 1.2, b 0.75, lowercase \\w+ tokens) over the untouched messages -
     every user/assistant message node of the person's runs is one document, read with Nexus's own
     reader (nexus_assets.ingest.runfiles.iter_run_file, as benchmarks/selection/units.py does);
     a hit when the answer's node is in the top k.
Prints per-person and overall hit@k for both, and the mean top confidence of recall on the related
questions and on unrelated.jsonl (questions nothing in the person's data answers). --json OUT writes
every figure and every question's outcome.

Two diagnostics are printed beside them (they change no figure above): whether the answer's span is
a visible brick at all (the ceiling of recall over bricks: `nexus topics` + `nexus bricks --json`),
and a sentence-level BM25 (each sentence unit a document, a hit when a top-k unit overlaps the
answer), which is the same test recall's sources get. The node-level baseline is weak on coding
sessions with few, long messages: with 10 or fewer message nodes every node is in the top 10.

    python benchmarks/bench_questions.py --data DIR                       # this checkout's .venv/bin/nexus
    python benchmarks/bench_questions.py --data DIR --nexus /other/.venv/bin/nexus --keep /tmp/qset-vaults --json out.json
    python benchmarks/bench_questions.py --data DIR --person uzaxirr --repl

The questions, topics and sources live in `benchmarks/questions/` (questions and topics written
here; the answers are named by address and sha256 only). The raw files are not in this repository
(most have no licence): fetch each from the repository and commit its `questions/sources/<person>.md`
names into DIR/<person>/<file>. None of these people was used to train or tune anything.

--keep DIR keeps each person's synced folder in DIR/<person>/ and reuses it on a later run when the
nexus build (its package sources) and the person's inputs (run and topic files) are unchanged.
Standard library and numpy only; the reader runs in the nexus executable's own Python.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent / "questions"
TOKEN = re.compile(r"\w+")

# Runs in the nexus executable's Python: one JSON line per user/assistant message node
# (run_id, json_path, node_type, text, and its sentence units' [start, end) spans from Nexus's own
# splitter), read exactly as benchmarks/selection/units.py reads a file.
READER = r"""
import json, sys
from pathlib import Path
from nexus_assets.core.models import Run
from nexus_assets.ingest.scope import node_text
try:
    from nexus_assets.extract.sentences import sentence_units
except ImportError:  # later trees keep the splitter in core
    from nexus_assets.core.sentences import sentence_units
from nexus_assets.ingest.runfiles import iter_run_file
for name in sys.argv[1:]:
    path = Path(name)
    for item in iter_run_file(path, path.name):
        if not isinstance(item, Run):
            continue
        for node in item.nodes:
            if node.node_type not in ("user_message", "assistant_message"):
                continue
            text = node_text(item, node)
            if isinstance(text, str):
                spans = [[a, b] for a, b, _ in sentence_units(text)]
                print(json.dumps({"file": path.name, "run_id": item.run_id, "json_path": node.path,
                                  "node_type": node.node_type, "text": text, "units": spans}, ensure_ascii=False))
"""


ENV = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # set in main(); --pythonpath adds PYTHONPATH


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def nexus_python(nexus: Path) -> str:
    """The interpreter a console-script `nexus` runs under (its shebang), else a sibling python."""
    try:
        first = nexus.read_bytes().split(b"\n", 1)[0].decode()
        if first.startswith("#!"):
            cand = first[2:].strip().split()[0]
            if os.path.exists(cand):
                return cand
    except OSError:
        pass
    for name in ("python", "python3"):
        cand = nexus.parent / name
        if cand.exists():
            return str(cand)
    return sys.executable


def build_fingerprint(nexus: Path, python: str) -> str:
    """A hash of the nexus build: the executable and every file of the nexus_assets package."""
    h = hashlib.sha256(nexus.read_bytes())
    out = subprocess.run([python, "-c", "import nexus_assets, os; print(os.path.dirname(nexus_assets.__file__))"],
                         capture_output=True, text=True, env=ENV)
    pkg = Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None
    h.update(str(pkg).encode())
    if pkg and pkg.is_dir():
        for f in sorted(p for p in pkg.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            h.update(str(f.relative_to(pkg)).encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    else:
        h.update(b"no-package-found")
    return h.hexdigest()


def inputs_fingerprint(files: list[Path], topics: list[Path]) -> str:
    h = hashlib.sha256()
    for kind, group in (("run", files), ("topic", topics)):
        for f in sorted(group, key=lambda p: p.name):
            h.update(f"{kind}:{f.name}:".encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


# ---------------------------------------------------------------- BM25 baseline

def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


class BM25:
    """Okapi BM25 with k1 1.2, b 0.75 and idf ln(1 + (N - df + 0.5) / (df + 0.5))."""

    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.tf = [Counter(tokens(d)) for d in docs]
        self.len = np.array([sum(c.values()) for c in self.tf], dtype=float)
        self.avg = float(self.len.mean()) if len(docs) else 0.0
        df = Counter()
        for c in self.tf:
            df.update(c.keys())
        n = len(docs)
        self.idf = {t: math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        self.post = defaultdict(list)  # term -> [(doc, tf)]
        for i, c in enumerate(self.tf):
            for t, f in c.items():
                self.post[t].append((i, f))

    def scores(self, query: str) -> np.ndarray:
        s = np.zeros(len(self.tf))
        norm = self.k1 * (1 - self.b + self.b * self.len / (self.avg or 1.0))
        for t in set(tokens(query)):  # each distinct query term once
            idf = self.idf.get(t)
            if idf is None:
                continue
            for i, f in self.post[t]:
                s[i] += idf * f * (self.k1 + 1) / (f + norm[i])
        return s

    def top(self, query: str, k: int) -> list[int]:
        s = self.scores(query)
        order = np.lexsort((np.arange(len(s)), -s))  # score desc, then document order
        return [int(i) for i in order[:k] if s[i] > 0]


# ---------------------------------------------------------------- recall

def sources_of(result: dict) -> list[dict]:
    """A result's source addresses, whatever its kind: bricks carry `sources` (a list); a
    `kind: "passage"` result may carry `sources` with one entry or a single `source`."""
    out = []
    srcs = result.get("sources")
    if isinstance(srcs, dict):
        srcs = [srcs]
    if isinstance(srcs, list):
        out += [s for s in srcs if isinstance(s, dict)]
    one = result.get("source")
    if isinstance(one, dict):
        out.append(one)
    return out


def overlaps(src: dict, ans: dict) -> bool:
    if src.get("run_id") != ans["run_id"] or src.get("json_path") != ans["json_path"]:
        return False
    s, e = src.get("start"), src.get("end")
    if not isinstance(s, int) or not isinstance(e, int):
        return True  # a node-level source (no span): the same node counts
    return s < ans["end"] and ans["start"] < e


def confidence_of(result: dict) -> float:
    c = result.get("confidence")
    try:
        return float(c)
    except (TypeError, ValueError):
        return 0.0


def judge(out: dict, ans: dict | None) -> dict:
    results = out.get("results") if isinstance(out, dict) else None
    results = [r for r in results or [] if isinstance(r, dict)]
    kinds = Counter(str(r.get("kind", "brick")) for r in results)
    top = max((confidence_of(r) for r in results), default=0.0)
    rank = None
    if ans is not None:
        for i, r in enumerate(results, 1):
            if any(overlaps(s, ans) for s in sources_of(r)):
                rank = i
                break
    return {"hit": rank is not None, "rank": rank, "top_confidence": top, "n_results": len(results),
            "result_kinds": dict(kinds), "not_embedded": out.get("not_embedded") if isinstance(out, dict) else None}


def recall_one(nexus: str, cwd: Path, query: str, k: int, timeout: int) -> dict:
    p = subprocess.run([nexus, "recall", query, "--k", str(k), "--json"], cwd=cwd, capture_output=True,
                       text=True, timeout=timeout, env=ENV)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip()[-500:], "results": []}
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"error": "not JSON: " + p.stdout[-300:], "results": []}


def recall_repl(nexus: str, cwd: Path, queries: list[str], k: int, timeout: int) -> list[dict]:
    """All queries through one `nexus recall --repl --json` process (the model loads once)."""
    clean = [" ".join(q.split()) for q in queries]
    p = subprocess.run([nexus, "recall", "--repl", "--k", str(k), "--json"], cwd=cwd, input="\n".join(clean) + "\n",
                       capture_output=True, text=True, timeout=timeout * max(1, len(clean)), env=ENV)
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    outs = []
    for l in lines:
        try:
            outs.append(json.loads(l))
        except json.JSONDecodeError:
            outs.append({"error": "not JSON", "results": []})
    if len(outs) != len(clean):
        raise RuntimeError(f"--repl answered {len(outs)} of {len(clean)} queries: {p.stderr[-500:]}")
    return outs


def visible_brick_sources(nexus: str, cwd: Path) -> list[dict]:
    """Every source address of every visible brick in the vault (all topics): what recall over
    bricks can ever return. A diagnostic only, it does not change a hit."""
    p = subprocess.run([nexus, "topics", "--json"], cwd=cwd, capture_output=True, text=True, env=ENV)
    try:
        topics = [t["topic_id"] for t in json.loads(p.stdout)]
    except (json.JSONDecodeError, KeyError, TypeError):
        return []
    out = []
    for t in topics:
        b = subprocess.run([nexus, "bricks", t, "--json"], cwd=cwd, capture_output=True, text=True, env=ENV)
        try:
            bricks = json.loads(b.stdout)
        except json.JSONDecodeError:
            continue
        for brick in bricks if isinstance(bricks, list) else []:
            out += sources_of(brick)
    return out


# ---------------------------------------------------------------- per person

def prepare(person: str, data_dir: Path, topics_dir: Path, nexus: Path, build: str, keep: Path | None,
            timeout: int) -> tuple[Path, dict]:
    files = sorted(p for p in (data_dir / person).iterdir() if p.is_file())
    topics = sorted((topics_dir / person).glob("*.yaml"))
    if not files or not topics:
        raise SystemExit(f"{person}: no run files in {data_dir / person} or no topics in {topics_dir / person}")
    stamp = {"build": build, "inputs": inputs_fingerprint(files, topics), "files": [f.name for f in files],
             "topics": [t.name for t in topics]}
    folder = (keep / person) if keep else Path(tempfile.mkdtemp(prefix=f"qset-{person}-"))
    stamp_file = folder / "qset-stamp.json"
    if keep and stamp_file.exists() and (folder / "data" / "nexus.duckdb").exists():
        old = json.loads(stamp_file.read_text())
        if old.get("build") == stamp["build"] and old.get("inputs") == stamp["inputs"] and old.get("sync_rc") == 0:
            stamp.update(reused=True, sync_seconds=old.get("sync_seconds"), sync_rc=0)
            return folder, stamp
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "data" / "runs").mkdir(parents=True)
    (folder / "data" / "topics").mkdir(parents=True)
    for f in files:
        shutil.copy2(f, folder / "data" / "runs" / f.name)
    for t in topics:
        shutil.copy2(t, folder / "data" / "topics" / t.name)
    t0 = time.monotonic()
    p = subprocess.run([str(nexus), "sync"], cwd=folder, capture_output=True, text=True, timeout=timeout, env=ENV)
    stamp.update(reused=False, sync_seconds=round(time.monotonic() - t0, 1), sync_rc=p.returncode,
                 sync_tail=(p.stdout + p.stderr).strip().splitlines()[-12:])
    stamp_file.write_text(json.dumps(stamp, indent=1))
    if p.returncode != 0:
        print(f"  {person}: sync exited {p.returncode}:\n    " + "\n    ".join(stamp["sync_tail"]), file=sys.stderr)
    return folder, stamp


def read_docs(python: str, files: list[Path]) -> list[dict]:
    p = subprocess.run([python, "-c", READER, *map(str, files)], capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        raise SystemExit("reading the runs with Nexus's reader failed:\n" + p.stderr[-2000:])
    return [json.loads(l) for l in p.stdout.splitlines() if l.strip()]


def rate(rows: list[dict], key: str) -> float | None:
    return round(sum(1 for r in rows if r[key]) / len(rows), 4) if rows else None


def mean(xs: list[float]) -> float | None:
    return round(float(np.mean(xs)), 4) if xs else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nexus", default=str(HERE.parents[1] / ".venv" / "bin" / "nexus"), help="the nexus executable to measure")
    ap.add_argument("--pythonpath", default=None,
                    help="put this source tree first on PYTHONPATH for nexus and the reader (e.g. a clean checkout "
                         "of a release, to measure it with the same interpreter); bytecode is never written")
    ap.add_argument("--questions", type=Path, default=HERE / "questions.jsonl")
    ap.add_argument("--unrelated", type=Path, default=HERE / "unrelated.jsonl")
    ap.add_argument("--data", type=Path, required=True, help="DIR/<person>/<file>: the raw files (fetched, never committed)")
    ap.add_argument("--topics", type=Path, default=HERE / "topics", help="DIR/<person>/*.yaml")
    ap.add_argument("--person", action="append", help="only these people (repeatable)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--keep", type=Path, default=None, help="keep synced folders in DIR/<person>/ and reuse them")
    ap.add_argument("--repl", action="store_true", help="send a person's queries through one `recall --repl` process")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds for one sync (a recall gets 300)")
    ap.add_argument("--json", type=Path, default=None, help="write every figure and outcome here")
    args = ap.parse_args(argv)

    if args.pythonpath:
        ENV["PYTHONPATH"] = os.pathsep.join(x for x in (str(Path(args.pythonpath).resolve()), os.environ.get("PYTHONPATH")) if x)
    nexus = Path(args.nexus).resolve()
    if not nexus.exists():
        raise SystemExit(f"no nexus executable at {nexus}")
    python = nexus_python(nexus)
    build = build_fingerprint(nexus, python)
    questions = load_jsonl(args.questions)
    unrelated = load_jsonl(args.unrelated) if args.unrelated.exists() else []
    people = sorted({q["person"] for q in questions})
    if args.person:
        people = [p for p in people if p in set(args.person)]
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)

    report = {"nexus": str(nexus), "pythonpath": ENV.get("PYTHONPATH"), "build": build, "k": args.k, "mode": "repl" if args.repl else "one process per question",
              "people": {}, "questions": [], "unrelated": []}
    print(f"nexus {nexus}{' with PYTHONPATH=' + ENV['PYTHONPATH'] if ENV.get('PYTHONPATH') else ''} "
          f"(build {build[:12]}), k={args.k}, {len(people)} people")
    for person in people:
        qs = [q for q in questions if q["person"] == person]
        us = [u for u in unrelated if u["person"] == person]
        folder, stamp = prepare(person, args.data, args.topics, nexus, build, args.keep, args.timeout)
        files = sorted(p for p in (args.data / person).iterdir() if p.is_file())
        docs = read_docs(python, files)
        bm25 = BM25([d["text"] for d in docs])
        node_index = {(d["run_id"], d["json_path"]): i for i, d in enumerate(docs)}
        # A stricter, sentence-level BM25 (a diagnostic beside the node-level baseline the brief
        # asks for): every sentence unit of those messages is a document; a hit when a top-k
        # unit overlaps the answer's span, the same test recall's sources get.
        sents = [(d["run_id"], d["json_path"], a, b, d["text"][a:b]) for d in docs for a, b in d.get("units", [])]
        bm25s = BM25([x[4] for x in sents])
        brick_srcs = visible_brick_sources(str(nexus), folder)
        t0 = time.monotonic()
        texts = [q["question"] for q in qs] + [u["question"] for u in us]
        if args.repl:
            outs = recall_repl(str(nexus), folder, texts, args.k, 300)
        else:
            outs = [recall_one(str(nexus), folder, t, args.k, 300) for t in texts]
        recall_seconds = time.monotonic() - t0
        rows = []
        for q, out in zip(qs, outs[: len(qs)]):
            j = judge(out, q)
            top = bm25.top(q["question"], args.k)
            want = node_index.get((q["run_id"], q["json_path"]))
            brank = (top.index(want) + 1) if want in top else None
            stop = bm25s.top(q["question"], args.k)
            srank = next((i + 1 for i, x in enumerate(stop) if overlaps(
                {"run_id": sents[x][0], "json_path": sents[x][1], "start": sents[x][2], "end": sents[x][3]}, q)), None)
            row = {"person": person, "kind": q.get("kind"), "question": q["question"], "run_id": q["run_id"],
                   "json_path": q["json_path"], "start": q["start"], "end": q["end"], **j,
                   "bm25_hit": brank is not None, "bm25_rank": brank, "answer_node_found": want is not None,
                   "bm25_sentence_hit": srank is not None, "bm25_sentence_rank": srank,
                   "answer_in_bricks": any(overlaps(src, q) for src in brick_srcs),
                   "error": out.get("error")}
            rows.append(row)
        urows = []
        for u, out in zip(us, outs[len(qs):]):
            j = judge(out, None)
            urows.append({"person": person, "question": u["question"], "top_confidence": j["top_confidence"],
                          "n_results": j["n_results"], "error": out.get("error")})
        missing = [r["question"] for r in rows if not r["answer_node_found"]]
        errors = [r["error"] for r in rows + urows if r.get("error")]
        summary = {"questions": len(rows), "recall_hit": rate(rows, "hit"), "bm25_hit": rate(rows, "bm25_hit"),
                   "recall_hits": sum(r["hit"] for r in rows), "bm25_hits": sum(r["bm25_hit"] for r in rows),
                   "mean_top_confidence_related": mean([r["top_confidence"] for r in rows]),
                   "mean_top_confidence_unrelated": mean([r["top_confidence"] for r in urows]),
                   "bm25_sentence_hit": rate(rows, "bm25_sentence_hit"), "answer_in_bricks": rate(rows, "answer_in_bricks"),
                   "unrelated": len(urows), "documents": len(docs), "sentence_documents": len(sents),
                   "visible_brick_sources": len(brick_srcs),
                   "result_kinds": dict(sum((Counter(r["result_kinds"]) for r in rows), Counter())),
                   "sync": {k: stamp.get(k) for k in ("reused", "sync_seconds", "sync_rc")},
                   "recall_seconds": round(recall_seconds, 1), "answer_nodes_missing": missing, "errors": errors[:5]}
        report["people"][person] = summary
        report["questions"] += rows
        report["unrelated"] += urows
        print(f"{person:16s} n={len(rows):3d}  recall hit@{args.k} {summary['recall_hits']:3d} ({summary['recall_hit']:.0%})  "
              f"BM25 hit@{args.k} {summary['bm25_hits']:3d} ({summary['bm25_hit']:.0%})  "
              f"top conf related {summary['mean_top_confidence_related']} / unrelated {summary['mean_top_confidence_unrelated']}  "
              f"[sync {'reused' if stamp.get('reused') else str(stamp.get('sync_seconds')) + 's'}, {len(docs)} docs]")
        print(f"{'':16s} diagnostics: answer is a brick {summary['answer_in_bricks']:.0%}, "
              f"sentence-level BM25 hit@{args.k} {summary['bm25_sentence_hit']:.0%} over {len(sents)} sentences")
        if missing:
            print(f"  warning: {len(missing)} answers not found among the reader's message nodes", file=sys.stderr)
        if errors:
            print(f"  warning: {len(errors)} recall errors, first: {errors[0][:200]}", file=sys.stderr)
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)

    allq, allu = report["questions"], report["unrelated"]
    hits = [r for r in allq if r["hit"]]
    misses = [r for r in allq if not r["hit"]]
    by_kind = defaultdict(list)
    for r in allq:
        by_kind[r["kind"]].append(r)
    report["overall"] = {
        "people": len(report["people"]), "questions": len(allq),
        "recall_hit": rate(allq, "hit"), "bm25_hit": rate(allq, "bm25_hit"),
        "recall_hits": len(hits), "bm25_hits": sum(r["bm25_hit"] for r in allq),
        "bm25_sentence_hit": rate(allq, "bm25_sentence_hit"), "answer_in_bricks": rate(allq, "answer_in_bricks"),
        "macro_recall_hit": mean([s["recall_hit"] for s in report["people"].values() if s["recall_hit"] is not None]),
        "macro_bm25_hit": mean([s["bm25_hit"] for s in report["people"].values() if s["bm25_hit"] is not None]),
        "mean_top_confidence_related": mean([r["top_confidence"] for r in allq]),
        "mean_top_confidence_related_hits": mean([r["top_confidence"] for r in hits]),
        "mean_top_confidence_related_misses": mean([r["top_confidence"] for r in misses]),
        "mean_top_confidence_unrelated": mean([r["top_confidence"] for r in allu]), "unrelated": len(allu),
        "by_kind": {k: {"n": len(v), "recall_hit": rate(v, "hit"), "bm25_hit": rate(v, "bm25_hit")}
                    for k, v in sorted(by_kind.items(), key=lambda kv: str(kv[0]))},
    }
    o = report["overall"]
    if allq:
        print(f"{'overall':16s} n={o['questions']:3d}  recall hit@{args.k} {o['recall_hits']:3d} ({o['recall_hit']:.0%})  "
              f"BM25 hit@{args.k} {o['bm25_hits']:3d} ({o['bm25_hit']:.0%})  macro {o['macro_recall_hit']} vs {o['macro_bm25_hit']}")
        print(f"diagnostics: answer is a brick {o['answer_in_bricks']:.0%}; sentence-level BM25 hit@{args.k} {o['bm25_sentence_hit']:.0%}")
        print(f"mean top confidence: related {o['mean_top_confidence_related']} (hits {o['mean_top_confidence_related_hits']}, "
              f"misses {o['mean_top_confidence_related_misses']}), unrelated {o['mean_top_confidence_unrelated']} (n={o['unrelated']})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
