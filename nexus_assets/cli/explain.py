"""`nexus explain BRICK_ID` / `nexus explain --run RUN_ID [--node PATH] [--topic T]` (read-only)."""

from __future__ import annotations

import argparse
from collections import Counter

from nexus_assets.cli.common import UsageError, emit, one_line, open_vault, require_brick
from nexus_assets.cli.parsing import Commands

SHOWN = 40  # sentences listed per topic unless --json


def cmd_explain(args: argparse.Namespace) -> int:
    from nexus_assets.services import explaining

    if bool(args.brick_id) == bool(args.run):
        raise UsageError("give a BRICK_ID, or --run RUN_ID (with --node PATH for one message)")
    if args.node and not args.run:
        raise UsageError("--node needs --run RUN_ID")
    with open_vault(args) as vault:
        try:
            if args.brick_id:
                data = explaining.brick(vault, require_brick(vault, args.brick_id))
                emit(args, data, _render_brick(data))
            else:
                data = explaining.run(vault, args.run, node=args.node, topics=args.topic)
                emit(args, data, _render_run(data))
        except explaining.ExplainRefused as exc:
            raise UsageError(str(exc)) from None
    return 0


def _render_brick(d: dict) -> str:
    lines = [
        f"brick {d['brick_id'][:12]}  {d['state']}  topic {d['topic_id']}",
        f"  \u201c{one_line(d['content'], 100)}\u201d",
        f"  from {d['source']['run_id']} {d['source']['json_path']} [{d['source']['start']}:{d['source']['end']}] ({d['source']['node_type']})",
        f"  kept by {d['extractor'] or 'unknown'}: {d['because']}",
    ]
    for side in ("keep", "drop"):
        ex = d.get(f"nearest_{side}_example")
        if ex:
            lines.append(f"  nearest {side} example ({ex['similarity']}): \u201c{one_line(ex['text'], 80)}\u201d")
    return "\n".join(lines)


def _render_run(d: dict) -> str:
    lines = [f"run {d['run_id']}{'  node ' + d['node'] if d['node'] else ''}"]
    for t in d["topics"]:
        lines.append(f"topic {t['topic_id']} (extractor {t['extractor'] or 'not yet run'}; conversation relevance {t['conversation_relevance']})")
        if t.get("scope"):
            lines.append(f"  {t['scope']}")
            continue
        for n in t["nodes_out_of_scope"][:SHOWN]:
            lines.append(f"  {n['json_path']}: {n['reason']}")
        sentences = t["sentences"]
        kept = sum(1 for s in sentences if s.get("keep"))
        reasons = Counter((s.get("reason") or "").split(":")[0] for s in sentences if not s.get("keep"))
        lines.append(f"  {len(sentences)} sentences, {kept} kept; not kept: " + (", ".join(f"{n} by {r}" for r, n in reasons.most_common()) or "none"))
        for s in sentences[:SHOWN]:
            verdict = "KEEP" if s.get("keep") else "drop"
            lines.append(f"  {verdict} {one_line(s['text'], 60):<60}  {s.get('reason') or 'score ' + str(s.get('score'))}")
        if len(sentences) > SHOWN:
            lines.append(f"  … {len(sentences) - SHOWN} more (--json lists every one)")
    if not d["topics"]:
        lines.append("no compiled topic in the vault")
    return "\n".join(lines)


def register(commands: Commands) -> None:
    p = commands.add("explain", cmd_explain, help="why the selector kept a brick, or why a run's or node's sentences were not kept")
    p.add_argument("brick_id", nargs="?")
    p.add_argument("--run", help="a run id: every sentence of it, kept or not, and why, per compiled topic")
    p.add_argument("--node", help="with --run: one text node (JSON path) only")
    p.add_argument("--topic", action="append", help="with --run: only this topic (repeatable)")
