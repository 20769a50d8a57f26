"""List the sentence units Nexus would judge in a real file, for labelling (benchmarks/selection/).

    python benchmarks/selection/units.py FILE                 # the runs in FILE: id, title, format, nodes
    python benchmarks/selection/units.py FILE --run RUN_ID... # every sentence unit of those runs, as JSON lines

A unit row is what a label row names (`run_id, json_path, start, end, quote_sha256`) plus what a
reader needs to judge it in context: `node_type`, `position` (the node's place in the run), `kind`
(prose or list item) and `text`. Units come from Nexus's own reader and sentence splitter, so a
label names exactly what the selector sees.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from nexus_assets.ingest.scope import node_text
from nexus_assets.core.sentences import sentence_units
from nexus_assets.core.models import Run
from nexus_assets.ingest.runfiles import iter_run_file


def runs_of(path: Path) -> list[Run]:
    return [item for item in iter_run_file(path, path.name) if isinstance(item, Run)]


def title_of(run: Run) -> str:
    doc = run.document
    if isinstance(doc, dict):
        for key in ("title", "name", "summary"):
            if isinstance(doc.get(key), str):
                return doc[key]
    return ""


def units(run: Run):
    for position, node in enumerate(run.nodes):
        text = node_text(run, node)
        if not isinstance(text, str):
            continue
        for start, end, kind in sentence_units(text):
            quote = text[start:end]
            yield {
                "run_id": run.run_id,
                "json_path": node.path,
                "start": start,
                "end": end,
                "quote_sha256": hashlib.sha256(quote.encode("utf-8")).hexdigest(),
                "node_type": node.node_type,
                "branch": node.branch,
                "hidden": node.hidden,
                "position": position,
                "kind": kind,
                "text": quote,
            }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", type=Path)
    parser.add_argument("--run", nargs="*", default=None, help="run ids whose units to print")
    args = parser.parse_args(argv)
    runs = runs_of(args.file)
    if args.run is None:
        for run in runs:
            print(json.dumps({"run_id": run.run_id, "title": title_of(run), "format": run.format,
                              "started_at": run.started_at, "nodes": len(run.nodes)}, ensure_ascii=False))
        return 0
    wanted = set(args.run)
    for run in runs:
        if run.run_id in wanted:
            for row in units(run):
                print(json.dumps(row, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
