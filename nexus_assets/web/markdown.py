"""A brick's or a passage's inline Markdown, drawn safely (docs/viewer.md "Markdown").

Conversations are full of Markdown (`**Green Curry**`, `` `nexus sync` ``); a page that shows the
asterisks is hard to read. This draws a strict few inline constructs and nothing else, after the
rules of CommonMark's inline syntax (emphasis by its left- and right-flanking delimiter runs):

- `*em*` and `_em_` → <em>, `**strong**` and `__strong__` → <strong> (nested as CommonMark nests
  them; `snake_case_name` is no emphasis);
- `` `code` `` → <code>, its content literal;
- `[text](url)` → the text alone, in a <span class="md-link">: never an `href`, so no link on a
  page can be followed, whatever scheme it names; `![alt](url)` → its alt text (no image is loaded);
- a backslash before ASCII punctuation shows that character literally.

Every character the page shows is escaped (`markupsafe.escape`) and the only markup is the tags
above, which carry no attributes but a fixed class: `<script>`, `<img onerror>` or an entity such as
`&lt;` in the text are shown as typed, never obeyed or decoded. Headings, lists, tables and HTML are
not drawn (a brick is a sentence). The markers a construct uses are hidden; what was stored, byte
for byte, is one click away (the source panel's "Stored text", the passage page's "Exact text").

Pure and linear in the text (CommonMark's `openers_bottom`); a text longer than
`MAX_MARKDOWN_CHARS` is shown escaped as typed.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from dataclasses import dataclass

from markupsafe import Markup, escape

MAX_MARKDOWN_CHARS = 200_000
_BACKTICKS = re.compile(r"`+")
_ASCII_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
# `(url)` or `(url "title")` right after a link's `]`: a destination without spaces (or in <…>),
# parentheses in it balanced one deep, as CommonMark allows.
_DESTINATION = re.compile(
    r"""\(\s*(?:<[^<>\n]*>|(?:[^\s()\\]|\\.|\((?:[^\s()\\]|\\.)*\))*)"""
    r"""(?:\s+(?:"[^"\n]*"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"""
)


@dataclass(frozen=True)
class _Element:
    """An inline element over `text[start:end]`: its markers `[start:inner_start]` and
    `[inner_end:end]` are hidden, its content `[inner_start:inner_end]` drawn inside `tag`."""

    start: int
    inner_start: int
    inner_end: int
    end: int
    tag: str
    css: str | None = None


@dataclass
class _Run:
    """A run of `*` or `_` that may open or close emphasis; `start`/`end` shrink as it is used."""

    char: str
    start: int
    end: int
    can_open: bool
    can_close: bool
    length: int  # the original length (CommonMark's rule of three)


def _kind(ch: str) -> str:
    if ch == "" or ch.isspace():
        return "space"
    if ch in _ASCII_PUNCTUATION or unicodedata.category(ch)[0] in "PS":
        return "punct"
    return "other"


def _run(text: str, start: int, end: int) -> _Run:
    char = text[start]
    before = _kind(text[start - 1] if start > 0 else "")
    after = _kind(text[end] if end < len(text) else "")
    left = after != "space" and (after != "punct" or before != "other")
    right = before != "space" and (before != "punct" or after != "other")
    if char == "*":
        return _Run(char, start, end, left, right, end - start)
    # `_` inside a word (snake_case) neither opens nor closes.
    return _Run(char, start, end, left and (not right or before == "punct"), right and (not left or after == "punct"), end - start)


def _parse(text: str) -> tuple[list[_Element], list[tuple[int, int]]]:
    """The elements of `text` and the escaping backslashes it hides, in three passes: code spans
    and escapes (left to right, as CommonMark reads them first), links, then emphasis within each
    link's text and within the rest on its own."""
    elements: list[_Element] = []
    hidden: list[tuple[int, int]] = []
    literal = bytearray(len(text))  # no Markdown here: code, escaped characters, link destinations
    in_code = bytearray(len(text))
    _code_and_escapes(text, elements, hidden, literal, in_code)
    links = _links(text, literal, in_code)
    elements += links
    for runs in _runs_by_stretch(text, literal, links):
        _emphasis(runs, elements)
    return elements, hidden


def _code_and_escapes(text: str, elements: list[_Element], hidden: list, literal: bytearray, in_code: bytearray) -> None:
    n, i = len(text), 0
    ends = _backtick_runs(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] in _ASCII_PUNCTUATION:
            hidden.append((i, i + 1))
            literal[i : i + 2] = b"\x01\x01"
            i += 2
            continue
        if ch != "`":
            i += 1
            continue
        j = i
        while j < n and text[j] == "`":
            j += 1
        size = j - i
        close = _closing_run(ends, j, size)
        if close < 0:
            literal[i:j] = b"\x01" * size  # backticks without a closing run are text
            i = j
            continue
        inner_start, inner_end, end = j, close, close + size
        # One space each side is padding (`` ` `` holds a backtick), unless the content is only spaces.
        if inner_end - inner_start >= 2 and text[inner_start] == text[inner_end - 1] == " " and text[inner_start:inner_end].strip():
            inner_start, inner_end = inner_start + 1, inner_end - 1
        elements.append(_Element(i, inner_start, inner_end, end, "code"))
        literal[i:end] = in_code[i:end] = b"\x01" * (end - i)
        i = end


def _backtick_runs(text: str) -> dict[int, list[int]]:
    """Where each maximal run of backticks starts, by its length: the code spans' possible ends."""
    runs: dict[int, list[int]] = {}
    for m in _BACKTICKS.finditer(text):
        runs.setdefault(m.end() - m.start(), []).append(m.start())
    return runs


def _closing_run(runs: dict[int, list[int]], at: int, size: int) -> int:
    """Where the next run of exactly `size` backticks from `at` starts, or -1."""
    starts = runs.get(size, [])
    k = bisect_left(starts, at)
    return starts[k] if k < len(starts) else -1


def _links(text: str, literal: bytearray, in_code: bytearray) -> list[_Element]:
    """`[text](destination)` and `![alt](destination)`: brackets matched with a stack, the inner
    link first; a link's text holds no other link (its earlier `[` no longer open one)."""
    links: list[_Element] = []
    openers: list[tuple[int, int]] = []  # (position, where its text starts)
    active_from = 0  # the openers below this index no longer open a link (one was made after them)
    n, i = len(text), 0
    while i < n:
        ch = text[i]
        if literal[i] or ch not in "[]!":
            i += 1
            continue
        if ch == "!":
            if i + 1 < n and text[i + 1] == "[" and not literal[i + 1]:
                openers.append((i, i + 2))
                i += 2
                continue
            i += 1
            continue
        if ch == "[":
            openers.append((i, i + 1))
            i += 1
            continue
        if not openers:
            i += 1
            continue
        active = len(openers) - 1 >= active_from
        at, inner = openers.pop()
        m = _DESTINATION.match(text, i + 1) if active else None
        if m is None or any(in_code[i + 1 : m.end()]):
            i += 1
            continue
        image = text[at] == "!"
        links.append(_Element(at, inner, i, m.end(), "span", "md-image" if image else "md-link"))
        literal[i + 1 : m.end()] = b"\x01" * (m.end() - i - 1)
        if not image:
            active_from = len(openers)
        i = m.end()
    return links


def _runs_by_stretch(text: str, literal: bytearray, links: list[_Element]) -> list[list[_Run]]:
    """The `*` and `_` runs of the text, grouped by the stretch they stand in: the text outside
    every link, or one link's text (the innermost that holds them)."""
    # (position, 0 where a link's text starts, 1 where it ends, which link): an empty one opens first.
    bounds = sorted([(e.inner_start, 0, k) for k, e in enumerate(links)] + [(e.inner_end, 1, k) for k, e in enumerate(links)])
    stretches: list[list[_Run]] = [[] for _ in range(len(links) + 1)]
    inside: list[int] = [len(links)]  # the stretch index stack; the last is the text outside every link
    b, i, n = 0, 0, len(text)
    while i < n:
        while b < len(bounds) and bounds[b][0] <= i:
            _, ends, k = bounds[b]
            if not ends:
                inside.append(k)
            else:
                inside.remove(k)
            b += 1
        ch = text[i]
        if ch not in "*_" or literal[i]:
            i += 1
            continue
        j = i
        while j < n and text[j] == ch and not literal[j]:
            j += 1
        stretches[inside[-1]].append(_run(text, i, j))
        i = j
    return stretches


def _emphasis(runs: list[_Run], out: list[_Element]) -> None:
    """CommonMark's "process emphasis" over one stretch's runs: each closer pairs with the nearest
    opener of its character that the rule of three allows, `**` as <strong>, `*` as <em>; a search
    that fails is not repeated below where it stopped (`openers_bottom`), so the work is linear."""
    bottom: dict[tuple[str, bool, int], int] = {}
    stack: list[_Run] = []
    for closer in runs:
        while closer.can_close and closer.end > closer.start:
            key = (closer.char, closer.can_open, closer.length % 3)
            found = None
            for k in range(len(stack) - 1, bottom.get(key, -1), -1):
                opener = stack[k]
                if opener.char != closer.char:
                    continue
                both = opener.can_close or closer.can_open
                if both and (opener.length + closer.length) % 3 == 0 and not (opener.length % 3 == 0 and closer.length % 3 == 0):
                    continue
                found = k
                break
            if found is None:
                bottom[key] = len(stack) - 1
                break
            opener = stack[found]
            use = 2 if opener.end - opener.start >= 2 and closer.end - closer.start >= 2 else 1
            out.append(_Element(opener.end - use, opener.end, closer.start, closer.start + use, "strong" if use == 2 else "em"))
            opener.end -= use
            closer.start += use
            # The runs between the two can no longer pair with anything outside them.
            del stack[found + 1 :]
            if opener.end == opener.start:
                stack.pop()
            for k in bottom:
                bottom[k] = min(bottom[k], len(stack) - 1)
        if closer.can_open and closer.end > closer.start:
            stack.append(closer)


def inline_markdown(text: str, hits=()) -> Markup:
    """`text` as a page shows it: its inline Markdown drawn (module docstring), every character
    escaped, the spans in `hits` (offsets into `text`) marked `<mark class="hit">`."""
    if len(text) > MAX_MARKDOWN_CHARS:
        return _draw(text, [], [], hits)
    elements, hidden = _parse(text)
    return _draw(text, elements, hidden, hits)


def _draw(text: str, elements: list[_Element], hidden: list[tuple[int, int]], hits) -> Markup:
    """The text cut where a tag goes, a marker hides or a hit starts or ends: each visible piece
    escaped (and marked when a hit holds it), the tags between. Elements nest (code and links are
    whole to the emphasis around them), so the tags do: a close before an open at one place, outer
    opens first, inner closes first; a hit is marked piece by piece, inside whatever holds it."""
    events: list[tuple[int, int, int, str]] = []
    for e in elements:
        css = f' class="{e.css}"' if e.css else ""
        events.append((e.start, 1, -e.end, f"<{e.tag}{css}>"))
        events.append((e.inner_end, 0, -e.start, f"</{e.tag}>"))
        hidden += [(e.start, e.inner_start), (e.inner_end, e.end)]
    events.sort()
    cuts = sorted({0, len(text), *(p for span in hidden for p in span), *(e[0] for e in events),
                   *(p for span in hits for p in span if 0 <= p <= len(text))})
    hidden_at = _covered(hidden, len(text))
    marked = _covered([(max(0, a), min(len(text), b)) for a, b in hits], len(text))
    out: list[str] = []
    k = 0
    for a, b in zip(cuts, cuts[1:] + [len(text)]):
        while k < len(events) and events[k][0] == a:
            out.append(events[k][3])
            k += 1
        if a >= b or hidden_at[a]:
            continue
        piece = str(escape(text[a:b]))
        out.append(f'<mark class="hit">{piece}</mark>' if marked[a] else piece)
    out += [e[3] for e in events[k:]]
    return Markup("".join(out))


def _covered(spans: list[tuple[int, int]], n: int) -> bytearray:
    """Per position of the text, whether a span covers it (spans are cut points of the drawing)."""
    covered = bytearray(n + 1)
    for a, b in spans:
        covered[a:b] = b"\x01" * max(0, b - a)
    return covered
