"""The labelled corpus as the extractor sees it at run time: each labelled sentence found among
embedded-v4's candidates (the real reader on the raw file, the real sentence splitter and scope),
with its features, and what embedded-v3 did with it. Shared by `train_selector.py` and
`benchmarks/bench_selection.py`.

Corpus layout (`--corpus DIR`): `labels/<person>.jsonl` (rows `{person, kind, file, topic_id, run_id,
json_path, start, end, quote_sha256, node_type, keep, reader, ...}`), `topics/<person>/*.yaml`,
`sources/` (provenance, with each file's sha256). Raw files: `--data DIR/<person>/<file>`.
The older set (`selection/labels.jsonl`, 425 rows on two of the same exports) joins as its people.
"""

from __future__ import annotations

import json
import pickle
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from nexus_assets.core.fingerprint import fingerprint
from nexus_assets.core.models import Run, Topic
from nexus_assets.core.paths import format_path, parse_normalized
from nexus_assets.extract.embedded import candidate_pointers, keep_relevant
from nexus_assets.extract.selector.features import SCALARS
from nexus_assets.extract.selector.select import read_runs
from nexus_assets.ingest.runfiles import file_sha256, iter_run_file

HERE = Path(__file__).resolve().parent
OLD_PEOPLE = {"marathon-training": "chat-bobbytango", "gardening-business": "chat-bobbytango", "django-deployment": "chat-pkuppens"}


