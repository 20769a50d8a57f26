"""Resource limits on untrusted input (invariant 12), checked on bytes before anything is built.

JSON parsers build one frame (json) or one path prefix (ijson) per nesting level, so hostile
nesting costs memory and time with the square of its depth before any shape check can run.
`DepthScanner` counts nesting on the raw bytes instead — minding strings and escapes — in time
linear in the input and constant memory, so deep input is refused before a parser sees it.
"""

from __future__ import annotations

import re
import secrets
from itertools import accumulate
from operator import sub
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator, Mapping

from nexus_assets.ingest.formats import FormatError


class LimitError(FormatError):
    """Input over a configured limit; the message names the limit and the variable that sets it."""


# The input limits and their defaults, by the variable that sets each (docs/configuration.md):
# written once, here. The core never reads the environment: an entry point reads the variables
# (nexus_assets/settings.py) and hands the values down as an `InputLimits`.
DEFAULTS: dict[str, int] = {
    "NEXUS_MAX_RUN_FILE_BYTES": 32 * 1024 * 1024,
    "NEXUS_MAX_JSON_DEPTH": 64,
    "NEXUS_MAX_NODE_CHARS": 32_000_000,
    "NEXUS_MAX_ZIP_INFLATED_BYTES": 2 * 1024**3,
    "NEXUS_MAX_ZIP_RATIO": 200,
    "NEXUS_MAX_CONVERSATIONS_PER_FILE": 200_000,
    "NEXUS_MAX_ERRORS_PER_FILE": 100,
    "NEXUS_MAX_JSONL_LINE_BYTES": 32 * 1024 * 1024,
    "NEXUS_MAX_SESSION_FILE_BYTES": 256 * 1024 * 1024,
    "NEXUS_MAX_SESSION_LINES": 1_000_000,
}

# InputLimits' field for each variable.
FIELDS: dict[str, str] = {
    "NEXUS_MAX_RUN_FILE_BYTES": "max_file_bytes",
    "NEXUS_MAX_JSON_DEPTH": "max_depth",
    "NEXUS_MAX_NODE_CHARS": "max_node_chars",
    "NEXUS_MAX_ZIP_INFLATED_BYTES": "max_inflated_bytes",
    "NEXUS_MAX_ZIP_RATIO": "max_zip_ratio",
    "NEXUS_MAX_CONVERSATIONS_PER_FILE": "max_conversations",
    "NEXUS_MAX_ERRORS_PER_FILE": "max_errors_per_file",
    "NEXUS_MAX_JSONL_LINE_BYTES": "max_line_bytes",
    "NEXUS_MAX_SESSION_FILE_BYTES": "max_session_bytes",
    "NEXUS_MAX_SESSION_LINES": "max_session_lines",
}


def whole_number(name: str, text: str | None) -> int:
    """A limit's setting as given: unset, empty, 0 or less is the default; ValueError naming the
    variable for anything that is not a whole number."""
    value = (text or "").strip()
    if not value:
        return DEFAULTS[name]
    try:
        parsed = int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a whole number") from None
    return parsed if parsed > 0 else DEFAULTS[name]


@dataclass(frozen=True)
class InputLimits:
    """Every input limit in effect, handed down by the entry point (the defaults when built bare)."""

    # One Nexus run file is loaded whole; exports are streamed conversation by conversation.
    max_file_bytes: int = DEFAULTS["NEXUS_MAX_RUN_FILE_BYTES"]
    max_depth: int = DEFAULTS["NEXUS_MAX_JSON_DEPTH"]
    max_inflated_bytes: int = DEFAULTS["NEXUS_MAX_ZIP_INFLATED_BYTES"]
    max_zip_ratio: int = DEFAULTS["NEXUS_MAX_ZIP_RATIO"]
    max_conversations: int = DEFAULTS["NEXUS_MAX_CONVERSATIONS_PER_FILE"]
    max_node_chars: int = DEFAULTS["NEXUS_MAX_NODE_CHARS"]
    max_errors_per_file: int = DEFAULTS["NEXUS_MAX_ERRORS_PER_FILE"]
    # JSON Lines sessions are read a line at a time: a line is the unit a limit refuses.
    max_line_bytes: int = DEFAULTS["NEXUS_MAX_JSONL_LINE_BYTES"]
    max_session_bytes: int = DEFAULTS["NEXUS_MAX_SESSION_FILE_BYTES"]
    max_session_lines: int = DEFAULTS["NEXUS_MAX_SESSION_LINES"]

    @classmethod
    def given(cls, texts: Mapping[str, str | None]) -> InputLimits:
        """The limits from their settings as text, by variable (what is not given: the default)."""
        return cls(**{FIELDS[name]: whole_number(name, texts.get(name)) for name in DEFAULTS})


