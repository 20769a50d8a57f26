"""Commands that only read the vault: topics, bricks, rejections, manifest, trace, errors, calls.

They import neither Dagster nor the LLM client, so they answer in about the time DuckDB takes to start.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap

from nexus_assets.cli.common import (
    UsageError,
    emit,
    one_line,
    open_vault,
    require_topic,
)
from nexus_assets.trace.step import trace_brick


def cmd_bricks(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        require_topic(vault, args.topic)
        bricks = vault.bricks.select(args.topic)
        if not args.all:
            bricks = [b for b in bricks if b.state != "SUPERSEDED"]
        names = vault.runs.run_names(s.run_id for b in bricks for s in b.sources)
        if args.json:
            from nexus_assets.queries import named_bricks  # the models the API and the MCP tools answer with

            emit(args, [b.model_dump(mode="json") for b in named_bricks(vault, bricks)])
            return 0
    if args.full:
        text = "\n\n".join(_brick_whole(b, names) for b in bricks)
    else:
        text = "\n".join(
            f"{'-' if b.order_index is None else b.order_index:>4} {b.state:<10} {b.brick_id[:12]}"
            f"{' STALE' if b.stale else ''}{' ABANDONED-BRANCH' if b.abandoned else ''}"
            f"{' (' + str(len(b.sources)) + ' sources)' if len(b.sources) > 1 else ''}"
            f"{' superseded by ' + b.superseded_by[:12] if b.superseded_by else ''}  {one_line(b.content, 90)}"
            f"{'  — ' + names[b.sources[0].run_id].label if b.sources else ''}"
            for b in bricks
        )
    emit(args, None, text or f"no bricks in {args.topic}")
    return 0


def _brick_whole(b, names: dict) -> str:
    """A brick as `--full` shows it: a header, the whole text wrapped to the terminal, its sources."""
    width = max(40, min(shutil.get_terminal_size().columns, 120))
    header = (
        f"{'-' if b.order_index is None else b.order_index:>4} {b.state} {b.brick_id[:12]}"
        f"{' STALE' if b.stale else ''}{' ABANDONED-BRANCH' if b.abandoned else ''}"
        f"{' superseded by ' + b.superseded_by[:12] if b.superseded_by else ''}"
    )
    body = "\n".join(
        textwrap.fill(paragraph, width, initial_indent="     ", subsequent_indent="     ") if paragraph.strip() else ""
        for paragraph in b.content.splitlines()
    )
    sources = "\n".join(
        f"     from {names[s.run_id].label}{' · ' + s.run_id if names[s.run_id].title else ''} {s.json_path} [{s.start}:{s.end}]"
        for s in b.sources
    )
    return "\n".join(part for part in (header, body, sources) if part)


def cmd_rejections(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        require_topic(vault, args.topic)
        rows = vault.occurrences.rejections(args.topic)
    text = "\n".join(
        f"{r['reason']:<18} {r['run_id']}  {r['json_path']}  {one_line(repr(r['verbatim_quote']), 60)}" for r in rows
    ) or f"no rejections in {args.topic}"
    emit(args, rows, text)
    return 0


def cmd_manifest(args: argparse.Namespace) -> int:
    from nexus_assets.queries import manifest

    m = manifest(args.db, args.topic)
    data = m.model_dump(mode="json")
    text = f"{m.topic_id} manifest {m.manifest_hash}\n" + "\n".join(
        f"{e.order_index:>4} {e.state:<10} {e.brick_id}" for e in m.bricks
    )
    emit(args, data, text)
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        matches = vault.history.brick_ids_with_prefix(args.brick_id)
        if not matches:
            raise UsageError(f"no brick {args.brick_id!r}; list them with `nexus bricks TOPIC`")
        if len(matches) > 1:
            raise UsageError(f"brick id prefix {args.brick_id!r} is ambiguous; give more characters")
        traced = trace_brick(vault, matches[0])
    lines = [
        f"brick {traced['brick_id']} [{traced['state']}]{' STALE' if traced['stale'] else ''}"
        f"{' ABANDONED BRANCH (every source)' if traced['abandoned'] else ''} in {traced['topic_id']}"
    ]
    for t in traced["traces"]:
        lines.append(
            f"\n{t['run_label']}{' · ' + t['run_id'] if t['run_title'] else ''} {t['json_path']} [{t['start']}:{t['end']}] "
            f"{t['node_type'] or 'node'}, {t['branch']} branch; "
            f"checksum {t['node_checksum'][:16]}… "
            f"({'matches current source' if t['current'] else 'DRIFTED: ' + (t['problem'] or '')})"
        )
        lines.append(t["node_text"][: t["start"]] + "⟦" + t["node_text"][t["start"] : t["end"]] + "⟧" + t["node_text"][t["end"] :])
    emit(args, traced, "\n".join(lines))
    return 0


def cmd_errors(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        rows = vault.runs.ingestion_errors()
    text = "\n".join(f"{r['file']}{' [' + r['conversation'] + ']' if r['conversation'] else ''}: {r['problem']}" for r in rows)
    emit(args, rows, text or "no ingestion errors")
    return 0


def cmd_calls(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        if args.topic:
            require_topic(vault, args.topic)
        rows = vault.llm_calls.calls(args.topic)
    text = "\n".join(
        f"{str(r['recorded_at'])[:19]} {r['status']:<6} {r['topic_id']} {r['run_id']} chunk {r['chunk_index'] + 1}/{r['chunk_count']} "
        f"{r['model']} {r['prompt_version']} in={r['prompt_tokens']} out={r['completion_tokens']} {r['latency_ms']}ms "
        f"key {r['call_key'][:12]}{f' (one request for {n} topics)' if (n := r.get('topics_in_request') or 1) > 1 else ''}"
        f"{' — ' + r['error'] if r['error'] else ''}"
        for r in rows
    )
    emit(args, rows, text or "no LLM calls recorded")
    return 0
