"""ChatGPT and Claude data exports: a `conversations.json` array, read one conversation at a time.

Exports grow to hundreds of megabytes, so the array is streamed with ijson and only one
conversation is held in memory. A conversation that cannot be read becomes a
`ConversationProblem`; the rest of the export still imports.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from os import PathLike
from typing import Any, BinaryIO, Callable, Iterator

import ijson

from nexus_assets.core.models import Run
from nexus_assets.ingest.formats import FormatError
from nexus_assets.ingest.formats.conversations import (
    ConversationError,
    ConversationProblem,
    normalize_open_after,
)
from nexus_assets.ingest.formats.dispatch import parse_document
from nexus_assets.ingest.formats.registry import detect_format, names

try:
    _ijson: Any = ijson.get_backend("yajl2_c")
except ImportError:  # no compiled backend on this platform: ijson picks the best pure one
    _ijson = ijson

EXPORT_MEMBER = "conversations.json"
# ChatGPT shards large exports: conversations-000.json, conversations-001.json, ...
_SHARD = re.compile(r"^conversations(?:-\d+)?\.json$")
# Files an unzipped ChatGPT or Claude export puts beside its conversations; they hold no
# conversation text, so a sync skips them (one info line), not reports them as errors.
SIDE_FILES = frozenset(
    {
        "user.json",
        "users.json",
        "message_feedback.json",
        "model_comparisons.json",
        "shared_conversations.json",
        "projects.json",
        "memories.json",
        "chat.html",
    }
)
# After this many array items of which none is a conversation, the file is not an export.
_SHAPE_PROBE = 1000
_BOM = b"\xef\xbb\xbf"
_READ_SIZE = 64 * 1024


class BrokenExportError(FormatError):
    """The export's JSON breaks off or goes bad part-way; conversations before it were yielded."""

    def __init__(self, message: str, *, conversations_read: int, bytes_read: int):
        super().__init__(message)
        self.conversations_read = conversations_read
        self.bytes_read = bytes_read