# The node-character limit the extraction scope applies (ingest/scope.py), for the code under an
# entry point that handed it over with `node_limit(...)`: scoped to that block and that thread or
# task, never written for the process. (Ingestion takes its limits as an argument; the scope is
# built deep inside the phases, whose signatures are moving to services/ (issue 51).)
_NODE_LIMIT: ContextVar[str | None] = ContextVar("nexus_max_node_chars", default=None)


@contextmanager
def node_limit(text: str | None) -> Iterator[None]:
    """NEXUS_MAX_NODE_CHARS as given (text; checked where it is used), for the code in this block."""
    token = _NODE_LIMIT.set(text)
    try:
        yield
    finally:
        _NODE_LIMIT.reset(token)


def max_node_chars() -> int:
    """The longest text node an extractor is shown (see `node_limit`)."""
    return whole_number("NEXUS_MAX_NODE_CHARS", _NODE_LIMIT.get())


def depth_message(limit: int) -> str:
    return f"JSON nesting is deeper than {limit} levels (NEXUS_MAX_JSON_DEPTH); flatten the file or raise the limit"


def conversation_depth_message(limit: int) -> str:
    return f"JSON nesting is deeper than {limit} levels (NEXUS_MAX_JSON_DEPTH); this conversation was skipped, the rest of the export was read"


# How far into a file detection looks for the end of its first line.
DETECT_BYTES = 8 * 1024 * 1024


# Escapes go first (so `\"` never ends a string), then whole strings; what is left between
# strings is structure, of which only brackets count.
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# '[' and '{' -> 2, ']' and '}' -> 0: the running sum minus the position is the depth.
_WEIGHTS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
# The change in depth per byte, as int8, for `GuardedStream._cut`.
_STEPS = bytes(1 if b in b"[{" else 255 if b in b"]}" else 0 for b in range(256))


class DepthScanner:
    """Feed it the bytes of one JSON text in order; `feed` raises LimitError past `limit` levels.

    The work per chunk is a few C-level passes (regex, translate, accumulate), so the scan is
    linear in the input and holds no more than one chunk.
    """

    def __init__(self, limit: int, *, named: int | None = None):
        self.limit = limit
        # The limit as the user set it (an export's array adds one level of its own).
        self.named = limit if named is None else named
        self.depth = 0
        self.deepest = 0
        self._in_string = False
        self._carry = b""

    def _weights(self, data: bytes) -> bytes:
        """The structural brackets of `data` as weights (see _WEIGHTS); string state is kept."""
        data = self._carry + data
        # A chunk ending in a backslash run of odd length splits an escape: keep it for later.
        tail = len(data) - len(data.rstrip(b"\\"))
        if tail % 2:
            self._carry, data = data[-1:], data[:-1]
        else:
            self._carry = b""
        data = _ESCAPE.sub(b"", data)
        if self._in_string:
            close = data.find(b'"')
            if close < 0:
                return b""
            data = data[close + 1 :]
            self._in_string = False
        data = _STRING.sub(b"", data)
        quote = data.find(b'"')
        if quote >= 0:  # an unterminated string runs on into the next chunk
            data = data[:quote]
            self._in_string = True
        return data.translate(None, _NOT_BRACKETS).translate(_WEIGHTS)

    def feed(self, data: bytes) -> None:
        weights = self._weights(data)
        if not weights:
            return
        peak = max(map(sub, accumulate(weights), range(1, len(weights) + 1)))
        self.deepest = max(self.deepest, self.depth + peak)
        self.depth += sum(weights) - len(weights)
        if self.deepest > self.limit:
            raise LimitError(depth_message(self.named))

    def lowest(self, data: bytes) -> int:
        """Feed `data` with no limit; the lowest depth it reaches (where a skipped value ends)."""
        weights = self._weights(data)
        if not weights:
            return self.depth
        trough = min(map(sub, accumulate(weights), range(1, len(weights) + 1)))
        low = self.depth + trough
        self.depth += sum(weights) - len(weights)
        return low

    def _state(self) -> tuple:
        return (self.depth, self.deepest, self._in_string, self._carry)

    def _restore(self, state: tuple) -> None:
        self.depth, self.deepest, self._in_string, self._carry = state


def check_depth(data: bytes, limit: int, *, chunk: int = 1 << 20) -> None:
    """LimitError when the JSON text `data` nests deeper than `limit`."""
    scanner = DepthScanner(limit)
    for start in range(0, len(data), chunk):
        scanner.feed(data[start : start + chunk])


