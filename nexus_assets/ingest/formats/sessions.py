"""One JSON Lines session file into its run: the lines (`jsonl`), the tool that wrote them (Claude
Code or Codex CLI, told apart by content), the run, and one ingestion error per bad line."""

from __future__ import annotations

from typing import Any, BinaryIO, Iterator

from nexus_assets.core.models import IngestionError, Run
from nexus_assets.ingest.formats import FormatError
from nexus_assets.ingest.formats.jsonl import read_lines, session_document
from nexus_assets.ingest.formats.registry import FORMATS, session_formats


def is_session_event(value: Any) -> bool:
    return any(f.is_event(value) for f in session_formats())  # type: ignore[misc]


def session_format(lines: list[Any]) -> str | None:
    """The tool that wrote `lines`: decided by the first line any session tool would write (the
    tools in `registry.py`'s order)."""
    tools = session_formats()
    for line in lines:
        for f in tools:
            if f.is_event(line):  # type: ignore[misc]
                return f.name
    return None


def iter_session(stream: BinaryIO, display: str, sha: str | None, limits: Any) -> Iterator[Run | IngestionError]:
    """The session's run, then its skipped entries and bad lines (each naming file and line).

    A file with no readable conversation yet (a Claude Code file of summary lines only) yields
    nothing: it is read again when it changes."""
    lines, problems = read_lines(
        stream,
        max_line_bytes=limits.max_line_bytes,
        max_depth=limits.max_depth,
        max_bytes=limits.max_session_bytes,
        max_lines=limits.max_session_lines,
    )
    kind = session_format(lines)
    if kind is None:
        if not any(isinstance(line, dict) for line in lines) and problems:
            raise FormatError(f"JSON Lines of which no line could be read; first problem: line {problems[0].line} {problems[0].problem}")
        # Named in the reverse of detection order: "not a Claude Code session ... nor a Codex CLI rollout ...".
        looks = " nor ".join(f.looks for f in reversed(session_formats()))
        raise FormatError(f"JSON Lines, but not {looks}; move it out of the runs folder")
    tool = FORMATS[kind]
    header = tool.header(lines)  # type: ignore[misc]
    run_id = header.get("session_id")
    if run_id is None:
        for p in problems:
            yield IngestionError(display, f"line {p.line} {p.problem}", file_sha256=sha)
        return
    if len(run_id) > 256 or any(ch in run_id for ch in "\x00\n\r\t"):
        raise FormatError(f"session id {run_id[:60]!r}… is not a usable run id (over 256 characters or control characters)")
    run = tool.read(session_document(lines, kind, header), None, None)
    yield run
    for warning in run.warnings:
        yield IngestionError(display, f"warning: {warning}; the rest of the session was kept", conversation=run.run_id, file_sha256=sha)
    for p in problems:
        yield IngestionError(display, f"line {p.line} {p.problem}; the rest of the session was read", conversation=run.run_id, file_sha256=sha)