class CachedVectors:
    """The shipped embedder with a pickle cache keyed by fingerprint (training re-reads the corpus often)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.cache: dict[str, np.ndarray] = {}
        if path is not None and path.exists():
            self.cache = pickle.loads(path.read_bytes())
        self.dirty = False

    def __call__(self, texts):
        from nexus_assets.embedding.embedder import DIMENSIONS, embed

        fps = [fingerprint(t) for t in texts]
        todo = {fp: t for fp, t in zip(fps, texts) if fp not in self.cache}
        if todo:
            for fp, v in zip(todo, embed(list(todo.values()))):
                self.cache[fp] = np.asarray(v, dtype="float32")
            self.dirty = True
        out = np.empty((len(texts), DIMENSIONS), dtype="float32")
        for i, fp in enumerate(fps):
            out[i] = self.cache[fp]
        return out

    def save(self) -> None:
        if self.path is not None and self.dirty:
            self.path.write_bytes(pickle.dumps(self.cache))
            self.dirty = False


@dataclass
class Row:
    person: str
    kind: str
    topic_id: str
    run_id: str
    json_path: str
    start: int
    end: int
    keep: bool
    node_type: str
    text: str = ""
    found: bool = False  # among v4's candidates
    reason: str | None = None  # dropped before the model (form / conversation)
    conversation_relevance: float | None = None
    vector: np.ndarray | None = None
    scalars: list | None = None
    scalars_v5: list | None = None  # v4's scalars and embedded-v5's `EXTRA`
    v3: bool = False
    reader: str = "A"
    second: bool | None = None  # a second reader's label, when there is one


@dataclass
class Corpus:
    rows: list[Row] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _norm(path: str) -> str:
    steps = parse_normalized(path)
    return format_path(steps) if steps is not None else path


def load_topics(directory: Path) -> dict[str, Topic]:
    out = {}
    for f in sorted(directory.glob("*.yaml")):
        t = Topic.model_validate(yaml.safe_load(f.read_text(encoding="utf-8")))
        out[t.topic_id] = t
    return out


def _sha(path: Path) -> str:
    return file_sha256(path)


def _declared_shas(corpus: Path, person: str) -> set[str] | None:
    """Every sha256 the person's provenance files name (a raw file must match one); None when the
    corpus has no provenance for the person yet (the file is used, and the gap reported)."""
    found: set[str] = set()
    folder = corpus / "sources"
    files = [f for f in folder.glob(f"{person}*") if f.is_file()] if folder.is_dir() else []
    for f in files:
        found |= set(re.findall(r"\b[0-9a-f]{64}\b", f.read_text(encoding="utf-8", errors="replace")))
    return found if files else None


def load_labels(corpus: Path, old_labels: Path | None, people: set[str] | None = None) -> tuple[list[dict], dict[str, dict[str, Topic]]]:
    labels: list[dict] = []
    topics: dict[str, dict[str, Topic]] = {}
    for f in sorted((corpus / "labels").glob("*.jsonl")):
        person = f.stem
        if people and person not in people:
            continue
        tdir = corpus / "topics" / person
        if not tdir.is_dir():
            print(f"skip {person}: no topics yet", file=sys.stderr)
            continue
        topics[person] = load_topics(tdir)
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                labels.append(json.loads(line))
    if old_labels is not None and old_labels.exists():
        old_topics = load_topics(old_labels.parent / "topics")
        for line in old_labels.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            person = OLD_PEOPLE[r["topic_id"]]
            if people and person not in people:
                continue
            topics.setdefault(person, {})[r["topic_id"]] = old_topics[r["topic_id"]]
            labels.append({**r, "person": person, "kind": "chat", "file": "conversations.json", "node_type": None, "reader": "old"})
    return labels, topics


def _runs(path: Path, wanted: set[str]) -> dict[str, Run]:
    return {item.run_id: item for item in iter_run_file(path, path.name) if isinstance(item, Run) and item.run_id in wanted}


def _title(run: Run) -> str | None:
    doc = run.document
    if isinstance(doc, dict):
        for key in ("title", "name"):
            if isinstance(doc.get(key), str):
                return doc[key]
    return None


def build(corpus: Path, data: Path, old_labels: Path | None, vectors: CachedVectors, people: set[str] | None = None,
          with_v3: bool = True) -> Corpus:
    labels, topics = load_labels(corpus, old_labels, people)
    out = Corpus()
    by_file: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in labels:
        by_file[(r["person"], r["file"])].append(r)
    for (person, file), rows in sorted(by_file.items()):
        path = data / person / file
        if not path.exists():
            out.skipped.append(f"{person}/{file}: raw file not found under {data}")
            continue
        sha = _sha(path)
        shas = _declared_shas(corpus, person)
        if shas is None:
            out.skipped.append(f"{person}/{file}: used, but no provenance under sources/ names its sha256 yet")
        elif sha not in shas:
            out.skipped.append(f"{person}/{file}: sha256 {sha} is not the one its sources name")
            continue
        runs = _runs(path, {r["run_id"] for r in rows})
        titles = {rid: _title(run) for rid, run in runs.items()}
        by_topic: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            by_topic[r["topic_id"]].append(r)
        for topic_id, trows in sorted(by_topic.items()):
            topic = topics[person].get(topic_id)
            if topic is None:
                out.skipped.append(f"{person}: topic {topic_id} has no topic file")
                continue
            trun = [runs[rid] for rid in sorted({r["run_id"] for r in trows}) if rid in runs]
            readings, vecs = read_runs(topic, trun, vectors, titles, every_candidate=True)
            extras = _v5_extras(trun, readings, titles, vecs, vectors)
            found = {}
            conv = {}
            for reading in readings:
                conv[reading.run_id] = reading.conversation_relevance
                for c in reading.candidates:
                    found[(reading.run_id, c.json_path, c.start, c.end)] = c
            v3 = _v3_spans(topic, trun, vectors) if with_v3 else set()
            seen = set()
            for r in trows:
                key = (r["run_id"], _norm(r["json_path"]), r["start"], r["end"])
                if key in seen:
                    continue  # the same sentence labelled twice (the old set overlaps the new one)
                seen.add(key)
                c = found.get(key)
                row = Row(person, r.get("kind", "chat"), topic_id, r["run_id"], key[1], r["start"], r["end"], bool(r["keep"]),
                          r.get("node_type") or (c.node_type if c else ""), reader=r.get("reader", "A"))
                row.conversation_relevance = conv.get(r["run_id"])
                row.v3 = key in v3
                if c is not None:
                    row.found, row.reason, row.text = True, c.reason, c.text
                    if c.context is not None:
                        from nexus_assets.extract.selector.features import scalar_features

                        row.vector = vecs[id(c)]
                        row.scalars = scalar_features(c.text, c.context)
                        row.scalars_v5 = [*row.scalars, *extras[id(c)]]
                out.rows.append(row)
            vectors.save()
        print(f"{person}/{file}: {len(rows)} labels read", file=sys.stderr)
    return out


def _v5_extras(runs, readings, titles, vecs, vectors) -> dict[int, list[float]]:
    """embedded-v5's `EXTRA` of every scored candidate, by id(candidate), exactly as it computes them."""
    from nexus_assets.extract.selector.v5 import conversation_vectors, run_extras

    conversations = conversation_vectors(runs, readings, titles, vectors)
    out: dict[int, list[float]] = {}
    for reading in readings:
        out |= run_extras(reading, vecs, conversations.get(reading.run_id))
    return out


def _v3_spans(topic: Topic, runs: list[Run], vectors) -> set[tuple]:
    """What embedded-v3 keeps of these runs (its candidates, then relevance), as label keys."""
    pointers = []
    owner = []
    for run in runs:
        found = candidate_pointers(topic, run)
        pointers += found
        owner += [run] * len(found)
    kept = {id(p) for p in keep_relevant(topic, pointers, vectors)}
    out = set()
    from nexus_assets.ingest.scope import node_text

    for p, run in zip(pointers, owner):
        if id(p) not in kept:
            continue
        node = run.node_index.get(p["json_path"])
        text = node_text(run, node) if node is not None else None
        if text is None:
            continue
        start = text.find(p["verbatim_quote"])
        out.add((run.run_id, p["json_path"], start, start + len(p["verbatim_quote"])))
    return out


def matrices(rows: list[Row], features: str = "scalars"):
    """(vectors, scalars, labels) of rows; `features`: "scalars" (embedded-v4) or "scalars_v5"."""
    from nexus_assets.extract.selector.v5 import SCALARS_V5

    v = np.stack([r.vector for r in rows]).astype("float64")
    s = np.asarray([getattr(r, features) for r in rows], dtype="float64")
    y = np.asarray([r.keep for r in rows], dtype="float64")
    assert s.shape[1] == len(SCALARS if features == "scalars" else SCALARS_V5)
    return v, s, y