class GuardedStream:
    """A byte stream that checks nesting depth and total size as a parser reads it.

    The parser only ever sees bytes that passed the scan, so it never builds deep state: each
    value that would open a level past the limit reaches it as one JSON string, `sentinel`, and
    its bytes up to the matching close are skipped unparsed. The sentinel is random per stream,
    so no input can forge it; `too_deep` tells which parsed item held one.
    `max_bytes` bounds what an inflating (zip) stream may produce.
    """

    def __init__(
        self, stream: BinaryIO, *, depth_limit: int, named: int | None = None, max_bytes: int | None = None, size_message: str = ""
    ):
        self._stream = stream
        self._scanner = DepthScanner(depth_limit, named=named)
        self._max_bytes = max_bytes
        self._size_message = size_message
        self.sentinel = f"nexus-too-deep-{secrets.token_hex(16)}"
        self._sentinel_json = f'"{self.sentinel}"'.encode()
        self._skipping = False  # inside a too-deep value, which ends where the depth is back at the limit
        self._held = b""  # a trailing backslash, scanned and passed on with the next chunk
        self.replaced = 0
        self._claimed = 0
        self.unclosed = False  # the input ended inside a skipped value
        self.bytes_read = 0

    def read(self, size: int = -1) -> bytes:
        if size == 0:
            return b""
        if size is None or size < 0:
            size = 1 << 20
        while True:  # an empty answer means the end, so a chunk that was all skipped is not one
            data = self._stream.read(size)
            self.bytes_read += len(data)
            if self._max_bytes is not None and self.bytes_read > self._max_bytes:
                raise LimitError(self._size_message)
            if not data:
                held, self._held = self._held, b""
                if self._skipping:
                    self.unclosed = True
                    return b""
                return held
            data = self._held + data
            # Split escapes wait for the next chunk here (not in the scanner), so that every byte
            # scanned is a byte handed on or skipped, at the same position.
            tail = len(data) - len(data.rstrip(b"\\"))
            self._held, data = (data[-1:], data[:-1]) if tail % 2 else (b"", data)
            passed = self._pass(data)
            if passed:
                return passed

    def _pass(self, data: bytes) -> bytes:
        scanner = self._scanner
        state = scanner._state()
        if not self._skipping:
            try:
                scanner.feed(data)
                return data
            except LimitError:
                pass
        elif scanner.lowest(data) > scanner.limit:
            return b""  # still inside the deep value
        scanner._restore(state)
        return self._cut(data)

    def _cut(self, data: bytes) -> bytes:
        """`data` with each too-deep value in it (or its part here) replaced by the sentinel.

        Positions matter here, so this works on every byte (vectorised); only a chunk where a deep
        value starts or ends comes here, and only then is numpy loaded.
        """
        import numpy as np

        scanner, limit = self._scanner, self._scanner.limit
        codes = np.frombuffer(_ESCAPE.sub(b"..", data), dtype=np.uint8)  # escapes out of the way, positions kept
        # In a string after an odd number of quotes (a bracket's state is the same before and after it).
        inside = (np.cumsum(codes == ord('"'), dtype=np.int64) + scanner._in_string) & 1
        steps = np.where(inside == 1, 0, np.frombuffer(_STEPS, dtype=np.int8)[codes])
        depth = scanner.depth + np.cumsum(steps, dtype=np.int64)  # after each byte
        # Every bracket that reaches limit + 1 opens a too-deep value; every one back to limit ends one.
        opens = np.flatnonzero((steps == 1) & (depth == limit + 1))
        closes = np.flatnonzero((steps == -1) & (depth == limit))
        parts, pos = [], 0
        while True:
            if self._skipping:
                at = int(np.searchsorted(closes, pos))
                if at == len(closes):
                    break
                pos, self._skipping = int(closes[at]) + 1, False
            else:
                at = int(np.searchsorted(opens, pos))
                if at == len(opens):
                    parts.append(data[pos:])
                    break
                start = int(opens[at])
                parts += [data[pos:start], self._sentinel_json]
                self.replaced += 1
                pos, self._skipping = start + 1, True
        if len(codes):
            scanner.depth, scanner._in_string = int(depth[-1]), bool(inside[-1])
        return b"".join(parts)

    def too_deep(self, item: Any) -> bool:
        """Whether a parsed item holds a value cut out here. Looks only while a cut is unclaimed,
        so items cost nothing in the common case (the parser reads ahead, so a cut may belong to
        an item that comes later)."""
        if self._claimed == self.replaced:
            return False
        found = _count(item, self.sentinel)
        self._claimed += found
        return found > 0


def _count(value: Any, text: str) -> int:
    """How many times the string `text` is a value in `value` (no recursion: depth is bounded but not small)."""
    found, todo = 0, [value]
    while todo:
        value = todo.pop()
        if isinstance(value, dict):
            todo.extend(value.values())
        elif isinstance(value, list):
            todo.extend(value)
        elif value == text:
            found += 1
    return found


def node_too_long(length: int, limit: int) -> str:
    return (
        f"is {length} characters, over NEXUS_MAX_NODE_CHARS={limit}; it is stored but not extracted; "
        "split the message or raise the limit"
    )
