"""Whether text handed to a command is valid UTF-8. Pure: no I/O.

Python turns bytes of argv that are not UTF-8 into lone surrogates (U+DC80..U+DCFF, the
`surrogateescape` error handler); such text cannot be embedded, hashed or searched, so the
commands refuse it with the byte a person can look for.
"""

from __future__ import annotations


def utf8_problem(text: str) -> str | None:
    """None for text that encodes as UTF-8, else "not valid UTF-8 at byte N (0xNN)"."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as exc:
        at = exc.start
    try:
        raw = text.encode("utf-8", "surrogateescape")  # the bytes as they came from the shell
        raw.decode("utf-8")
    except UnicodeEncodeError:
        pass
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8 at byte {exc.start} (0x{raw[exc.start]:02x})"
    # A lone surrogate that no shell byte explains (e.g. "\ud800" from JSON): name its character.
    return f"not valid UTF-8 at character {at} (U+{ord(text[at]):04X})"
