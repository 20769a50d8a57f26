"""Run formats: each turns one conversation document into a `Run` with typed text nodes.

Detection looks at content, never at file names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nexus_assets.core.fingerprint import canonical_json, sha256_hex

if TYPE_CHECKING:
    from nexus_assets.core.models import Run


class FormatError(ValueError):
    """A document that is JSON but not a run this format can read; the message says what is wrong."""


def detect_format(value: Any) -> str | None:
    """'nexus', 'chatgpt' or 'claude' for a run document or one export conversation."""
    if isinstance(value, dict):
        if "messages" in value and "run_id" in value:
            return "nexus"
        if "mapping" in value:
            return "chatgpt"
        if "chat_messages" in value:
            return "claude"
    return None


def document_version(document: Any) -> str:
    """A run version's id: the hash of its canonical JSON, so whitespace and file names don't count."""
    try:
        return sha256_hex(canonical_json(document))
    except UnicodeEncodeError as exc:
        # json.loads accepts "\ud800"; such a string can never be stored or hashed as UTF-8.
        raise FormatError(f"contains an unpaired UTF-16 surrogate escape ({exc.object[exc.start:exc.end]!r}); fix the export") from None


def parse_document(document: Any, *, open_after: str | None = None, index: int | None = None) -> "Run":
    """One run from one JSON document of any supported format: the one place formats are dispatched."""
    kind = detect_format(document)
    if kind == "nexus":
        return nexus_run(document)
    if kind == "chatgpt":
        return chatgpt_run(document, open_after=open_after, index=index)
    if kind == "claude":
        return claude_run(document, open_after=open_after, index=index)
    keys = sorted(document)[:8] if isinstance(document, dict) else type(document).__name__
    raise FormatError(
        f"valid JSON but not a known run format (found {keys}); expected a Nexus run "
        '{"run_id", "status", "messages"} or a ChatGPT/Claude conversations.json export'
    )


# The readers import the helpers above from this package, so they are imported after them.
from nexus_assets.core.formats.chatgpt import chatgpt_run  # noqa: E402
from nexus_assets.core.formats.claude import claude_run  # noqa: E402
from nexus_assets.core.formats.nexus import nexus_run  # noqa: E402
