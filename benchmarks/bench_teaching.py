"""Teaching a topic (issue 53): after a person drops 10 junk bricks and keeps 5 good ones per topic,
how do precision and recall move on the bricks they did not touch?

For each person of the labelled corpus (`/work/corpus`: labels/<person>.jsonl, data/<person>/,
topics/<person>/; label rows `{person, kind, file, topic_id, run_id, json_path, start, end,
quote_sha256, node_type, keep, reader, text}`), in a fresh vault:
1. `nexus sync` (the default embedded selector) and score the visible bricks against the labels;
2. per topic, `nexus drop` 10 bricks a reader marked not-keep and `nexus keep` 5 marked keep
   (chosen by brick id, so the choice is fixed), through the teaching service the CLI uses;
3. `nexus sync` again and score again.
Precision and recall are over labelled sentences only, leaving out every sentence a person
touched (every source of a brick they judged: they are examples now, not a test). No person's
labels were used to build the selector's rule, so every person is held out. The run files are read in place; the topic files are
copied (teaching rewrites them).

    python benchmarks/bench_teaching.py [--corpus /work/corpus] [--person P]... [--json] [--bar 0.85]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

DROPS, KEEPS = 10, 5


def _key(topic_id: str, run_id: str, json_path: str, start: int, end: int) -> tuple:
    return (topic_id, run_id, json_path, start, end)


def labelled_runs_export(src: Path, dst: Path, run_ids: set[str]) -> None:
    """A chat export cut to the labelled conversations (paths are relative to a conversation, so
    every address stays the same); any other run file is copied whole."""
    if src.name == "conversations.json":
        conversations = json.loads(src.read_text(encoding="utf-8"))
        kept = [c for c in conversations if (c.get("conversation_id") or c.get("id") or c.get("uuid")) in run_ids]
        if kept:
            dst.write_text(json.dumps(kept, ensure_ascii=False), encoding="utf-8")
            return
    shutil.copyfile(src, dst)  # a link out of the runs folder is not followed (by design)


def kept_addresses(db: Path, topics: list[str]) -> dict[tuple, str]:
    """Every source address of every visible brick → its fingerprint."""
    from nexus_assets.store import Vault

    out = {}
    with Vault.open(db, read_only=True) as v:
        for t in topics:
            for b in v.bricks.select(t):
                if b.state == "SUPERSEDED":
                    continue
                for s in b.sources:
                    out[_key(t, s.run_id, s.json_path, s.start, s.end)] = b.fingerprint
    return out


def score(rows: list[dict], kept: set[tuple]) -> dict:
    tp = sum(1 for r in rows if r["keep"] and r["_key"] in kept)
    fp = sum(1 for r in rows if not r["keep"] and r["_key"] in kept)
    fn = sum(1 for r in rows if r["keep"] and r["_key"] not in kept)
    return {"labelled": len(rows), "kept": tp + fp, "precision": round(tp / max(tp + fp, 1), 3),
            "recall": round(tp / max(tp + fn, 1), 3)}


def sync(db: Path, runs: Path, topics: Path) -> float:
    from nexus_assets.cli import main

    import contextlib
    import io

    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the sync's own --json results are not this report
        code = main(["--db", str(db), "sync", "--runs-dir", str(runs), "--topics-dir", str(topics), "--no-recall", "--json"])
    if code != 0:
        raise SystemExit(f"sync of {runs} failed (exit {code})")
    return time.perf_counter() - started


def person(corpus: Path, name: str, work: Path) -> dict:
    from nexus_assets.store import Vault
    from nexus_assets.services.teaching import teach

    rows = [json.loads(line) for line in (corpus / "labels" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    for r in rows:
        r["_key"] = _key(r["topic_id"], r["run_id"], r["json_path"], r["start"], r["end"])
    label = {r["_key"]: r["keep"] for r in rows}
    runs, topics, db = work / "runs", work / "topics", work / "vault.duckdb"
    runs.mkdir(parents=True)
    shutil.copytree(corpus / "topics" / name, topics)
    wanted = {r["run_id"] for r in rows}
    for f in sorted((corpus / "data" / name).iterdir()):
        labelled_runs_export(f, runs / f.name, wanted)
    topic_ids = sorted({r["topic_id"] for r in rows})
    first = sync(db, runs, topics)
    before = kept_addresses(db, topic_ids)
    # The person's judgement: bricks they see, marked by the labels.
    touched: set[tuple] = set()  # every source address of a brick the person judged
    taught = defaultdict(lambda: {"drop": 0, "keep": 0})
    with Vault.open(db) as v:
        for t in topic_ids:
            bricks = sorted((b for b in v.bricks.select(t) if b.state != "SUPERSEDED"), key=lambda b: b.brick_id)
            judged = {}
            for b in bricks:
                verdicts = {label[k] for s in b.sources if (k := _key(t, s.run_id, s.json_path, s.start, s.end)) in label}
                if len(verdicts) == 1:
                    judged[b.brick_id] = (b, verdicts.pop())
            junk = [b for b, keep in judged.values() if not keep][:DROPS]
            good = [b for b, keep in judged.values() if keep][:KEEPS]
            for verdict, chosen in (("drop", junk), ("keep", good)):
                for b in chosen:
                    teach(v, topics, b.brick_id, verdict, reason="bench_teaching", actor="bench_teaching")
                    touched |= {_key(t, s.run_id, s.json_path, s.start, s.end) for s in b.sources}
                    taught[t][verdict] += 1
    second = sync(db, runs, topics)
    after = kept_addresses(db, topic_ids)
    untouched = [r for r in rows if r["_key"] not in touched]
    result = {
        "person": name,
        "labelled": len(rows),
        "untouched": len(untouched),
        "taught": dict(taught),
        "before": score(untouched, set(before)),
        "after": score(untouched, set(after)),
        "sync_s": [round(first, 1), round(second, 1)],
        "per_topic": {
            t: {"before": score([r for r in untouched if r["topic_id"] == t], set(before)),
                "after": score([r for r in untouched if r["topic_id"] == t], set(after))}
            for t in topic_ids
        },
    }
    result["delta"] = {k: round(result["after"][k] - result["before"][k], 3) for k in ("precision", "recall")}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=Path("/work/corpus"))
    parser.add_argument("--person", action="append", help="only this person (repeatable); default every labelled one")
    parser.add_argument("--bar", type=float, default=None, help="the examples' cosine bar (default: the shipped EXAMPLE_BAR)")
    parser.add_argument("--margin", type=float, default=None, help="embedded-v6: drop under -MARGIN (default: the shipped TAUGHT_MARGIN)")
    parser.add_argument("--ridge", type=float, default=None, help="embedded-v6: the fit's ridge (default: the shipped TAUGHT_RIDGE)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from nexus_assets.extract import examples

    if args.bar is not None:
        examples.EXAMPLE_BAR = args.bar
    if args.margin is not None:
        examples.TAUGHT_MARGIN = args.margin
    if args.ridge is not None:
        examples.TAUGHT_RIDGE = args.ridge
    people = args.person or sorted(p.stem for p in (args.corpus / "labels").glob("*.jsonl"))
    results = []
    for name in people:
        with tempfile.TemporaryDirectory(prefix=f"bench-teach-{name}-") as tmp:
            r = person(args.corpus, name, Path(tmp))
        results.append(r)
        b, a = r["before"], r["after"]
        print(f"{name:22} P {b['precision']:.3f} → {a['precision']:.3f} ({r['delta']['precision']:+.3f})  "
              f"R {b['recall']:.3f} → {a['recall']:.3f} ({r['delta']['recall']:+.3f})  kept {b['kept']} → {a['kept']}  "
              f"taught {sum(x['drop'] for x in r['taught'].values())} drop / {sum(x['keep'] for x in r['taught'].values())} keep  "
              f"syncs {r['sync_s'][0]}s, {r['sync_s'][1]}s", file=sys.stderr, flush=True)
    mean = {k: {m: round(sum(r[k][m] for r in results) / max(len(results), 1), 3) for m in ("precision", "recall")}
            for k in ("before", "after")}
    summary = {"people": results, "mean": mean, "bar": examples.EXAMPLE_BAR, "margin": examples.TAUGHT_MARGIN, "ridge": examples.TAUGHT_RIDGE}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"mean over {len(results)} people: precision {mean['before']['precision']:.3f} → {mean['after']['precision']:.3f}, "
              f"recall {mean['before']['recall']:.3f} → {mean['after']['recall']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
