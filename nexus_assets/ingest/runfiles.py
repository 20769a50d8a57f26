"""Reading run files from disk (docs/inputs.md, invariant 11).

Every problem with a file becomes an `IngestionError` naming the file and what to do; nothing
here raises for bad input, so one broken file never stops a sync.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from nexus_assets.core.models import IngestionError, Run
from nexus_assets.core.paths import depth_of, value_at
from nexus_assets.ingest.formats import FormatError
from nexus_assets.ingest.formats import limits as L
from nexus_assets.ingest.formats.dispatch import parse_document
from nexus_assets.ingest.formats.exports import (
    SIDE_FILES,
    BrokenExportError,
    ConversationProblem,
    iter_export,
    open_export_members,
)
from nexus_assets.ingest.formats.values import ValueGuard, bad_value_message
from nexus_assets.ingest.formats.sessions import is_session_event, iter_session

RUN_FILE_SUFFIXES = (".json", ".jsonl", ".zip")
# Archives Nexus does not open (only .zip exports are read): found in the runs folder they are an
# ingestion error naming the fix, never silently passed over. Longest first: `.tar.gz` before `.gz`.
UNREADABLE_ARCHIVES = (
    ".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tgz", ".tbz2", ".txz", ".tar", ".gz", ".bz2", ".xz", ".zst", ".7z", ".rar",
)


def unreadable_archive(name: str) -> str | None:
    """The archive kind (".tar.gz", ".7z", ...) of a file name Nexus cannot read, else None."""
    lower = name.lower()
    return next((kind for kind in UNREADABLE_ARCHIVES if lower.endswith(kind)), None)


def archive_problem(kind: str) -> str:
    return (
        f"is a {kind} archive, which Nexus cannot read (it reads .json and .jsonl files and .zip exports); "
        "unpack it into the runs folder and sync again"
    )


# The limits a read of run files applies: handed down by the entry point (its settings).
Limits = L.InputLimits


@dataclass(frozen=True)
class RetryableError(IngestionError):
    """A file that vanished or changed while it was read: named now, read again at the next sync."""


@dataclass(frozen=True)
class RunsScan:
    """What a walk of the runs folder found: the run files to read, and each path it would not
    follow or could not read, with what is wrong and what to do (shown by `nexus errors`)."""

    files: list[Path]
    side_files: list[Path]  # of unzipped exports (user.json, chat.html, ...): no conversations
    skipped: list[tuple[Path, str]]


def scan_runs_dir(runs_dir: Path) -> RunsScan:
    """Every `.json` and `.zip` below `runs_dir`, in a stable order, and what was skipped.

    Never followed: a link that leads outside the folder (a sync reads only what is in it) and
    a directory link (it could loop). A name that is not UTF-8 cannot be recorded as a source,
    so it is skipped and named (escaped); an unreadable folder is named, not a traceback.
    """
    if not runs_dir.is_dir():
        return RunsScan([], [], [])
    root = os.path.realpath(runs_dir)
    files: list[Path] = []
    side_files: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    todo = [runs_dir]
    while todo:
        folder = todo.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as exc:
            skipped.append((folder, _unreadable_folder(exc)))
            continue
        for entry in entries:
            path = Path(entry.path)
            try:
                if entry.is_symlink():
                    target = os.path.realpath(path)
                    inside = os.path.commonpath([root, target]) == root
                    if not inside and (os.path.isdir(target) or _is_run_file(entry.name)):
                        skipped.append((path, f"is a link to {escaped(target)}, outside the runs folder; not followed; copy it into the runs folder to sync it"))
                    elif inside and _is_run_file(entry.name) and os.path.isfile(target) and _utf8(entry.name):
                        files.append(path)  # a link to another file in the folder; a folder link could loop
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                if not is_dir and entry.name.lower() in SIDE_FILES:
                    side_files.append(path)
                    continue
                if not is_dir and (kind := unreadable_archive(entry.name)) and _utf8(entry.name):
                    skipped.append((path, archive_problem(kind)))
                    continue
                if not (is_dir or _is_run_file(entry.name)):
                    continue
                if not _utf8(entry.name):
                    what = "folder" if is_dir else "file"
                    skipped.append((path, f"{what} name is not valid UTF-8, so the vault cannot record it as a source; skipped; rename it to a UTF-8 name and sync again"))
                elif is_dir:
                    todo.append(path)
                elif entry.is_file(follow_symlinks=False):
                    files.append(path)
            except OSError as exc:
                skipped.append((path, f"could not be looked at ({exc.strerror or exc}); skipped; check its permissions and sync again"))
    files.sort(key=lambda p: p.relative_to(runs_dir).as_posix())
    skipped.sort(key=lambda item: escaped(str(item[0])))
    return RunsScan(files, sorted(side_files), skipped)


def scan_run_files(runs_dir: Path) -> list[Path]:
    """Every run file below `runs_dir` that a sync reads, in a stable order (see `scan_runs_dir`)."""
    return scan_runs_dir(runs_dir).files


def _is_run_file(name: str) -> bool:
    return Path(name).suffix.lower() in RUN_FILE_SUFFIXES and name.lower() not in SIDE_FILES


def _unreadable_folder(exc: OSError) -> str:
    return f"folder could not be read ({exc.strerror or exc}); the run files in it were not synced; make it readable (chmod u+rx) and sync again"


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def escaped(path: str) -> str:
    """A path as text the vault can store and a person can read: bytes that are not UTF-8 are
    shown as \\xNN escapes (`bad\\xff.json`)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def source_problem(path: Path) -> str | None:
    """None when the source file can be read; else what is wrong with it, said for a person."""
    try:
        with path.open("rb"):
            return None
    except FileNotFoundError:
        return "is gone"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc}); make it readable and run this again"


