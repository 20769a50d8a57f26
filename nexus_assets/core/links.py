"""Addresses of viewer pages, for other surfaces (Dagster metadata, answers, agents' tools) to link to."""

from __future__ import annotations

from urllib.parse import quote

# Where the viewer is when NEXUS_VIEWER_URL is unset (docs/configuration.md).
DEFAULT_BASE = "http://127.0.0.1:8765"


def topic_url(topic_id: str, base: str | None = None) -> str:
    """The topic's viewer page under `base` (NEXUS_VIEWER_URL as the entry point read it; None: DEFAULT_BASE)."""
    return f"{(base or DEFAULT_BASE).rstrip('/')}/topics/{quote(topic_id, safe='')}"


def passage_url(passage_id: str, base: str | None = None) -> str:
    """A passage's viewer page: the sentence in its message, with its address."""
    return f"{(base or DEFAULT_BASE).rstrip('/')}/passages/{quote(passage_id, safe='')}"
