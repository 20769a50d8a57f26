"""Seconds per 1,000 sentences of a selector version on real runs, the embedder's cache cold.

    python benchmarks/selection/speed.py FILE TOPIC_YAML [--runs N] [--versions embedded-v3 embedded-v5]

Reads the first N runs of FILE, then for each version (in turn, twice, interleaved, so a busy machine
weighs on each alike) extracts the topic from them with a fresh in-memory embedder cache, and prints
the best wall time per 1,000 sentence units of the runs' in-scope nodes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

from nexus_assets.core.models import Run, Topic
from nexus_assets.extract.backends import StoredVectors, embedded_extractor
from nexus_assets.ingest.scope import in_scope_nodes
from nexus_assets.core.sentences import sentence_units
from nexus_assets.ingest.runfiles import iter_run_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("topic", type=Path)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--versions", nargs="+", default=["embedded-v3", "embedded-v5"])
    args = parser.parse_args(argv)
    topic = Topic.model_validate(yaml.safe_load(args.topic.read_text(encoding="utf-8")))
    runs = [r for r in iter_run_file(args.file, args.file.name) if isinstance(r, Run)][: args.runs]
    sentences = sum(len(sentence_units(text)) for run in runs for _, text in in_scope_nodes(topic.extraction_policy, run, topic))
    best: dict[str, float] = {}
    kept: dict[str, int] = {}
    for _ in range(2):
        for version in args.versions:
            extractor = embedded_extractor(version, StoredVectors())
            started = time.perf_counter()
            out = extractor.extract_runs(topic, runs)
            took = time.perf_counter() - started
            best[version] = min(best.get(version, took), took)
            kept[version] = sum(len(e.pointers) for e in out.values())
    print(f"{len(runs)} runs, {sentences} sentences in scope")
    for version in args.versions:
        print(f"{version}: {best[version]:.1f} s, {1000 * best[version] / max(sentences, 1):.2f} s per 1,000 sentences, {kept[version]} kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
