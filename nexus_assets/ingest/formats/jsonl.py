"""Coding-agent sessions in JSON Lines (Claude Code, Codex CLI): the lines of one file as one run document.

A session file is read a line at a time; each line is checked on its bytes (length, nesting)
before it is parsed, so a bad line costs that line only (invariant 11) and nothing larger than
one line is ever held besides the lines kept (invariant 12).

The run document is `{"lines": [...], "session_format", "session_id", "title", "project",
"git_branch", "started_at"}`. Line n of the file is `lines[n - 1]`; a line that could not be read
(or a blank one) is `null` there, so every later line keeps its index and a node keeps its
address (`$['lines'][12]['message']['content'][0]['text']`) however the file grows. `lines` comes
first so that document order (canonical order, §4) is file order whatever the header holds.
The header is derived from the lines by the tool's reader; it only names the run.

A session that is still being written ends in a line without its newline: when that line does
not parse it is the part written so far, left for the next sync, and not an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable

from nexus_assets.ingest.formats import FormatError
from nexus_assets.ingest.formats import limits as L

@dataclass(frozen=True)
class LineProblem:
    line: int  # 1-based, as an editor shows it
    problem: str


def looks_like_json_lines(head: bytes, is_session_event: Callable[[Any], bool]) -> bool:
    """Whether a file starting with `head` is JSON Lines: its first non-blank line is a whole JSON
    object on its own and more follows, or it is the one line of a session. A pretty-printed
    JSON document never parses from its first line alone, and a one-line Nexus run is no event."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] != b"{":
        return False
    end = text.find(b"\n")
    first, rest = (text, b"") if end < 0 else (text[:end], text[end + 1 :])
    try:
        value = json.loads(first)
    except (ValueError, RecursionError):
        return False
    if not isinstance(value, dict):
        return False
    return bool(rest.strip()) or is_session_event(value)


# Problems kept per file (the ingestion step records fewer still); the rest are only counted.
MAX_PROBLEMS = 1000


def read_lines(
    stream: BinaryIO, *, max_line_bytes: int, max_depth: int, max_bytes: int, max_lines: int
) -> tuple[list[Any], list[LineProblem]]:
    """Every line of `stream` parsed (None where it could not be), and the problems, by line.

    `max_lines` bounds what many tiny lines cost: a million `{}` lines are three megabytes of
    input but a million objects."""
    lines: list[Any] = []
    problems: list[LineProblem] = []
    dropped = 0
    total = 0
    number = 0
    while True:
        raw = stream.readline(max_line_bytes + 1)
        if not raw:
            break
        number += 1
        if number > max_lines:
            raise L.LimitError(
                f"session file has more than {max_lines} lines (NEXUS_MAX_SESSION_LINES); none of it was stored; "
                "split it or raise the limit"
            )
        total += len(raw)
        if total > max_bytes:
            raise L.LimitError(
                f"session file is over the {max_bytes}-byte limit (NEXUS_MAX_SESSION_FILE_BYTES); the lines before "
                f"line {number} were not stored either; split it or raise the limit"
            )
        if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            # Skipped unparsed: only `max_line_bytes` of it is ever held.
            while raw and not raw.endswith(b"\n"):
                raw = stream.readline(1 << 20)
                total += len(raw)
            lines.append(None)
            problem = f"is over the {max_line_bytes}-byte line limit (NEXUS_MAX_JSONL_LINE_BYTES); skipped"
            dropped += _keep(problems, LineProblem(number, problem))
            continue
        complete = raw.endswith(b"\n")
        if not raw.strip():
            lines.append(None)
            continue
        value, problem = _parse_line(raw, max_depth)
        if problem is not None and not complete:
            break  # the line being written: read at the next sync, once it is whole
        lines.append(value)
        if problem is not None:
            dropped += _keep(problems, LineProblem(number, problem))
    # Blank lines at the end are the file's ending, not lines.
    bad = {p.line for p in problems}
    while lines and lines[-1] is None and len(lines) not in bad:
        lines.pop()
    if dropped:
        problems.append(LineProblem(number, f"and {dropped} more bad lines after line {problems[-1].line} were skipped without being named"))
    return lines, problems


def _keep(problems: list[LineProblem], problem: LineProblem) -> int:
    if len(problems) < MAX_PROBLEMS:
        problems.append(problem)
        return 0
    return 1


def _parse_line(raw: bytes, max_depth: int) -> tuple[Any, str | None]:
    # Fewer brackets than the limit cannot nest past it: most lines skip the byte scan.
    if raw.count(b"[") + raw.count(b"{") > max_depth:
        try:
            L.check_depth(raw, max_depth)
        except L.LimitError:
            return None, f"{L.depth_message(max_depth)}; skipped"
    try:
        value = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except UnicodeDecodeError as exc:
        return None, f"is not valid UTF-8 at byte {exc.start} of the line; skipped"
    except json.JSONDecodeError as exc:
        return None, f"is not valid JSON ({exc.msg} at column {exc.colno}); skipped"
    except _Unkeepable as exc:
        return None, f"holds {exc}, which no reader can keep exactly; skipped"
    except RecursionError:
        return None, f"{L.depth_message(max_depth)}; skipped"
    if not isinstance(value, dict):
        return None, f"is a JSON {type(value).__name__}, not an event object; skipped"
    if (b"\\ud" in raw or b"\\uD" in raw) and _SURROGATE_ESCAPE.search(raw):
        # json.loads keeps a lone surrogate; it cannot be stored or hashed as UTF-8.
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return None, "holds an unpaired UTF-16 surrogate escape, which no reader can keep exactly; skipped"
    return value, None


class _Unkeepable(ValueError):
    pass


# A surrogate escape (a valid pair is checked by encoding the parsed value).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _refuse_constant(name: str) -> Any:
    raise _Unkeepable(f"the constant {name} (not JSON)")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Unkeepable(f"the number {text[:40]}, beyond the range of a 64-bit float")
    return value


def session_document(lines: list[Any], session_format: str, header: dict[str, Any]) -> dict[str, Any]:
    """The run document of a session: its lines first, then the header its reader derived."""
    from nexus_assets.ingest.formats.registry import names

    if session_format not in names("session"):
        raise FormatError(f"unknown session format {session_format!r}")
    return {"lines": lines, "session_format": session_format, **header}


