"""Resource limits on untrusted input (invariant 12), checked on bytes before anything is built.

JSON parsers build one frame (json) or one path prefix (ijson) per nesting level, so hostile
nesting costs memory and time with the square of its depth before any shape check can run.
`DepthScanner` counts nesting on the raw bytes instead — minding strings and escapes — in time
linear in the input and constant memory, so deep input is refused before a parser sees it.
"""

from __future__ import annotations

import os
import re
from itertools import accumulate
from operator import sub
from typing import BinaryIO

from nexus_assets.core.formats import FormatError


class LimitError(FormatError):
    """Input over a configured limit; the message names the limit and the variable that sets it."""


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        parsed = int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a whole number") from None
    return parsed if parsed > 0 else default


def max_depth() -> int:
    return env_int("NEXUS_MAX_JSON_DEPTH", 64)


def max_node_chars() -> int:
    return env_int("NEXUS_MAX_NODE_CHARS", 32_000_000)


def max_inflated_bytes() -> int:
    return env_int("NEXUS_MAX_ZIP_INFLATED_BYTES", 2 * 1024**3)


def max_compression_ratio() -> int:
    return env_int("NEXUS_MAX_ZIP_RATIO", 200)


def max_conversations() -> int:
    return env_int("NEXUS_MAX_CONVERSATIONS_PER_FILE", 200_000)


def max_errors_per_file() -> int:
    return env_int("NEXUS_MAX_ERRORS_PER_FILE", 100)


def depth_message(limit: int) -> str:
    return f"JSON nesting is deeper than {limit} levels (NEXUS_MAX_JSON_DEPTH); flatten the file or raise the limit"


# Escapes go first (so `\"` never ends a string), then whole strings; what is left between
# strings is structure, of which only brackets count.
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# '[' and '{' -> 2, ']' and '}' -> 0: the running sum minus the position is the depth.
_WEIGHTS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


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

    def feed(self, data: bytes) -> None:
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
                return
            data = data[close + 1 :]
            self._in_string = False
        data = _STRING.sub(b"", data)
        quote = data.find(b'"')
        if quote >= 0:  # an unterminated string runs on into the next chunk
            data = data[:quote]
            self._in_string = True
        brackets = data.translate(None, _NOT_BRACKETS)
        if not brackets:
            return
        weights = brackets.translate(_WEIGHTS)
        peak = max(map(sub, accumulate(weights), range(1, len(weights) + 1)))
        self.deepest = max(self.deepest, self.depth + peak)
        self.depth += sum(weights) - len(weights)
        if self.deepest > self.limit:
            raise LimitError(depth_message(self.named))


    def _state(self) -> tuple:
        return (self.depth, self.deepest, self._in_string, self._carry)

    def _restore(self, state: tuple) -> None:
        self.depth, self.deepest, self._in_string, self._carry = state

    def safe_prefix(self, data: bytes) -> int:
        """How many bytes of `data` can be fed before the limit is passed (state is kept there).

        Lets a streaming reader finish the conversations before the deep one; only called once,
        on the failing chunk, so the byte-by-byte part costs nothing in the common case.
        """
        done = 0
        for size in (4096, 1):
            while done < len(data):
                state = self._state()
                try:
                    self.feed(data[done : done + size])
                except LimitError:
                    self._restore(state)
                    break
                done += size
        return min(done, len(data))


def check_depth(data: bytes, limit: int, *, chunk: int = 1 << 20) -> None:
    """LimitError when the JSON text `data` nests deeper than `limit`."""
    scanner = DepthScanner(limit)
    for start in range(0, len(data), chunk):
        scanner.feed(data[start : start + chunk])


class GuardedStream:
    """A byte stream that checks nesting depth and total size as a parser reads it.

    The parser only ever sees bytes that passed the scan, so it never builds deep state.
    `max_bytes` bounds what an inflating (zip) stream may produce.
    """

    def __init__(
        self, stream: BinaryIO, *, depth_limit: int, named: int | None = None, max_bytes: int | None = None, size_message: str = ""
    ):
        self._stream = stream
        self._scanner = DepthScanner(depth_limit, named=named)
        self._max_bytes = max_bytes
        self._size_message = size_message
        self._refusal: LimitError | None = None
        self.bytes_read = 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = 1 << 20
        if self._refusal is not None:
            raise self._refusal
        data = self._stream.read(size)
        self.bytes_read += len(data)
        if self._max_bytes is not None and self.bytes_read > self._max_bytes:
            raise LimitError(self._size_message)
        state = self._scanner._state()
        try:
            self._scanner.feed(data)
        except LimitError as exc:
            # Hand over what comes before the deep part, so the conversations there still import.
            self._scanner._restore(state)
            cut = self._scanner.safe_prefix(data)
            self._refusal = exc
            if cut == 0:
                raise
            return data[:cut]
        return data


def node_too_long(length: int, limit: int) -> str:
    return (
        f"is {length} characters, over NEXUS_MAX_NODE_CHARS={limit}; it is stored but not extracted; "
        "split the message or raise the limit"
    )
