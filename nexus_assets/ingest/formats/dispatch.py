"""The one place a document's format is dispatched to its reader (the formats: `registry.py`)."""

from __future__ import annotations

from typing import Any

from nexus_assets.core.models import Run
from nexus_assets.ingest.formats import FormatError
from nexus_assets.ingest.formats.registry import FORMATS, detect_format


def parse_document(document: Any, *, open_after: str | None = None, index: int | None = None) -> Run:
    """One run from one JSON document of any supported format: the one place formats are dispatched."""
    kind = detect_format(document)
    if kind is not None:
        return FORMATS[kind].read(document, open_after, index)
    keys = sorted(document)[:8] if isinstance(document, dict) else type(document).__name__
    raise FormatError(
        f"valid JSON but not a known run format (found {keys}); expected a Nexus run "
        '{"run_id", "status", "messages"} or a ChatGPT/Claude conversations.json export'
    )
