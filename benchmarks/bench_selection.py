"""What the offline extractor keeps, against what a person keeps (issue 40), on real public exports.

The labelled set (`selection/labels.jsonl`, provenance in `selection/README.md`) holds 425
sentences of two real ChatGPT exports, each marked keep / not keep for one of three topics
(`selection/topics/`). The exports' text is not redistributed: each row names its sentence by
run, path and offsets and the sha256 of its text, and this script reads the exports from where
you fetched them, checking each file's sha256 first.

For every labelled sentence it asks: does the current embedded extractor (statements, tags,
relevance to the topic, exactly as a sync runs it) keep it? Precision and recall are over the
labelled sentences; `embedded_v2` in each row is what the previous release kept, for before/after.

`selection/conflicts.jsonl` holds the 338 related pairs a sync of those topics gave, each judged
by a reader (a real disagreement or not) and marked with what the previous release's conflict
rules said; the current rules (`relate/rules.py`) are scored on the same pairs.

    python benchmarks/bench_selection.py --exports DIR [--json]

DIR holds `bobbytango/conversations.json` and `pkuppens/conversations.json` (see the README).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import defaultdict
from pathlib import Path

import yaml

from nexus_assets.core.models import IngestionError, Topic
from nexus_assets.extract.backends import EmbeddedExtractor, StoredVectors
from nexus_assets.ingest.runfiles import iter_run_file

HERE = Path(__file__).resolve().parent / "selection"
EXPORTS = {
    # topic → the export it is labelled on, with that file's sha256 as fetched
    "marathon-training": ("bobbytango", "8f731255daee019237820f086b28f843edf7cd9faa957f129fcca254f04200bf"),
    "gardening-business": ("bobbytango", "8f731255daee019237820f086b28f843edf7cd9faa957f129fcca254f04200bf"),
    "django-deployment": ("pkuppens", "7d7d6bbbc9a4b6e31608f4de7cb7c266b3159ca6cf88852e1aa3f89751f03253"),
}


def figures(rows: list[dict], kept: set[tuple]) -> dict:
    tp = sum(1 for r in rows if r["keep"] and _key(r) in kept)
    fp = sum(1 for r in rows if not r["keep"] and _key(r) in kept)
    fn = sum(1 for r in rows if r["keep"] and _key(r) not in kept)
    return {"labelled": len(rows), "keep": tp + fn, "kept": tp + fp, "precision": round(tp / max(tp + fp, 1), 3),
            "recall": round(tp / max(tp + fn, 1), 3)}


def _key(r: dict) -> tuple:
    return (r["topic_id"], r["run_id"], r["json_path"], r["start"], r["end"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exports", type=Path, required=True)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in (HERE / "labels.jsonl").read_text().splitlines() if line.strip()]
    by_topic: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_topic[r["topic_id"]].append(r)
    extractor = EmbeddedExtractor(StoredVectors())
    kept: set[tuple] = set()
    mismatched = 0
    for topic_id, labelled in sorted(by_topic.items()):
        folder, digest = EXPORTS[topic_id]
        path = args.exports / folder / "conversations.json"
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise SystemExit(f"{path}: not the export the labels were made on (sha256 differs); see benchmarks/selection/README.md")
        topic = Topic.model_validate(yaml.safe_load((HERE / "topics" / f"{topic_id}.yaml").read_text()))
        wanted = {r["run_id"] for r in labelled}
        runs = [run for run in iter_run_file(path, str(path)) if not isinstance(run, IngestionError) and run.run_id in wanted]
        texts = {}
        for run in runs:
            for p in extractor.extract(topic, run).pointers:
                node = _node_text(run, p["json_path"])
                start = node.find(p["verbatim_quote"])
                kept.add((topic_id, run.run_id, p["json_path"], start, start + len(p["verbatim_quote"])))
            texts[run.run_id] = run
        for r in labelled:  # the labels name the very text they were made on
            node = _node_text(texts[r["run_id"]], r["json_path"])
            mismatched += hashlib.sha256(node[r["start"] : r["end"]].encode()).hexdigest() != r["quote_sha256"]
    conflicts = _conflict_figures(args.exports)
    result = {
        "conflicts": conflicts,
        "labelled_sentences": len(rows),
        "labels_not_matching_text": mismatched,
        "before_embedded_v2": figures(rows, {_key(r) for r in rows if r["embedded_v2"]}),
        "after": figures(rows, kept),
        "per_topic": {
            t: {"before": figures(labelled, {_key(r) for r in labelled if r["embedded_v2"]}), "after": figures(labelled, kept)}
            for t, labelled in sorted(by_topic.items())
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        b, a = result["before_embedded_v2"], result["after"]
        print(f"{len(rows)} labelled sentences ({b['keep']} a person keeps); {mismatched} labels off their text")
        print(f"before (embedded-v2): precision {b['precision']:.3f}  recall {b['recall']:.3f}  ({b['kept']} kept)")
        print(f"after  (this build):  precision {a['precision']:.3f}  recall {a['recall']:.3f}  ({a['kept']} kept)")
        for t, f in result["per_topic"].items():
            print(f"  {t:20} before P {f['before']['precision']:.3f} R {f['before']['recall']:.3f}"
                  f"   after P {f['after']['precision']:.3f} R {f['after']['recall']:.3f}")
        c = result["conflicts"]
        print(f"conflicts: {c['pairs']} related pairs, {c['real']} real disagreements")
        for name in ("before", "after"):
            f = c[name]
            print(f"  {name:6} flagged {f['flagged']:3}  correct {f['correct']}  precision {f['precision']:.3f}  recall {f['recall']:.3f}")
    return 0


def _conflict_figures(exports: Path) -> dict:
    from nexus_assets.relate.rules import conflict_between

    pairs = [json.loads(line) for line in (HERE / "conflicts.jsonl").read_text().splitlines() if line.strip()]
    runs: dict[str, object] = {}
    for folder in sorted({EXPORTS[p["topic_id"]][0] for p in pairs}):
        path = exports / folder / "conversations.json"
        runs.update({r.run_id: r for r in iter_run_file(path, str(path)) if not isinstance(r, IngestionError)})

    def text(side: dict) -> str:
        quote = _node_text(runs[side["run_id"]], side["json_path"])[side["start"] : side["end"]]
        if hashlib.sha256(quote.encode()).hexdigest() != side["sha256"]:
            raise SystemExit(f"conflicts.jsonl: {side['run_id']} {side['json_path']} no longer holds the judged text")
        return quote

    after = [conflict_between(text(p["a"]), text(p["b"])) is not None for p in pairs]
    before = [p["flagged_by_embedded_v2_rules"] for p in pairs]
    real = [p["real_conflict"] for p in pairs]

    def score(flags: list[bool]) -> dict:
        correct = sum(f and r for f, r in zip(flags, real))
        return {"flagged": sum(flags), "correct": correct, "precision": round(correct / max(sum(flags), 1), 3),
                "recall": round(correct / max(sum(real), 1), 3)}

    return {"pairs": len(pairs), "real": sum(real), "before": score(before), "after": score(after)}


def _node_text(run, json_path: str) -> str:
    from nexus_assets.core.paths import resolve_string

    return resolve_string(run.document, json_path)[1]


if __name__ == "__main__":
    sys.exit(main())
