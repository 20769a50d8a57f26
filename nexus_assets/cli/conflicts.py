"""`nexus conflicts TOPIC`: related bricks that state different values, side by side with their
sources and when each was said (docs/conflicts.md, the Conflict View). Read-only; Nexus never picks."""

from __future__ import annotations

import argparse

from nexus_assets.cli.common import emit
from nexus_assets.services.queries import conflicts
from nexus_assets.cli.parsing import Commands


def cmd_conflicts(args: argparse.Namespace) -> int:
    found, looked_at, visible = conflicts(args.db, args.topic)
    rows = [c.model_dump(mode="json") for c in found]
    if rows:
        lines = []
        for n, r in enumerate(rows, 1):
            lines.append(f"conflict {n} · {r['conflict']} · similarity {r['similarity']:.4f}")
            for side in r["bricks"]:
                s = side["source"]
                where = f"{side['run_title']} ({s['run_id']})" if side["run_title"] else s["run_id"]
                lines.append(
                    f"  said {side['said_at'] or 'at an unknown time'} in {where} {s['json_path']} [{s['start']}:{s['end']}] "
                    f"· {side['state']} {side['brick_id'][:12]}{' STALE' if side['stale'] else ''}"
                )
                lines.append(f"    {side['content']}")
        lines.append(f"{len(rows)} conflict{'s' if len(rows) != 1 else ''} in {args.topic}: both sides are kept; a person decides.")
        text = "\n".join(lines)
    elif looked_at < visible:
        text = (
            f"no conflicts among the {looked_at} of {visible} visible bricks of {args.topic} related so far; "
            "the rest are related once embedded (`nexus sync` without --no-recall)"
        )
    else:
        text = f"no conflicts in {args.topic}"
    emit(args, rows, text)
    return 0


def register(commands: Commands) -> None:
    p = commands.add("conflicts", cmd_conflicts, help="related bricks that state different values, side by side with their sources")
    p.add_argument("topic")
