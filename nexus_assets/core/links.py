"""Addresses of viewer pages, for other surfaces (Dagster metadata) to link to."""

from __future__ import annotations

from urllib.parse import quote

DEFAULT_BASE = "http://127.0.0.1:8765"
# NEXUS_VIEWER_URL as the shell handed it over (`configure`).
_base: str | None = None


def configure(base: str | None) -> None:
    """Where links to the viewer point (the shell calls this from `nexus_assets.settings`)."""
    global _base
    _base = base or None


def viewer_base() -> str:
    return (_base or DEFAULT_BASE).rstrip("/")


def topic_url(topic_id: str, base: str | None = None) -> str:
    return f"{(base or viewer_base()).rstrip('/')}/topics/{quote(topic_id, safe='')}"
