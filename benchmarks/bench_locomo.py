"""LoCoMo through Nexus: evidence coverage and recall hit@k against BM25 and dense baselines.

LoCoMo (Maharana et al., ACL 2024, github.com/snap-research/LoCoMo, `data/locomo10.json`) holds
10 long conversations between two people, 272 sessions, 5,882 turns, and questions whose evidence
turns are labelled. Its licence is CC BY-NC 4.0: it is never committed here; fetch it yourself
and pass its folder. The script checks the file's sha256.

What it does, as a user would:
1. each session becomes a Nexus run (`messages[i].name` = who said it, `role` user for the first
   speaker and assistant for the second, `started_at` = the session's date);
2. one topic per conversation, written as a person would ("What Jon and Gina tell each other about
   their lives, plans, events, people, places and feelings"), `sources.runs` narrowed to its runs;
3. the default sync (`nexus sync`, embedded extractor, default selector);
4. per question (categories 1-4; 5 is adversarial, without evidence): the evidence turns.

Figures, per category and overall:
- evidence coverage: evidence turns with at least one brick, and the share of their text that
  lies inside a brick;
- hit@5 / hit@10: the question's evidence turn is a source of one of the top k results, for
  Nexus recall (`recall(query, topics=[conversation's topic], k)`, warm), BM25 over the raw turns
  (tantivy, the `en_stem` analyser `nexus search` uses) and dense cosine over the raw turns
  (all-MiniLM-L6-v2, the model recall embeds with), each restricted to the question's
  conversation;
- warm query time of Nexus recall (median and p95, the model and indexes loaded).

    python benchmarks/bench_locomo.py --data FOLDER [--work DIR] [--conversations N] [--every N] [--skip-sync] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

SHA256 = "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
FILE = "locomo10.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10)


def load(folder: Path) -> list[dict]:
    path = folder / FILE
    if not path.is_file():
        sys.exit(f"bench_locomo: no {FILE} in {folder}; fetch data/{FILE} from github.com/snap-research/LoCoMo")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SHA256:
        sys.exit(f"bench_locomo: {path} has sha256 {digest}, not the published file's {SHA256}")
    return json.loads(path.read_text(encoding="utf-8"))


def session_date(text: str) -> str | None:
    """'1:56 pm on 8 May, 2023' -> '2023-05-08T13:56:00Z'."""
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").strftime("%Y-%m-%dT%H:%M:00Z")
    except ValueError:
        return None


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def prepare(data: list[dict], work: Path, min_relevance: float | None = None) -> tuple[dict, list[dict]]:
    """Run files and topics under `work`; returns (turns by (run_id, message index), questions)."""
    runs_dir, topics_dir = work / "runs" / "locomo", work / "topics"
    runs_dir.mkdir(parents=True, exist_ok=True)
    topics_dir.mkdir(parents=True, exist_ok=True)
    turns: dict[tuple[str, int], dict] = {}
    questions = []
    for conv in data:
        c = conv["conversation"]
        a, b = c["speaker_a"], c["speaker_b"]
        topic = f"locomo-{slug(conv['sample_id'])}"
        by_dia: dict[str, tuple[str, int]] = {}
        run_ids = []
        n = 1
        while f"session_{n}" in c:
            run_id = f"{topic}-s{n}"
            messages = []
            for i, t in enumerate(c[f"session_{n}"]):
                messages.append({"role": "user" if t["speaker"] == a else "assistant", "name": t["speaker"], "content": t["text"]})
                by_dia[t["dia_id"]] = (run_id, i)
                turns[(run_id, i)] = {"text": t["text"], "topic": topic, "speaker": t["speaker"]}
            run = {"run_id": run_id, "status": "CLOSED", "started_at": session_date(c.get(f"session_{n}_date_time", "")), "messages": messages}
            (runs_dir / f"{run_id}.json").write_text(json.dumps(run, ensure_ascii=False, indent=1), encoding="utf-8")
            run_ids.append(run_id)
            n += 1
        (topics_dir / f"{topic}.yaml").write_text(
            "\n".join(
                [
                    f"topic_id: {topic}",
                    f"display_name: {a} and {b}",
                    "extraction_policy:",
                    f"  scope_description: What {a} and {b} tell each other about their lives, plans, events, people, places and feelings.",
                    "ordering_rule: chronological",
                    *([f"min_relevance: {min_relevance}"] if min_relevance is not None else []),
                    "state: ACTIVE",
                    "sources:",
                    f"  runs: [{', '.join(run_ids)}]",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        for q in conv["qa"]:
            if q.get("category") not in CATEGORIES:
                continue
            evidence = {by_dia[e.strip()] for e in q.get("evidence", []) if e.strip() in by_dia}
            if evidence:
                questions.append({"question": q["question"], "category": q["category"], "topic": topic, "evidence": evidence})
    return turns, questions


def sync(work: Path, db: Path) -> float:
    started = time.monotonic()
    cmd = [sys.executable, "-m", "nexus_assets.cli", "sync", "--db", str(db),
           "--runs-dir", str(work / "runs"), "--topics-dir", str(work / "topics")]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "NEXUS_DB": str(db)})
    if done.returncode not in (0, 1):
        sys.exit(f"bench_locomo: sync failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.monotonic() - started


def _turn(source: dict) -> tuple[str, int] | None:
    m = re.match(r"^\$\['messages'\]\[(\d+)\]", source["json_path"])
    return (source["run_id"], int(m.group(1))) if m else None


def coverage(db: Path, turns: dict) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """Per turn, the character spans some brick covers."""
    from nexus_assets.store import Vault

    spans: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    with Vault.open(db, read_only=True) as v:
        rows = v.conn.execute(
            """SELECT s.run_id, s.json_path, s.start_offset, s.end_offset FROM brick_sources s
               JOIN bricks b USING (brick_id) WHERE b.state <> 'SUPERSEDED'"""
        ).fetchall()
    for run_id, path, start, end in rows:
        t = _turn({"run_id": run_id, "json_path": path})
        if t in turns:
            spans[t].append((start, end))
    return spans


def covered_share(text: str, spans: list[tuple[int, int]]) -> float:
    if not text:
        return 0.0
    mask = bytearray(len(text))
    for s, e in spans:
        mask[max(0, s) : min(len(text), e)] = b"\x01" * max(0, min(len(text), e) - max(0, s))
    return sum(mask) / len(text)


def bm25_rankings(turns: dict, questions: list[dict], k: int) -> list[list[tuple[str, int]]]:
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("key", stored=True, tokenizer_name="raw")
    sb.add_text_field("topic", stored=True, tokenizer_name="raw")
    sb.add_text_field("text", stored=False, tokenizer_name="en_stem")
    schema = sb.build()
    index = tantivy.Index(schema)
    writer = index.writer()
    for (run_id, i), t in turns.items():
        writer.add_document(tantivy.Document(key=f"{run_id}|{i}", topic=t["topic"], text=t["text"]))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    out = []
    for q in questions:
        text, _ = index.parse_query_lenient(q["question"], ["text"])
        scoped = tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, text), (tantivy.Occur.Must, tantivy.Query.term_query(schema, "topic", q["topic"]))]
        )
        ranked = []
        for _, address in searcher.search(scoped, k).hits:
            run_id, i = searcher.doc(address)["key"][0].rsplit("|", 1)
            ranked.append((run_id, int(i)))
        out.append(ranked)
    return out


def dense_rankings(turns: dict, questions: list[dict], k: int) -> list[list[tuple[str, int]]]:
    import numpy as np

    from nexus_assets.embedding.embedder import embed

    keys = list(turns)
    vectors = embed([turns[key]["text"] for key in keys])
    queries = embed([q["question"] for q in questions])
    by_topic: dict[str, list[int]] = defaultdict(list)
    for row, key in enumerate(keys):
        by_topic[turns[key]["topic"]].append(row)
    out = []
    for q, qv in zip(questions, queries):
        rows = np.array(by_topic[q["topic"]])
        scores = vectors[rows] @ qv
        best = rows[np.argsort(-scores, kind="stable")[:k]]
        out.append([keys[r] for r in best])
    return out


def nexus_rankings(db: Path, questions: list[dict], k: int) -> tuple[list[list[set]], list[float]]:
    from nexus_assets.services.answers import recall

    out, times = [], []
    recall(db, "warm up", [questions[0]["topic"]], k=k)  # model and indexes loaded once
    for q in questions:
        started = time.perf_counter()
        found = recall(db, q["question"], [q["topic"]], k=k)
        times.append(time.perf_counter() - started)
        out.append([{t for s in r["sources"] if (t := _turn(s))} for r in found["results"]])
    return out, times


def hit(ranked: list, evidence: set, k: int, per_result_sets: bool = False) -> bool:
    for item in ranked[:k]:
        if (item & evidence) if per_result_sets else (item in evidence):
            return True
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, type=Path, help=f"folder holding {FILE}")
    ap.add_argument("--work", type=Path, default=Path("/tmp/nexus-locomo"), help="where runs, topics and the vault go")
    ap.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
    ap.add_argument("--skip-sync", action="store_true", help="measure the vault already in --work")
    ap.add_argument("--every", type=int, default=1, help="ask every Nth question only (a busy machine); coverage counts every one")
    ap.add_argument("--min-relevance", type=float, default=None,
                    help="set the topics' min_relevance (0 keeps every statement: recall measured apart from selection)")
    ap.add_argument("--sync-only", action="store_true", help="write the runs and topics and sync; measure nothing")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    data = load(args.data)
    if args.conversations:
        data = data[: args.conversations]
    args.work.mkdir(parents=True, exist_ok=True)
    db = args.work / "nexus.duckdb"
    turns, questions = prepare(data, args.work, args.min_relevance)
    sync_s = None if args.skip_sync else sync(args.work, db)
    if args.sync_only:
        print(f"synced {len(data)} conversations in {sync_s:.0f} s into {db}")
        return

    all_questions = questions
    questions = questions[:: max(1, args.every)]
    spans = coverage(db, turns)
    k = max(KS)
    rankings = {
        "nexus": None,
        "bm25": bm25_rankings(turns, questions, k),
        "dense": dense_rankings(turns, questions, k),
    }
    nexus, times = nexus_rankings(db, questions, k)
    with_brick = {t for t in turns if spans.get(t)}

    report = {"conversations": len(data), "turns": len(turns), "questions": len(questions), "every": args.every, "sync_s": sync_s,
              "turns_with_brick": round(len(with_brick) / len(turns), 4), "by_category": {}}
    groups = {**{name: [q for q in questions if q["category"] == c] for c, name in CATEGORIES.items()}, "overall": questions}
    index = {id(q): i for i, q in enumerate(questions)}
    all_groups = {**{name: [q for q in all_questions if q["category"] == c] for c, name in CATEGORIES.items()}, "overall": all_questions}
    for name, qs in groups.items():
        ev = {t for q in all_groups[name] for t in q["evidence"]}
        row = {
            "questions": len(qs),
            "evidence_turns": len(ev),
            "evidence_with_brick": round(sum(1 for t in ev if t in with_brick) / len(ev), 4) if ev else None,
            "evidence_text_in_brick": round(
                sum(covered_share(turns[t]["text"], spans.get(t, [])) * len(turns[t]["text"]) for t in ev)
                / max(1, sum(len(turns[t]["text"]) for t in ev)), 4) if ev else None,
        }
        for kk in KS:
            row[f"nexus_hit@{kk}"] = round(sum(hit(nexus[index[id(q)]], q["evidence"], kk, True) for q in qs) / len(qs), 4) if qs else None
            for base in ("bm25", "dense"):
                row[f"{base}_hit@{kk}"] = round(sum(hit(rankings[base][index[id(q)]], q["evidence"], kk) for q in qs) / len(qs), 4) if qs else None
        report["by_category"][name] = row
    report["warm_query_ms"] = {
        "median": round(statistics.median(times) * 1000, 1),
        "p95": round(sorted(times)[int(0.95 * (len(times) - 1))] * 1000, 1),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"LoCoMo: {report['conversations']} conversations, {report['turns']} turns, {report['questions']} questions; "
          f"sync {sync_s:.0f} s" if sync_s else "sync skipped")
    print(f"turns with a brick: {report['turns_with_brick']:.1%}; warm recall {report['warm_query_ms']['median']} ms median, "
          f"{report['warm_query_ms']['p95']} ms p95")
    cols = ["questions", "evidence_with_brick", "evidence_text_in_brick"] + [f"{m}_hit@{kk}" for m in ("nexus", "bm25", "dense") for kk in KS]
    print("category".ljust(12) + "".join(c.rjust(max(10, len(c) + 1)) for c in cols))
    for name, row in report["by_category"].items():
        cells = []
        for c in cols:
            v = row[c]
            s = str(v) if c == "questions" else ("-" if v is None else f"{v:.1%}")
            cells.append(s.rjust(max(10, len(c) + 1)))
        print(name.ljust(12) + "".join(cells))


if __name__ == "__main__":
    main()