class _Prefixed:
    """A read-only byte stream that replays already-peeked bytes before the rest of `stream`."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self._head = head
        self._stream = stream
        self.bytes_read = len(head)

    def read(self, size: int = -1) -> bytes:
        if self._head:
            if size is None or size < 0:
                data, self._head = self._head + self._stream.read(), b""
            else:
                data, self._head = self._head[:size], self._head[size:]
            return data
        data = self._stream.read(size)
        self.bytes_read += len(data)
        return data


def _open_array(stream: BinaryIO) -> _Prefixed:
    """Check that the stream holds a JSON array before streaming it; skip a UTF-8 BOM."""
    head = b""
    while True:
        chunk = stream.read(_READ_SIZE)
        if not chunk:
            break
        head += chunk
        if head.lstrip(_BOM + b" \t\r\n"):
            break
    if head.startswith(_BOM):
        head = head[len(_BOM):]
    significant = head.lstrip(b" \t\r\n")[:1]
    if not significant:
        raise FormatError("export is empty; expected a JSON array of conversations")
    if significant != b"[":
        found = "an object" if significant == b"{" else f"{significant.decode('latin-1')!r}"
        raise FormatError(
            f"export does not start with a JSON array (found {found}); a ChatGPT or Claude "
            "conversations.json is an array of conversations"
        )
    return _Prefixed(head, stream)


def _first_line(exc: Exception) -> str:
    # yajl's messages carry a multi-line excerpt of the input (sometimes as bytes); the first
    # line is the diagnosis.
    message = exc.args[0] if exc.args else exc
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    return str(message).strip().splitlines()[0] if str(message).strip() else type(exc).__name__


def _convert(item: Any, index: int, open_after: str | None) -> Run | ConversationProblem:
    if not isinstance(item, dict):
        kind = "null" if item is None else type(item).__name__
        return ConversationProblem(index, None, f"array item #{index} is {kind}, not a conversation object")
    try:
        if detect_format(item) in names("export"):
            return parse_document(item, open_after=open_after, index=index)
    except ConversationError as exc:
        return ConversationProblem(index, _plain_id(item), exc.detail)
    except FormatError as exc:
        return ConversationProblem(index, _plain_id(item), str(exc))
    except RecursionError:
        return ConversationProblem(index, _plain_id(item), "JSON nesting is too deep to read")
    keys = sorted(item)[:8]
    return ConversationProblem(
        index,
        _plain_id(item),
        f"not a ChatGPT conversation (no 'mapping') or a Claude conversation (no 'chat_messages'); found keys {keys}",
    )


def _plain_id(item: dict) -> str | None:
    for key in ("conversation_id", "id", "uuid"):
        value = item.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _not_a_conversation(problem: ConversationProblem) -> bool:
    return problem.problem.startswith(("not a ChatGPT conversation", "array item #"))


def _shape_of(item: Any) -> str:
    if isinstance(item, dict):
        keys = sorted(item)[:8]
        if "conversations" in item or "messages" in item:
            return f"objects with keys {keys} (a ShareGPT- or chat-style dataset, not a data export)"
        return f"objects with keys {keys}"
    return "null" if item is None else type(item).__name__ + " values"


def _unsupported(count: int, first: Any) -> FormatError:
    return FormatError(
        f"a JSON array of {count}{'+' if count >= _SHAPE_PROBE else ''} items, none of them a conversation: "
        f"it holds {_shape_of(first)}; accepted are a ChatGPT or Claude conversations.json export "
        '(objects with "mapping" or "chat_messages") or one Nexus run {"run_id", "status", "messages"}'
    )


def _guarded(
    item: Any, index: int, too_deep: Callable[[Any], bool] | None, too_deep_problem: str, bad_value: Callable[[Any], str | None] | None
) -> ConversationProblem | None:
    """The problem of an item a guard cut part of out (too deep, or a value no reader can keep), else None."""
    if too_deep is not None and too_deep(item):
        # Not read at all: what is left might even parse, but it is not the conversation.
        return ConversationProblem(index, _plain_id(item) if isinstance(item, dict) else None, too_deep_problem)
    problem = bad_value(item) if bad_value is not None else None
    if problem is not None:
        conversation = _plain_id(item) if isinstance(item, dict) else None
        return ConversationProblem(index, None if conversation is None or problem in conversation else conversation, problem)
    return None


def iter_export(
    stream: BinaryIO,
    *,
    open_after: str | None = None,
    seen: dict[str, int] | None = None,
    too_deep: Callable[[Any], bool] | None = None,
    too_deep_problem: str = "",
    bad_value: Callable[[Any], str | None] | None = None,
) -> Iterator[Run | ConversationProblem]:
    """Each conversation of a ChatGPT or Claude export as a `Run`, or the problem that stopped it.

    Memory stays bounded by the largest single conversation. A duplicate conversation id is a
    problem for the later copy: the first run with that id was already yielded. A JSON stream
    that breaks part-way raises `BrokenExportError` after every conversation before the break.
    An item for which `too_deep` holds (a depth guard cut part of it out) is `too_deep_problem`,
    whatever is left of it; one for which `bad_value` says what is wrong (a value guard cut out a
    number or escape no reader can keep) is that problem.
    """
    normalize_open_after(open_after)  # a bad setting fails before anything is read
    source = _open_array(stream)
    items = _ijson.items(source, "item", use_float=True)  # floats, not Decimal: canonical_json needs them
    # Shared across the shards of one export, so a conversation repeated in two shards is caught.
    seen = {} if seen is None else seen
    # Until one conversation is recognised, non-conversations are held back: a file that holds
    # none (a dataset, a side file) is one error for the file, not one per item.
    held: list[ConversationProblem] = []
    first_item: Any = None
    recognised = False
    index = 0
    while True:
        try:
            item = next(items)
        except StopIteration:
            if held:
                raise _unsupported(len(held), first_item)
            return
        except (ijson.JSONError, UnicodeDecodeError) as exc:
            reason = _first_line(exc)
            hint = " (the file looks truncated)" if "premature EOF" in reason else ""
            raise BrokenExportError(
                f"export JSON is broken after {index} complete conversation(s) "
                f"({source.bytes_read} bytes read): {reason}{hint}",
                conversations_read=index,
                bytes_read=source.bytes_read,
            ) from None
        guarded = _guarded(item, index, too_deep, too_deep_problem, bad_value)
        if guarded is not None:
            yield guarded
            index += 1
            continue
        result = _convert(item, index, open_after)
        if not recognised:
            if isinstance(result, ConversationProblem) and _not_a_conversation(result):
                if not held:
                    first_item = item
                held.append(result)
                if len(held) >= _SHAPE_PROBE:
                    raise _unsupported(len(held), first_item)
                index += 1
                continue
            recognised = True
            yield from held
            held.clear()
        if isinstance(result, Run):
            first = seen.get(result.run_id)
            if first is not None:
                result = ConversationProblem(
                    index,
                    result.run_id,
                    f"duplicate conversation id {result.run_id!r} (first at array item #{first}, which was kept)",
                )
            else:
                seen[result.run_id] = index
        yield result
        index += 1


def export_member_names(names: list[str]) -> list[str]:
    """The conversation members of an export zip: `conversations.json` or its numbered shards.

    Exports put them at the top level, but a re-zipped download often nests them in a folder;
    the shallowest folder that holds any wins, and its shards are read in name order.
    """
    found = [
        n
        for n in names
        if not n.endswith("/") and not n.startswith("__MACOSX/") and _SHARD.match(posixpath.basename(n).lower())
    ]
    if not found:
        return []
    depth = min(n.count("/") for n in found)
    folder = min(posixpath.dirname(n) for n in found if n.count("/") == depth)
    return sorted(n for n in found if posixpath.dirname(n) == folder)


# Archive members an export never holds: a zip inside a zip, a tarball.
_ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar", ".gz", ".bz2", ".xz", ".7z", ".rar")


def open_export_members(path: str | PathLike[str]) -> Iterator[tuple[str, BinaryIO]]:
    """(member name, stream) of each conversation member of an export zip, one open at a time."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise FormatError(f"not a readable zip archive ({exc}); download the export again") from None
    with archive:
        names = [info.filename for info in archive.infolist()]
        members = export_member_names(names)
        nested = [n for n in names if n.lower().endswith(_ARCHIVE_SUFFIXES) and not n.startswith("__MACOSX/")]
        if not members and nested:
            # A zip inside a zip (an export zipped again): its conversations are one level down.
            raise FormatError(
                f"zip holds another archive ({', '.join(nested[:3])}{', …' if len(nested) > 3 else ''}) and no conversations.json; "
                "Nexus does not open archives inside archives: unpack it into the runs folder and sync again"
            )
        if not members:
            raise FormatError(
                "zip has no conversations.json (nor conversations-000.json shards); expected a ChatGPT or Claude data export"
            )
        for name in members:
            try:
                stream = archive.open(name)
            except (RuntimeError, NotImplementedError, zipfile.BadZipFile) as exc:
                raise FormatError(f"zip member {name} cannot be opened: {exc}") from None
            with stream:
                yield name, stream  # type: ignore[misc]


def open_export_zip(path: str | PathLike[str]) -> BinaryIO:
    """The `conversations.json` inside a ChatGPT/Claude `.zip` export, as a stream (not read whole).

    Exports put it at the top level, but a re-zipped download often nests it in a folder; the
    shallowest one wins. The caller closes the returned stream, which also releases the zip.
    """
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise FormatError(f"not a readable zip archive ({exc}); download the export again") from None
    with archive:
        candidates = [
            info
            for info in archive.infolist()
            if not info.is_dir()
            and posixpath.basename(info.filename).lower() == EXPORT_MEMBER
            and not info.filename.startswith("__MACOSX/")
        ]
        if not candidates:
            raise FormatError("zip has no conversations.json; expected a ChatGPT or Claude data export")
        chosen = min(candidates, key=lambda info: (info.filename.count("/"), info.filename))
        try:
            # The member stream keeps the archive's file open after `archive` closes here.
            return archive.open(chosen)  # type: ignore[return-value]
        except (RuntimeError, NotImplementedError, zipfile.BadZipFile) as exc:
            raise FormatError(f"zip member {chosen.filename} cannot be opened: {exc}") from None
