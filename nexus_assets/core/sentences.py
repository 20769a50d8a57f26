"""Sentence spans over chat text, so quotes can be lifted as whole, verbatim sentences.

Every span indexes the original string and is only ever trimmed of whitespace, never
rewritten. The text is cut into lines first (chat messages use line breaks for structure),
markdown structure is handled per line, and only then are lines split at terminators.
All regexes are anchored or possessive so the cost stays linear in the length of the text.
"""

from __future__ import annotations

import bisect
import re

# A fence opens with 3+ backticks or tildes; a backtick fence's info string may not contain
# backticks (CommonMark), which keeps one-line ```code``` from opening a block.
_FENCE_OPEN = re.compile(r"[ \t]*+(?:(`{3,}+)[^`]*+|(~{3,}+).*+)$")
_FENCE_CLOSE = re.compile(r"[ \t]*+(`{3,}+|~{3,}+)[ \t]*+$")

# Blockquote markers, bullets, ordered-list numbers and task boxes, in any nesting. A marker
# must be followed by whitespace (or end the line) so `**bold**`, `3.14` and `-5` are text.
_PREFIX = re.compile(
    r"[ \t]*+(?:(?:>|[-*+](?=[ \t]|$)|\d{1,9}+[.)](?=[ \t]|$)|\[[ xX]\](?=[ \t]|$))[ \t]*+)*+"
)
_HEADING = re.compile(r"#{1,6}+(?:[ \t]++|$)")
# Thematic breaks, plus setext underlines (`===`), carry no words of their own.
_RULE = re.compile(r"([-*_=])[ \t]*+(?:\1[ \t]*+){2,}+$")
_TABLE_DELIMITER = re.compile(r"\|[ \t:|-]*+$")

_LATIN_TERMINATORS = ".!?…‼⁇⁈⁉‽"
_CLOSERS = "\"'”’»)\\]}*_」』"
_OTHER_TERMINATORS = "。！？｡．।॥؟۔։።"
# Starting with a plain character class lets the regex engine skip ahead to the next
# terminator (a few times faster than trying the branches at every position). The Latin branch
# only starts at the first terminator of a run, keeping `.....` linear, and needs whitespace
# and then something other than an ASCII lowercase letter (the rest of the test is in Python);
# `next` is where the following sentence would start, past any emphasis marks. The other
# branch (CJK, Devanagari, Arabic, Armenian, Ethiopic) ends a sentence whatever follows.
_CANDIDATE = re.compile(
    rf"[{_LATIN_TERMINATORS}{_OTHER_TERMINATORS}]"
    rf"(?:(?<=[{_LATIN_TERMINATORS}])(?<![{_LATIN_TERMINATORS}]{{2}})(?P<more>[{_LATIN_TERMINATORS}]*+)"
    rf"[{_CLOSERS}]*+(?=\s++(?P<next>[*_~]*+[^\sa-z*_~]))"
    rf"|(?<=[{_OTHER_TERMINATORS}])[{_OTHER_TERMINATORS}]*+[{_CLOSERS}）】〉》]*+)"
)
_BACKTICKS = re.compile(r"`++")

_OPENERS = frozenset("\"'“‘„«‹([{¿¡「『（【《〈`")

# Abbreviations are compared without their final dot. Tokens made of single letters joined by
# dots (e.g, i.e, a.m, U.S, т.е) are caught by _LETTER_DOTS rather than listed.
_ABBREVIATIONS_ANY_CASE = frozenset(
    {"etc", "vs", "approx", "cf", "viz", "al", "ca", "esp", "incl", "resp", "ibid"}
)
# Title-like abbreviations only count when capitalised, so "a fig. Then" still splits.
_ABBREVIATIONS_CAPITALISED = frozenset(
    {
        "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "inc", "ltd", "co", "corp", "fig",
        "figs", "eq", "eqs", "mt", "rev", "gen", "col", "lt", "sgt", "capt", "gov", "sen",
        "dept", "ave", "ph.d",
    }
)
# Only abbreviations before a number: "No. 5" is one sentence, but "No. That's wrong." is two.
_ABBREVIATIONS_BEFORE_NUMBER = frozenset(
    {
        "no", "nos", "nr", "pp", "vol", "ch", "sec", "art", "jan", "feb", "mar", "apr", "jun",
        "jul", "aug", "sep", "sept", "oct", "nov", "dec", "рис", "стр", "табл", "гл",
    }
)
_LETTER_DOTS = re.compile(r"(?:[^\W\d_]\.)++[^\W\d_]")
_TOKEN_LOOKBACK = 16


