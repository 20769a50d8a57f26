"""Reading run files from disk (DESIGN §3, invariant 11).

Every problem with a file becomes an `IngestionError` naming the file and what to do; nothing
here raises for bad input, so one broken file never stops a sync.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

from nexus_assets.core.formats import FormatError, detect_format
from nexus_assets.core.formats.exports import SIDE_FILES
from nexus_assets.core.models import IngestionError, Run
from nexus_assets.core.paths import depth_of

RUN_FILE_SUFFIXES = (".json", ".zip")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


@dataclass(frozen=True)
class Limits:
    # One Nexus run file is loaded whole; exports are streamed conversation by conversation.
    max_file_bytes: int = field(default_factory=lambda: _env_int("NEXUS_MAX_RUN_FILE_BYTES", 32 * 1024 * 1024))
    max_depth: int = field(default_factory=lambda: _env_int("NEXUS_MAX_JSON_DEPTH", 64))


def scan_run_files(runs_dir: Path) -> list[Path]:
    """Every `.json` and `.zip` below `runs_dir`, in a stable order."""
    if not runs_dir.is_dir():
        return []
    found = [
        p
        for p in runs_dir.rglob("*")
        if p.is_file() and p.suffix.lower() in RUN_FILE_SUFFIXES and p.name.lower() not in SIDE_FILES
    ]
    return sorted(found, key=lambda p: p.relative_to(runs_dir).as_posix())


def scan_side_files(runs_dir: Path) -> list[Path]:
    """The side files of unzipped exports below `runs_dir` (user.json, chat.html, ...), skipped by a sync."""
    if not runs_dir.is_dir():
        return []
    return sorted(p for p in runs_dir.rglob("*") if p.is_file() and p.name.lower() in SIDE_FILES)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _first_significant_byte(fh: BinaryIO) -> bytes:
    head = fh.read(4096)
    fh.seek(0)
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return stripped[:1]


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FormatError(f"not valid UTF-8 at byte {exc.start}; re-export it as UTF-8") from None


def parse_document(document: object, *, open_after: str | None = None) -> Run:
    """One run from one JSON document of any supported format."""
    kind = detect_format(document)
    if kind == "nexus":
        from nexus_assets.core.formats.nexus import nexus_run

        return nexus_run(document)
    if kind == "chatgpt":
        from nexus_assets.core.formats.chatgpt import chatgpt_run

        return chatgpt_run(document, open_after=open_after)
    if kind == "claude":
        from nexus_assets.core.formats.claude import claude_run

        return claude_run(document, open_after=open_after)
    keys = sorted(document)[:8] if isinstance(document, dict) else type(document).__name__
    raise FormatError(
        f"valid JSON but not a known run format (found {keys}); expected a Nexus run "
        '{"run_id", "status", "messages"} or a ChatGPT/Claude conversations.json export'
    )


def _load_whole(path: Path, limits: Limits, open_after: str | None) -> Run:
    size = path.stat().st_size
    if size > limits.max_file_bytes:
        raise FormatError(
            f"file is {size} bytes, over the {limits.max_file_bytes}-byte limit for one run file; "
            "split it or raise NEXUS_MAX_RUN_FILE_BYTES"
        )
    text = _decode(path.read_bytes(), str(path))
    if not text.strip():
        raise FormatError("file is empty; a run file holds one JSON document")
    try:
        document = json.loads(text)
    except RecursionError:
        raise FormatError(f"JSON nesting is deeper than the limit of {limits.max_depth} levels") from None
    except json.JSONDecodeError as exc:
        hint = " (the file looks truncated)" if exc.pos >= len(text.rstrip()) - 1 else ""
        raise FormatError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}{hint}") from None
    depth = depth_of(document)
    if depth > limits.max_depth:
        raise FormatError(f"JSON nesting is {depth} levels deep, over the limit of {limits.max_depth}")
    return parse_document(document, open_after=open_after)


def with_warnings(run: Run, display: str, sha: str | None) -> Iterator[Run | IngestionError]:
    """The run, then one warning per entry of it that was skipped (the rest of the run is kept)."""
    yield run
    for warning in run.warnings:
        yield IngestionError(display, f"warning: {warning}; the rest of the conversation was kept", conversation=run.run_id, file_sha256=sha)


def _stream_export(
    stream: BinaryIO,
    display: str,
    sha: str | None,
    limits: Limits,
    open_after: str | None,
    seen: dict[str, int] | None = None,
) -> Iterator[Run | IngestionError]:
    from nexus_assets.core.formats.exports import ConversationProblem, iter_export

    try:
        for item in iter_export(stream, open_after=open_after, seen=seen):
            if isinstance(item, ConversationProblem):
                where = item.conversation or f"#{item.index}"
                yield IngestionError(display, item.problem, conversation=where, file_sha256=sha)
            elif depth_of(item.document) > limits.max_depth:
                yield IngestionError(
                    display,
                    f"JSON nesting is over the limit of {limits.max_depth} levels",
                    conversation=item.run_id,
                    file_sha256=sha,
                )
            else:
                yield from with_warnings(item, display, sha)
    except FormatError as exc:
        yield IngestionError(display, str(exc), file_sha256=sha)
    except UnicodeDecodeError as exc:
        yield IngestionError(display, f"not valid UTF-8 near byte {exc.start}; re-export it as UTF-8", file_sha256=sha)
    except Exception as exc:  # ijson reports broken streams with its own error types
        yield IngestionError(display, f"not valid JSON: {exc}", file_sha256=sha)


def iter_run_file(
    path: Path, display: str, *, sha: str | None = None, limits: Limits | None = None, open_after: str | None = None
) -> Iterator[Run | IngestionError]:
    """The runs in one file, and an IngestionError for each part that could not be read."""
    limits = limits or Limits()
    try:
        if path.suffix.lower() == ".zip":
            from nexus_assets.core.formats.exports import open_export_members

            seen: dict[str, int] = {}
            try:
                for member, stream in open_export_members(path):
                    # A shard is named; the usual single conversations.json needs no naming.
                    shown = display if member.rsplit("/", 1)[-1].lower() == "conversations.json" else f"{display}:{member}"
                    yield from _stream_export(stream, shown, sha, limits, open_after, seen)
            except zipfile.BadZipFile:
                raise FormatError("not a readable zip archive; download the export again") from None
            return
        with path.open("rb") as fh:
            first = _first_significant_byte(fh)
            if first == b"[":
                yield from _stream_export(fh, display, sha, limits, open_after)
                return
        yield from with_warnings(_load_whole(path, limits, open_after), display, sha)
    except FormatError as exc:
        yield IngestionError(display, str(exc), file_sha256=sha)
    except OSError as exc:
        yield IngestionError(display, f"could not be read: {exc.strerror or exc}", file_sha256=sha)
