"""Run formats: each turns one conversation document into a `Run` with typed text nodes.

Detection looks at content, never at file names. This package module holds only what the readers
share; the formats are listed, with how each is recognised and read, in `registry.py`, and
`dispatch.parse_document` picks the reader, so the read commands that import `limits` do not load
the readers.
"""

from __future__ import annotations

from typing import Any

from nexus_assets.core.fingerprint import canonical_json, sha256_hex

# Raised whenever the readers come to read more than before (e.g. a bad entry that used to cost its
# whole run now costs that entry only). A file that had problems under an older reader is read
# again by the next sync: what it could not give then it may give now. 3: JSON Lines sessions
# (a `.json` file holding one was "not valid JSON" before).
READER_VERSION = 3


class FormatError(ValueError):
    """A document that is JSON but not a run this format can read; the message says what is wrong."""


def first_text(value: Any) -> str | None:
    """The value if it is a string with something in it (a session header's title, cwd, …)."""
    return value if isinstance(value, str) and value.strip() else None


def document_version(document: Any) -> str:
    """A run version's id: the hash of its canonical JSON, so whitespace and file names don't count."""
    try:
        return sha256_hex(canonical_json(document))
    except UnicodeEncodeError as exc:
        # json.loads accepts "\ud800"; such a string can never be stored or hashed as UTF-8.
        raise FormatError(f"contains an unpaired UTF-16 surrogate escape ({exc.object[exc.start:exc.end]!r}); fix the export") from None
