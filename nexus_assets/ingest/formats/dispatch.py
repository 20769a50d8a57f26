"""The one place a document's format is dispatched to its reader."""

from __future__ import annotations

from typing import Any

from nexus_assets.core.models import Run
from nexus_assets.ingest.formats import FormatError, detect_format
from nexus_assets.ingest.formats.chatgpt import chatgpt_run
from nexus_assets.ingest.formats.claude import claude_run
from nexus_assets.ingest.formats.claude_code import claude_code_run
from nexus_assets.ingest.formats.codex import codex_run
from nexus_assets.ingest.formats.nexus import nexus_run


def parse_document(document: Any, *, open_after: str | None = None, index: int | None = None) -> Run:
    """One run from one JSON document of any supported format: the one place formats are dispatched."""
    kind = detect_format(document)
    if kind == "nexus":
        return nexus_run(document)
    if kind == "chatgpt":
        return chatgpt_run(document, open_after=open_after, index=index)
    if kind == "claude":
        return claude_run(document, open_after=open_after, index=index)
    if kind == "claude-code":
        return claude_code_run(document)
    if kind == "codex":
        return codex_run(document)
    keys = sorted(document)[:8] if isinstance(document, dict) else type(document).__name__
    raise FormatError(
        f"valid JSON but not a known run format (found {keys}); expected a Nexus run "
        '{"run_id", "status", "messages"} or a ChatGPT/Claude conversations.json export'
    )