# What a span is, for readers that keep only statements (the embedded extractor): prose, a list
# item's text, a heading, a table row or a fenced code block.
PROSE, ITEM, HEADING, TABLE, CODE = "prose", "item", "heading", "table", "code"


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Spans [start, end) of the sentences of `text`, in order, non-overlapping, each stripped of
    surrounding whitespace (text[start:end] has no leading/trailing whitespace and is non-empty)."""
    return _spans(text, None)


def sentence_units(text: str) -> list[tuple[int, int, str]]:
    """`sentence_spans` with the kind of each span (PROSE, ITEM, HEADING, TABLE or CODE)."""
    kinds: list[str] = []
    spans = _spans(text, kinds)
    return [(s, e, k) for (s, e), k in zip(spans, kinds)]


def _spans(text: str, kinds: list[str] | None) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    fence_char = ""
    fence_len = 0
    code_start = 0
    pos = 0
    for line in text.splitlines(keepends=True):
        start = pos
        pos += len(line)
        end = start + len(line.rstrip())

        before = len(spans)
        kind = PROSE
        if fence_char:
            close = _FENCE_CLOSE.match(text, start, end)
            if close and close.group(1)[0] == fence_char and len(close.group(1)) >= fence_len:
                _add(spans, text, code_start, start)
                fence_char = ""
                kind = CODE
        elif end > start and (content := _PREFIX.match(text, start, end).end()) < end:
            first = text[content]
            if first in "`~" and (fence := _FENCE_OPEN.match(text, start, end)):
                marks = fence.group(1) or fence.group(2)
                fence_char, fence_len, code_start = marks[0], len(marks), pos
            elif first in "-*_=" and _RULE.match(text, content, end):
                pass
            elif first == "#" and (heading := _HEADING.match(text, content, end)):
                _add(spans, text, heading.end(), _strip_closing_hashes(text, heading.end(), end))
                kind = HEADING
            elif first == "|":
                if not _TABLE_DELIMITER.match(text, content, end) or "-" not in text[content:end]:
                    spans.append((content, end))
                kind = TABLE
            else:
                _split_line(spans, text, content, end)
                # A bullet, number or task box (not a blockquote's `>`) makes the line a list item.
                if content > start and any(c not in " \t>" for c in text[start:content]):
                    kind = ITEM
        if kinds is not None and len(spans) > before:
            kinds.extend(kind for _ in range(len(spans) - before))

    if fence_char:
        # An unterminated fence runs to the end of the text, as markdown renderers show it.
        before = len(spans)
        _add(spans, text, code_start, len(text))
        if kinds is not None and len(spans) > before:
            kinds.append(CODE)
    return spans


def sentences(text: str) -> list[str]:
    """The sentences of `text` as verbatim substrings; see `sentence_spans`."""
    return [text[s:e] for s, e in sentence_spans(text)]


def _add(spans: list[tuple[int, int]], text: str, start: int, end: int) -> None:
    if start < end and not text[start].isspace() and not text[end - 1].isspace():
        spans.append((start, end))
        return
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start < end:
        spans.append((start, end))


def _strip_closing_hashes(text: str, start: int, end: int) -> int:
    """End of a heading without its optional closing `#`s ("# C#" keeps its `#`)."""
    cut = end
    while cut > start and text[cut - 1] == "#":
        cut -= 1
    if cut == end or (cut > start and text[cut - 1] not in " \t"):
        return end
    return cut


def _split_line(spans: list[tuple[int, int]], text: str, start: int, end: int) -> None:
    code: list[int] | None = None
    cut = start
    for match in _CANDIDATE.finditer(text, start, end):
        at = match.start()
        following = match.start("next")
        if following >= 0:
            # Lowercase (in any cased script), symbols and emoji continue the sentence;
            # uncased letters (CJK, Arabic, Devanagari, ...) may start one.
            char = text[match.end("next") - 1]
            if not (char.isdigit() or char in _OPENERS or (char.isalpha() and not char.islower())):
                continue
            # Only a lone "." can follow an abbreviation, and every abbreviation and initial
            # ends in a letter, so "2023." or "?!" need no lookup.
            if (
                text[at] == "."
                and not match.group("more")
                and at > start
                and text[at - 1].isalpha()
                and _is_abbreviation(text, at, start, char)
            ):
                continue
        elif text[at] == "．" and not _fullwidth_stop_ends(text, match.end(), end):
            continue
        if code is None:
            code = _inline_code(text, start, end) if text.find("`", start, end) >= 0 else []
        if code and bisect.bisect_right(code, at) % 2:
            continue
        _add(spans, text, cut, match.end())
        cut = following if following >= 0 else match.end()
    _add(spans, text, cut, end)


def _is_abbreviation(text: str, dot: int, start: int, following: str) -> bool:
    """Whether the word ending at `dot` is an abbreviation or initial, not a sentence end.

    Only a short window is inspected: anything longer than it (a URL, a path) is no
    abbreviation, and the window keeps the check constant-time on very long lines.
    """
    low = max(start, dot - _TOKEN_LOOKBACK)
    window = text[low:dot]
    if not window or window[-1].isspace():
        return False
    parts = window.split()
    if len(parts) == 1 and low > start and not window[0].isspace():
        return False
    word = parts[-1].lstrip("\"'“‘([{«*_")
    if not word:
        return False
    if len(word) == 1:
        return word.isalpha()
    lowered = word.lower()
    if lowered in _ABBREVIATIONS_ANY_CASE or ("." in word and _LETTER_DOTS.fullmatch(word)):
        return True
    if lowered in _ABBREVIATIONS_CAPITALISED and word[0].isupper():
        return True
    return following.isdigit() and lowered in _ABBREVIATIONS_BEFORE_NUMBER


def _fullwidth_stop_ends(text: str, after: int, end: int) -> bool:
    """A fullwidth full stop before a digit or Latin letter is a decimal point or a domain dot."""
    if after >= end:
        return True
    char = text[after]
    return not (char.isdigit() or (char.isascii() and char.isalpha()) or "Ａ" <= char <= "ｚ")


def _inline_code(text: str, start: int, end: int) -> list[int]:
    """Flat, sorted [open, close, open, close, ...] bounds of the inline code spans of a line,
    so a position is inside code when bisect_right lands on an odd index. As in CommonMark a
    run of n backticks closes at the next run of exactly n; unmatched runs are literal."""
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text, start, end)]
    bounds: list[int] = []
    i = 0
    while i < len(runs):
        width = runs[i][1] - runs[i][0]
        j = i + 1
        while j < len(runs) and runs[j][1] - runs[j][0] != width:
            j += 1
        if j < len(runs):
            bounds += (runs[i][1], runs[j][0])
            i = j + 1
        else:
            i += 1
    return bounds


def tool_line_units(text: str) -> list[tuple[int, int]]:
    """[start, end) of each non-blank line of a tool's text, stripped: tool output is read by the
    line (a warning, an error, a log entry), not by the sentence."""
    units = []
    at = 0
    for line in text.splitlines(keepends=True):
        body = line.strip()
        if body:
            start = at + line.index(body[0])
            units.append((start, start + len(body)))
        at += len(line)
    return units
