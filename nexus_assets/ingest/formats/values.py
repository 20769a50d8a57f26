"""Values no reader can keep exactly, cut out of an export's bytes before the parser sees them.

JSON allows numbers of any size and any `\\uXXXX` escape. The streaming parser (yajl) stops at a
number past 64 bits (`1e999999`, `9223372036854775808`) and so lost every conversation after it;
a lone UTF-16 surrogate (`\\ud800`) it turns into '?' or into another character, which would be a
paraphrase (invariant 1). `ValueGuard` sits between the file and the parser and hands on each
such value as a marker: a number becomes the JSON string `"<marker>"`, a lone surrogate escape the
marker text inside its string. The item that holds a marker is then that conversation's problem
(invariant 11); everything else passes unchanged. Checking costs a regex search per chunk; only a
chunk with a candidate is looked at closely.
"""

from __future__ import annotations

import re
import secrets
from typing import Any, BinaryIO

from nexus_assets.core.paths import Steps, format_path

# A chunk without any of these holds no bad value: a surrogate escape, or a number after `:`, `[`
# or `,` (or at the chunk's start) with a 3-digit exponent or 19 digits. Text in strings can match;
# that is decided in `_rewrite`. Hex ids ("…-3e456…") do not, so most chunks stay on the fast path.
_SUSPECT = re.compile(rb"\\u[dD][89a-fA-F]|(?:^|[:\[,])\s*-?[0-9]*\.?[0-9]*(?:[eE][+-]?[0-9]{3}|[0-9]{19})")
# Escapes other than \u, masked so that every \u left is a real escape (never the tail of `\\`).
_OTHER_ESCAPE = re.compile(rb"\\[^u]", re.DOTALL)
# A surrogate escape, with its low half when a high one has it (a valid pair).
_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_HIGH = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")
_NUMBER = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_CHARS = b"0123456789.eE+-"
# Held back at the end of a chunk: the longest escape pair, so a split pair is seen whole.
_TAIL = 12
# A number token longer than this is refused unread (a run of digits in a string is passed on).
MAX_NUMBER_CHARS = 4096
_INT64 = (-(2**63), 2**63 - 1)


def number_problem(token: bytes) -> str | None:
    """Why the JSON number `token` cannot be read exactly, or None when it can."""
    text = token.decode("ascii")
    shown = text if len(text) <= 40 else f"{text[:20]}…{text[-8:]} ({len(text)} characters)"
    if len(text) > MAX_NUMBER_CHARS:
        return f"the number {shown}, too long to read"
    if not any(c in text for c in ".eE"):
        return None if _INT64[0] <= int(text) <= _INT64[1] else f"the integer {shown}, which does not fit in 64 bits"
    return f"the number {shown}, beyond the range of a 64-bit float" if float(text) in (float("inf"), float("-inf")) else None


