"""Run formats: each turns one conversation document into a `Run` with typed text nodes.

Detection looks at content, never at file names.
"""

from __future__ import annotations

from typing import Any


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
