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
    python benchmarks/bench_selection.py --lopo [--corpus DIR] [--data DIR] [--json]

`--lopo` (issue 49): the labelled corpus of many people (`selection/corpus/`, see `selection/dataset.py`),
leave one person out: for each person, embedded-v4's and embedded-v5's selectors are fitted on everyone
else and scored on that person (precision and recall per person, the mean per kind, chat and agent); embedded-v3 on the
same sentences is "before". Also the share of kept sentences that are narration, tool output or code
(the topics here ask for none of them). No figure is ever on a person the model was fitted on.

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
    parser.add_argument("--exports", type=Path)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--lopo", action="store_true", help="leave-one-person-out on the labelled corpus")
    parser.add_argument("--corpus", type=Path, default=HERE / "corpus")
    parser.add_argument("--data", type=Path, default=Path("/work/corpus/data"))
    parser.add_argument("--cache", type=Path, default=None, help="a pickle of embeddings to reuse between runs")
    args = parser.parse_args(argv)
    if args.lopo:
        return _lopo(args)
    if args.exports is None:
        parser.error("give --exports DIR (the 425-row set) or --lopo")
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



def _lopo(args) -> int:
    import time

    sys.path.insert(0, str(HERE))
    from dataset import CachedVectors, build
    from train_selector import figures as person_figures, lopo_kept

    from nexus_assets.extract.selector.features import form_features, FORM
    from nexus_assets.extract.selector.select import NOT_NOTES

    started = time.perf_counter()
    corpus = build(args.corpus, args.data, HERE / "labels.jsonl", CachedVectors(args.cache))
    rows = corpus.rows
    kept_v4 = lopo_kept(rows)
    kept_v5 = lopo_kept(rows, features="scalars_v5")
    narration, tool, code = FORM.index("narration"), FORM.index("tool_output"), FORM.index("code")

    def junk_share(kept_rows) -> float:
        junk = 0
        for r in kept_rows:
            f = form_features(r.text) if r.text else [0.0] * len(FORM)
            junk += bool(r.node_type in NOT_NOTES or f[narration] or f[tool] or f[code] or r.reason and r.reason.startswith("form: code"))
        return round(junk / len(kept_rows), 3) if kept_rows else 0.0

    people = {}
    for person in sorted({r.person for r in rows}):
        held = [r for r in rows if r.person == person]
        v3 = {id(r) for r in held if r.v3}
        people[person] = {
            "before_embedded_v3": person_figures(held, v3),
            "after_embedded_v4": person_figures(held, kept_v4),
            "after_embedded_v5": person_figures(held, kept_v5),
            "junk_share_v3": junk_share([r for r in held if id(r) in v3]),
            "junk_share_v4": junk_share([r for r in held if id(r) in kept_v4]),
            "junk_share_v5": junk_share([r for r in held if id(r) in kept_v5]),
        }
    means = {}
    for kind in ("chat", "agent"):
        group = [f for f in people.values() if f["after_embedded_v4"]["kind"] == kind]
        if group:
            means[kind] = {
                name: {m: round(sum(f[name][m] for f in group) / len(group), 3) for m in ("precision", "recall")}
                for name in ("before_embedded_v3", "after_embedded_v4", "after_embedded_v5")
            } | {"people": len(group), "junk_share": {
                v: round(sum(f[f"junk_share_{v}"] for f in group) / len(group), 3) for v in ("v3", "v4", "v5")}}
    result = {"labelled_sentences": len(rows), "people": people, "mean_per_kind": means, "skipped": corpus.skipped,
              "seconds": round(time.perf_counter() - started, 1)}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{len(rows)} labelled sentences of {len(people)} people; leave one person out")
    print(f"{'person':24} {'kind':5} {'rows':>5} {'keeps':>5}   v3 P   v3 R   v4 P   v4 R   v5 P   v5 R  junk v3/v4/v5")
    for person, f in people.items():
        b, a, c = f["before_embedded_v3"], f["after_embedded_v4"], f["after_embedded_v5"]
        print(f"{person:24} {a['kind']:5} {a['rows']:5} {a['keeps']:5}  {b['precision']:.3f}  {b['recall']:.3f}  "
              f"{a['precision']:.3f}  {a['recall']:.3f}  {c['precision']:.3f}  {c['recall']:.3f}  "
              f"{f['junk_share_v3']:.3f}/{f['junk_share_v4']:.3f}/{f['junk_share_v5']:.3f}")
    for kind, m in means.items():
        b, a, c = m["before_embedded_v3"], m["after_embedded_v4"], m["after_embedded_v5"]
        print(f"mean {kind:5} ({m['people']} people): v3 P {b['precision']:.3f} R {b['recall']:.3f}   "
              f"v4 P {a['precision']:.3f} R {a['recall']:.3f}   v5 P {c['precision']:.3f} R {c['recall']:.3f}   "
              f"junk {m['junk_share']}")
    for line in corpus.skipped:
        print(f"skipped: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
