"""Addresses of viewer pages, for other surfaces (Dagster metadata) to link to."""

from __future__ import annotations

import os
from urllib.parse import quote

DEFAULT_BASE = "http://127.0.0.1:8765"


def viewer_base() -> str:
    return os.environ.get("NEXUS_VIEWER_URL", DEFAULT_BASE).rstrip("/")


def topic_url(topic_id: str, base: str | None = None) -> str:
    return f"{(base or viewer_base()).rstrip('/')}/topics/{quote(topic_id, safe='')}"