class ValueGuard:
    """A byte stream over `stream` in which each bad value is replaced by a unique marker.

    `problems` maps each marker to what was wrong; `bad_value(item)` names the first one a parsed
    item holds (and its path), so one conversation is refused and the rest are read.
    """

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self.prefix = f"nexus-bad-value-{secrets.token_hex(12)}-"
        self.problems: dict[str, str] = {}
        self._claimed = 0
        self._held = b""
        self._in_string = False  # at the start of `_held`
        self._skipping_number = False  # inside an over-long number, cut at its start
        self._done = False

    def read(self, size: int = -1) -> bytes:
        while not self._done:
            data = self._stream.read(size if size and size > 0 else 1 << 20)
            if not data:
                self._done = True
                out, self._held = self._pass(self._held, final=True), b""
                return out
            if self._skipping_number:
                rest = data.lstrip(_NUMBER_CHARS)
                if not rest:
                    continue
                self._skipping_number, data = False, rest
            out = self._pass(self._held + data, final=False)
            if out:
                return out
        return b""

    def _pass(self, buf: bytes, *, final: bool) -> bytes:
        """What of `buf` can be handed on now (checked and rewritten); the rest waits in `_held`."""
        cut = len(buf) if final else self._cut_point(buf)
        if not final and cut == 0 and len(buf) > MAX_NUMBER_CHARS + _TAIL:
            return self._long_run(buf)
        head, self._held = buf[:cut], buf[cut:]
        if not head:
            return b""
        if _SUSPECT.search(head) is None:
            self._in_string = _ends_in_string(head, self._in_string)
            return head
        return self._rewrite(head, self._held)

    def _cut_point(self, buf: bytes) -> int:
        # Never inside a number, an escape, or an escape pair that might still be completed.
        cut = max(0, len(buf) - _TAIL)
        while cut > 0 and buf[cut - 1] in _NUMBER_CHARS:
            cut -= 1
        slash = buf.rfind(b"\\", max(0, cut - 6), cut)
        if slash >= 0:
            cut = slash
            if _HIGH.fullmatch(buf, max(0, cut - 6), cut):  # a pair's two halves stay together
                cut -= 6
            while cut > 0 and buf[cut - 1] == 0x5C:  # a run of backslashes starts an escape as a whole
                cut -= 1
        return cut

    def _long_run(self, buf: bytes) -> bytes:
        """`buf` starts with more number characters than any number may have: text in a string is
        passed on; a number outside one is refused here and the rest of it skipped as it comes."""
        run = len(buf) - len(buf.lstrip(_NUMBER_CHARS))
        if self._in_string:
            self._held = buf[run:]
            return buf[:run]
        marker = self._mark(f"the number {buf[:20].decode('ascii')}… (over {MAX_NUMBER_CHARS} characters), too long to read")
        self._held = buf[run:]
        self._skipping_number = not self._held
        return b'"' + marker.encode() + b'"'

    def _rewrite(self, head: bytes, after: bytes) -> bytes:
        """`head` with each bad value replaced; `after` is read only to see a pair's low half."""
        import numpy as np  # only for a chunk that has a candidate

        buf = head + after[:_TAIL]
        masked = _OTHER_ESCAPE.sub(b"..", buf)
        codes = np.frombuffer(masked, dtype=np.uint8)
        quotes = codes == ord('"')
        # In a string after each byte (an opening quote counts as inside, a closing one as outside).
        inside = ((np.cumsum(quotes, dtype=np.int64) + self._in_string) & 1).astype(bool)
        edits: list[tuple[int, int, bytes]] = []
        for m in _SURROGATE.finditer(masked):
            if m.start() >= len(head):
                break
            if m.end() - m.start() == 6 and inside[m.start()]:
                marker = self._mark(f"an unpaired UTF-16 surrogate escape ('{m.group().decode().lower()}'), which is no character")
                edits.append((m.start(), m.end(), marker.encode()))
        structure = np.where(inside | quotes, ord(" "), codes).astype(np.uint8).tobytes()
        for m in _NUMBER.finditer(structure, 0, len(head)):
            token = m.group()
            if len(token) < 4 or (len(token) < 19 and not re.search(rb"[eE][+-]?[0-9]{3}", token)):
                continue
            problem = number_problem(token)
            if problem:
                edits.append((m.start(), m.end(), b'"' + self._mark(problem).encode() + b'"'))
        self._in_string = bool(inside[len(head) - 1])
        if not edits:
            return head
        parts, pos = [], 0
        for start, end, replacement in sorted(edits):
            parts += [head[pos:start], replacement]
            pos = end
        parts.append(head[pos:])
        return b"".join(parts)

    def _mark(self, problem: str) -> str:
        marker = f"{self.prefix}{len(self.problems)}"
        self.problems[marker] = problem
        return marker

    def bad_value(self, item: Any) -> str | None:
        """What is wrong with the first bad value `item` holds, and where, or None. Looks only while
        a marker is unclaimed, so items cost nothing in the common case."""
        if self._claimed == len(self.problems):
            return None
        found = _find_markers(item, self.prefix)
        if not found:
            return None
        self._claimed += len(found)
        steps, marker = found[0]
        return f"{format_path(steps)} holds {self.problems[marker]}"


def bad_value_message(problem: str | None) -> str | None:
    """The ingestion error for a conversation that holds a bad value (see `ValueGuard.bad_value`)."""
    if problem is None:
        return None
    return f"{problem}; this conversation was skipped, the rest of the export was read; fix that value in the export and sync again"


def _ends_in_string(data: bytes, in_string: bool) -> bool:
    return in_string ^ bool(_OTHER_ESCAPE.sub(b"", data).count(b'"') & 1)


def _find_markers(value: Any, prefix: str) -> list[tuple[Steps, str]]:
    """(path, marker) of every marker in `value`'s keys and strings, in document order."""
    found: list[tuple[Steps, str]] = []
    todo: list[tuple[Steps, Any]] = [((), value)]
    while todo:
        steps, value = todo.pop()
        if isinstance(value, str):
            at = value.find(prefix)
            if at >= 0:
                end = at + len(prefix)
                while end < len(value) and value[end].isdigit():
                    end += 1
                found.append((steps, value[at:end]))
        elif isinstance(value, dict):
            for k, v in reversed(list(value.items())):
                todo.append((steps + (k,), v))
                if prefix in k:
                    todo.append((steps, k))
        elif isinstance(value, list):
            todo.extend((steps + (i,), v) for i, v in reversed(list(enumerate(value))))
    return found
