"""Commands that only read the vault: topics, bricks, rejections, manifest, trace, errors, calls.

They import neither Dagster nor the LLM client, so they answer in about the time DuckDB takes to start.
"""

from __future__ import annotations

import argparse
import re
import shutil
import textwrap

from nexus_assets.cli.common import (
    emit,
    one_line,
    open_vault,
    require_topic,
    shown_path,
)
from nexus_assets.services.queries import find_brick_or_passage, passage_trace_of, trace_of
from nexus_assets.cli.parsing import Commands


def cmd_bricks(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        require_topic(vault, args.topic)
        bricks = vault.bricks.select(args.topic)
        if not args.all:
            bricks = [b for b in bricks if b.state != "SUPERSEDED"]
        names = vault.runs.run_names(s.run_id for b in bricks for s in b.sources)
        left = {}
        if args.all:
            from nexus_assets.services.queries import left_because  # why a brick left the manifest (docs/quality.md)

            left = left_because(vault, args.topic, bricks)
        if args.json:
            from nexus_assets.services.queries import named_bricks  # the models the API and the MCP tools answer with

            emit(args, [b.model_dump(mode="json") for b in named_bricks(vault, bricks, left)])
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
            f"{'  (left: ' + left[b.brick_id] + ')' if b.brick_id in left else ''}"
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
    from nexus_assets.services.queries import manifest

    m = manifest(args.db, args.topic)
    data = m.model_dump(mode="json")
    text = f"{m.topic_id} manifest {m.manifest_hash}\n" + "\n".join(
        f"{e.order_index:>4} {e.state:<10} {e.brick_id}" for e in m.bricks
    )
    emit(args, data, text)
    return 0


TRACE_SOURCES = 3  # sources a trace shows unless --full: a brick said in many conversations stays one screen
TRACE_WINDOW = 160  # characters shown on each side of the quoted span
TRACE_WIDTH = 96  # a fixed width, so what the README shows is what the command prints


def cmd_trace(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        kind, found = find_brick_or_passage(vault, args.brick_id)
        if kind == "passage":
            traced = passage_trace_of(vault, found, viewer_url=args.basics.viewer_url)
            emit(args, traced, render_passage_trace(traced, full=args.full))
            return 0
        traced = trace_of(vault, found)
    emit(args, traced, render_trace(traced, full=args.full))
    return 0


def render_trace(traced: dict, *, full: bool = False) -> str:
    """A brick and where it was said: per source the file, the conversation and the message, with a
    window around the quoted span (the whole message with `full`); the first TRACE_SOURCES sources
    and a count of the rest unless `full`."""
    traces = traced["traces"]
    count = len(traces)
    lines = [
        f"brick {traced['brick_id'][:12]}  {traced['state']}{'  STALE' if traced['stale'] else ''}"
        f"{'  ABANDONED BRANCH (every source)' if traced['abandoned'] else ''}  topic {traced['topic_id']}"
        f"{f'  ({count} sources)' if count > 1 else ''}",
        *textwrap.wrap(f"\u201c{' '.join(traced['content'].split())}\u201d", TRACE_WIDTH, subsequent_indent=" "),
    ]
    shown = traces if full else traces[:TRACE_SOURCES]
    for n, t in enumerate(shown, 1):
        lines.append("")
        lines += _source_lines(t, f"{n}. ", full)
    if len(shown) < count:
        rest = count - len(shown)
        lines.append("")
        lines.append(
            f"… and {rest} more source{'s' if rest > 1 else ''}; "
            f"`nexus trace {traced['brick_id'][:12]} --full` shows every source, each message whole"
        )
    return "\n".join(lines)


def _source_lines(t: dict, number: str, full: bool) -> list[str]:
    """One source where it was said: the run file, the conversation, the message and its path, the
    text marked in it, its characters and whether the run file still holds it (as recorded)."""
    lines = [f"{number}{shown_path(t['source_file']) if t['source_file'] else '(run file not recorded)'}"]
    conversation = t["run_label"] + (f" · {t['run_id']}" if t["run_title"] else "")
    lines.append(f"   └─ conversation {conversation}")
    node = (t["node_type"] or "node").replace("_", " ")
    where = f"  (line {t['line']} of the session file)" if t.get("line") else ""
    lines.append(f"      └─ {node}{', ' + t['branch'] + ' branch' if t['branch'] != 'current' else ''}  {t['json_path']}{where}")
    lines += [f"         │ {line}" if line else "         │" for line in _marked(t, full)]
    state = "matches the run file now" if t["current"] else f"DRIFTED: {t['problem'] or 'the run file changed'}"
    lines.append(f"         └─ characters [{t['start']}:{t['end']}] of the message; sha256 {t['node_checksum'][:12]}… {state}")
    return lines


def render_passage_trace(traced: dict, *, full: bool = False) -> str:
    """A passage of the record and where it was said, as a brick's source is shown (`_source_lines`),
    with who said it and when. A passage has one source; `--full` shows its message whole."""
    (source,) = traced["sources"]
    said = " at ".join(x for x in (traced["speaker"], traced["time"]) if x)
    header = f"passage {traced['passage_id'][:12]}{'  STALE' if not traced['current'] else ''}{'  said by ' + said if said else ''}"
    t = {**traced, **source, "run_label": traced["conversation"]}
    return "\n".join([
        header,
        *textwrap.wrap(f"\u201c{' '.join(traced['content'].split())}\u201d", TRACE_WIDTH, subsequent_indent=" "),
        "",
        *_source_lines(t, "", full),
    ])


def _marked(t: dict, full: bool) -> list[str]:
    """The quoted span marked ⟦…⟧ in its message: a window of TRACE_WINDOW characters each side,
    cut at spaces and shown on wrapped lines, or the whole message with its own line breaks."""
    text, start, end = t["node_text"], t["start"], t["end"]
    if not text:
        return ["(the message is not in the vault any more)"]
    if full:
        marked = text[:start] + "\u27e6" + text[start:end] + "\u27e7" + text[end:]
        return [w for paragraph in marked.splitlines() for w in (textwrap.wrap(paragraph, TRACE_WIDTH - 11) or [""])]
    before, after = text[max(0, start - TRACE_WINDOW) : start], text[end : end + TRACE_WINDOW]
    # Cut where a word ends, and say that it was cut.
    if start > TRACE_WINDOW:
        parts = re.split(r"\s", before, maxsplit=1)
        before = "…" + parts[-1]
    if end + TRACE_WINDOW < len(text):
        parts = re.split(r"\s(?=\S*$)", after, maxsplit=1)
        after = parts[0] + "…"
    window = " ".join(before.split()) + (" " if before[-1:].isspace() else "")
    window += "\u27e6" + " ".join(text[start:end].split()) + "\u27e7"
    window += (" " if after[:1].isspace() else "") + " ".join(after.split())
    return textwrap.wrap(window, TRACE_WIDTH - 11)


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


# The reading commands sit apart in `nexus --help` (among topics, conflicts, explain, verify, close),
# so each registers on its own; nexus_assets/cli/__init__.py lists them in that order.
def register_calls(commands: Commands) -> None:
    p = commands.add("calls", cmd_calls, help="the audit trail of LLM calls")
    p.add_argument("--topic", help="only this topic's calls")


def register_bricks(commands: Commands) -> None:
    p = commands.add("bricks", cmd_bricks, help="a topic's visible bricks in order")
    p.add_argument("topic")
    p.add_argument("--all", action="store_true", help="include superseded bricks")
    p.add_argument("--full", action="store_true", help="each brick's whole text, wrapped, with the conversation it came from")
    p = commands.add("rejections", cmd_rejections, help="rejected pointers with reason codes")
    p.add_argument("topic")


def register_manifest(commands: Commands) -> None:
    p = commands.add("manifest", cmd_manifest, help="the topic's manifest and its hash")
    p.add_argument("topic")
    p = commands.add("trace", cmd_trace, help="where a brick or a passage was said: file, conversation, message, its text marked")
    p.add_argument("brick_id", metavar="ID", help="a brick id or a passage id, or a unique prefix of either")
    p.add_argument("--full", action="store_true", help="every source (not the first 3), each message whole (not a window around the text)")


def register_errors(commands: Commands) -> None:
    commands.add("errors", cmd_errors, help="ingestion errors")