def file_stat(path: Path) -> tuple[int, int, int, int] | None:
    """(size, mtime_ns, ctime_ns, inode): what changes when a file is rewritten, without reading it."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


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


def _load_whole(data: bytes, limits: Limits, open_after: str | None) -> Run:
    size = len(data)
    if size > limits.max_file_bytes:
        raise FormatError(
            f"file is {size} bytes, over the {limits.max_file_bytes}-byte limit for one run file; "
            "split it or raise NEXUS_MAX_RUN_FILE_BYTES"
        )
    # Refused on the bytes, before json.loads builds one frame per level.
    L.check_depth(data, limits.max_depth)
    text = _decode(data, "")
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
    *,
    max_bytes: int | None = None,
) -> Iterator[Run | IngestionError]:
    # The array adds one level above each conversation, whose own depth is what the limit means.
    guarded = L.GuardedStream(
        stream,
        depth_limit=limits.max_depth + 1,
        named=limits.max_depth,
        max_bytes=max_bytes,
        size_message=(
            f"inflates past {max_bytes} bytes (NEXUS_MAX_ZIP_INFLATED_BYTES); unzip it and check it, or raise the limit"
        ),
    )
    # Then numbers and escapes no reader keeps exactly are cut out: one bad value costs its
    # conversation, not the rest of the file.
    values = ValueGuard(guarded)  # type: ignore[arg-type]
    count = 0
    try:
        items = iter_export(
            values,  # type: ignore[arg-type]
            open_after=open_after,
            seen=seen,
            too_deep=guarded.too_deep,
            too_deep_problem=L.conversation_depth_message(limits.max_depth),
            bad_value=lambda item: bad_value_message(values.bad_value(item)),
        )
        for item in items:
            count += 1
            if count > limits.max_conversations:
                yield IngestionError(
                    display,
                    f"holds more than {limits.max_conversations} conversations (NEXUS_MAX_CONVERSATIONS_PER_FILE); "
                    "the rest were not read; split the export or raise the limit",
                    file_sha256=sha,
                )
                return
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
    except L.LimitError as exc:
        where = f"array item #{count}"
        yield IngestionError(display, f"{where}: {exc}; the conversations before it were read", conversation=f"#{count}", file_sha256=sha)
    except BrokenExportError as exc:
        if guarded.unclosed:  # the file ends inside a too-deep value: that is the news, not the broken JSON
            where = f"#{exc.conversations_read}"
            problem = f"{L.depth_message(limits.max_depth)}; the file ends inside array item {where}; the conversations before it were read"
            yield IngestionError(display, problem, conversation=where, file_sha256=sha)
        else:
            yield IngestionError(display, str(exc), file_sha256=sha)
    except FormatError as exc:
        yield IngestionError(display, str(exc), file_sha256=sha)
    except UnicodeDecodeError as exc:
        yield IngestionError(display, f"not valid UTF-8 near byte {exc.start}; re-export it as UTF-8", file_sha256=sha)
    except MemoryError:
        yield IngestionError(display, _OUT_OF_MEMORY, file_sha256=sha)
    except OSError:
        raise
    except Exception as exc:  # a reader fault: say what it is, cost this file only
        yield IngestionError(display, _unexpected(exc), file_sha256=sha)


_OUT_OF_MEMORY = "ran out of memory while reading it; nothing from this file was stored; split it or lower the limits"


def _unexpected(exc: BaseException) -> str:
    return f"could not be read: unexpected {type(exc).__name__}: {str(exc)[:200]}; please report it with the file"


def _check_zip(source: Path | BinaryIO, limits: Limits) -> int:
    """Refuse a zip whose JSON members would inflate past the limits; returns what may be inflated.

    Sizes come from the archive's directory; zipfile stops each member at its declared size, and
    the stream is capped again while read, so a lying header gains nothing.
    """
    try:
        with zipfile.ZipFile(source) as archive:
            members = [i for i in archive.infolist() if not i.is_dir() and i.filename.lower().endswith(".json")]
    except zipfile.BadZipFile as exc:
        raise FormatError(f"not a readable zip archive ({exc}); download the export again") from None
    for info in members:
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > 1024 * 1024 and ratio > limits.max_zip_ratio:
            raise L.LimitError(
                f"zip member {info.filename} inflates {ratio:.0f} times ({info.compress_size} to {info.file_size} bytes), "
                f"over the compression-ratio limit of {limits.max_zip_ratio} (NEXUS_MAX_ZIP_RATIO); "
                "unzip it and check it, or raise the limit"
            )
    total = sum(i.file_size for i in members)
    if total > limits.max_inflated_bytes:
        raise L.LimitError(
            f"zip's JSON inflates to {total} bytes, over the {limits.max_inflated_bytes}-byte limit "
            "(NEXUS_MAX_ZIP_INFLATED_BYTES); unzip it and check it, or raise the limit"
        )
    return limits.max_inflated_bytes


def _json_lines(head: bytes) -> bool:
    """Detected by content (docs/inputs.md): a `.json` may hold a session, a `.jsonl` a Nexus run."""
    from nexus_assets.ingest.formats.jsonl import looks_like_json_lines

    return looks_like_json_lines(head, is_session_event)


def _long_nodes(run: Run, display: str, sha: str | None, limit: int) -> Iterator[IngestionError]:
    """One error per text node too long to extract; the run itself is still stored."""
    for node in run.nodes:
        try:
            text = value_at(run.document, node.steps)
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(text, str) and len(text) > limit:
            yield IngestionError(display, f"{node.path} {L.node_too_long(len(text), limit)}", conversation=run.run_id, file_sha256=sha)


def iter_run_file(
    path: Path,
    display: str,
    *,
    sha: str | None = None,
    limits: Limits | None = None,
    open_after: str | None = None,
    data: bytes | None = None,
) -> Iterator[Run | IngestionError]:
    """The runs in one file, and an IngestionError for each part that could not be read.

    With `data` (the file's bytes, already read and hashed) the file is not opened again, so
    what is stored is exactly what was hashed.
    """
    limits = limits or Limits()
    for item in _iter_run_file(path, display, sha=sha, limits=limits, open_after=open_after, data=data):
        yield item
        if isinstance(item, Run):
            yield from _long_nodes(item, display, sha, limits.max_node_chars)


def _iter_run_file(
    path: Path, display: str, *, sha: str | None, limits: Limits, open_after: str | None, data: bytes | None
) -> Iterator[Run | IngestionError]:
    try:
        if path.suffix.lower() == ".zip":
            source = io.BytesIO(data) if data is not None else path
            budget = _check_zip(source, limits)
            seen: dict[str, int] = {}
            for member, stream in open_export_members(source):  # type: ignore[arg-type]
                # A shard is named; the usual single conversations.json needs no naming.
                shown = display if member.rsplit("/", 1)[-1].lower() == "conversations.json" else f"{display}:{member}"
                yield from _stream_export(stream, shown, sha, limits, open_after, seen, max_bytes=budget)
            return
        if data is None:
            with path.open("rb") as fh:
                first = _first_significant_byte(fh)
                if first == b"[":
                    yield from _stream_export(fh, display, sha, limits, open_after)
                    return
                if first == b"{" and _json_lines(fh.readline(L.DETECT_BYTES) + fh.readline(L.DETECT_BYTES)):
                    fh.seek(0)
                    yield from iter_session(fh, display, sha, limits)
                    return
            data = path.read_bytes()
        elif (b"\n" in data[: L.DETECT_BYTES] or len(data) <= L.DETECT_BYTES) and _json_lines(data[: L.DETECT_BYTES]):
            # (A first line longer than the detection window is no session's: not parsed twice.)
            yield from iter_session(io.BytesIO(data), display, sha, limits)
            return
        elif data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"[":
            yield from _stream_export(io.BytesIO(data), display, sha, limits, open_after)
            return
        yield from with_warnings(_load_whole(data, limits, open_after), display, sha)
    except FormatError as exc:
        yield IngestionError(display, str(exc), file_sha256=sha)
    except FileNotFoundError:
        yield RetryableError(display, "vanished while the sync was reading it; it will be read if it comes back", file_sha256=sha)
    except OSError as exc:
        yield RetryableError(display, f"could not be read: {exc.strerror or exc}; it will be tried again at the next sync", file_sha256=sha)
    except MemoryError:
        yield IngestionError(display, _OUT_OF_MEMORY, file_sha256=sha)
    except Exception as exc:  # a reader fault: say what it is, cost this file only
        yield IngestionError(display, _unexpected(exc), file_sha256=sha)
