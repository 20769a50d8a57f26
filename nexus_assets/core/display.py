"""Text shown to a person, made safe to show (issue 50 item 1).

Conversation text is stored exactly as it was said (invariant 1), and agent sessions say things
a terminal obeys: colour and cursor sequences (`ESC[2K ESC[1G ESC[32m`), bells, backspaces,
carriage returns that rewrite a line. Printed raw, a brick could erase lines or recolour the
terminal it is read in, and a page could hide text. Every rendering meant for a person (the CLI's
text output, the Markdown export, the viewer's pages) passes its text through `visible`, which
writes each C0 and C1 control character (and DEL) as a visible escape, `\\x1b`, `\\x07`, `\\x08`,
so the sequence is seen rather than executed. Line breaks and tabs stay what they are (the text is
multi-line); a carriage return stays only as part of a CRLF line end. Stored content and every
JSON output keep the exact text (JSON writes these characters as `\\u001b` escapes anyway;
`json_for_terminal` makes it do so for C1 characters too).
"""

from __future__ import annotations

import re

# C0 controls but tab and line feed, a carriage return that does not end a CRLF line, DEL, and C1.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")
_C1 = re.compile(r"[\x7f-\x9f]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def visible(text: str) -> str:
    """`text` with every control character written as a visible `\\xNN` escape; tabs, line feeds
    and CRLF line ends kept. Pure; text without control characters comes back unchanged."""
    return _CONTROL.sub(_escaped, text) if text else text


def json_for_terminal(json_text: str) -> str:
    """JSON text (`ensure_ascii=False`) with C1 controls and DEL written as `\\u00NN` escapes: the
    same JSON value, exact text, but nothing a terminal would act on (JSON escapes C0 already)."""
    return _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)
