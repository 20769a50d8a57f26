"""The source formats Nexus reads: the one list, with how each is recognised and read.

A format lives in one of three containers, which the run-file reader (`ingest/runfiles.py`)
tells apart by their first bytes, never by the file's name:

- `document`: one JSON object is one run (a Nexus run file);
- `export`: a JSON array (or a `.zip` holding `conversations.json`) of conversations, streamed one
  at a time (`exports.py`);
- `session`: JSON Lines, one event a line, one file one run (`jsonl.py`, `sessions.py`).

Within its container a format is recognised by content: `detects` on a document (for a session,
the document its lines were built into), and for a session format `is_event` on one line. The
formats are tried in the order listed here (the first that detects wins), so that order is part
of what a file reads as; the session formats come first, and the first line either session tool
would write decides between them.

To add a format: write its reader module beside the others and add one `register(...)` below
(docs/extending.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

from nexus_assets.core.models import Run
from nexus_assets.ingest.formats.chatgpt import chatgpt_run
from nexus_assets.ingest.formats.claude import claude_run
from nexus_assets.ingest.formats.claude_code import claude_code_header, claude_code_run, is_claude_code_event
from nexus_assets.ingest.formats.codex import codex_header, codex_run, is_codex_event
from nexus_assets.ingest.formats.nexus import nexus_run

Container = Literal["document", "export", "session"]
# A reader: the document (or one export conversation), the export's OPEN cut-off, the item's index.
Reader = Callable[[Any, "str | None", "int | None"], Run]


@dataclass(frozen=True)
class SourceFormat:
    name: str  # the `format` of its runs, as stored and shown
    container: Container
    detects: Callable[[dict], bool]  # on a JSON object: is it a run (or conversation) of this format
    read: Reader
    # Session formats only: whether one JSON Lines line is this tool's event, the run's header
    # (id, title, project, ...) from its lines, and what the tool's files look like (for the error
    # that names a JSON Lines file no session tool wrote).
    is_event: Callable[[Any], bool] | None = None
    header: Callable[[list[Any]], dict[str, Any]] | None = None
    looks: str = ""


FORMATS: dict[str, SourceFormat] = {}


def register(source_format: SourceFormat) -> SourceFormat:
    if source_format.name in FORMATS:
        raise ValueError(f"source format {source_format.name!r} is registered twice")
    if source_format.container == "session" and (source_format.is_event is None or source_format.header is None):
        raise ValueError(f"session format {source_format.name!r} needs is_event and header")
    FORMATS[source_format.name] = source_format
    return source_format


def _session(name: str) -> Callable[[dict], bool]:
    # A session's document is built from its lines by `jsonl.session_document`, which names the tool.
    return lambda d: isinstance(d.get("lines"), list) and d.get("session_format") == name


def detect_format(value: Any) -> str | None:
    """The name of the format a run document or one export conversation is in, else None."""
    if isinstance(value, dict):
        for f in FORMATS.values():
            if f.detects(value):
                return f.name
    return None


def names(container: Container | None = None) -> tuple[str, ...]:
    """The registered formats' names (of one container), in detection order."""
    return tuple(f.name for f in FORMATS.values() if container is None or f.container == container)


def session_formats() -> tuple[SourceFormat, ...]:
    return tuple(f for f in FORMATS.values() if f.container == "session")


def one_file_formats() -> tuple[str, ...]:
    """Formats whose run lives in exactly one file (a Nexus run file, a session file): a second
    file claiming the run is a copy or a clash, never a newer version (an export's is)."""
    return tuple(f.name for f in FORMATS.values() if f.container != "export")


register(SourceFormat("codex", "session", _session("codex"), lambda d, _after, _index: codex_run(d),
                      is_event=is_codex_event, header=codex_header,
                      looks="a Codex CLI rollout (lines with type session_meta/response_item and a payload)"))
register(SourceFormat("claude-code", "session", _session("claude-code"), lambda d, _after, _index: claude_code_run(d),
                      is_event=is_claude_code_event, header=claude_code_header,
                      looks="a Claude Code session (lines with sessionId, type user/assistant)"))
register(SourceFormat("nexus", "document", lambda d: "messages" in d and "run_id" in d, lambda d, _after, _index: nexus_run(d)))
register(SourceFormat("chatgpt", "export", lambda d: "mapping" in d,
                      lambda d, after, index: chatgpt_run(d, open_after=after, index=index)))
register(SourceFormat("claude", "export", lambda d: "chat_messages" in d,
                      lambda d, after, index: claude_run(d, open_after=after, index=index)))
