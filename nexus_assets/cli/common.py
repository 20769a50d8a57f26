"""What every `nexus` command shares: usage errors, output, opening the vault."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from nexus_assets.core.models import Brick
from nexus_assets.vault import Vault

DEFAULT_DB = "data/nexus.duckdb"
COMPILED_STATES = ("ACTIVE", "SEALING")


class UsageError(Exception):
    """Bad usage or input: exit 2 with the message."""


def emit(args: argparse.Namespace, data: Any, text: str | None = None) -> None:
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False, default=str))
    elif text is not None:
        print(text)


def brick_json(b: Brick) -> dict:
    return b.model_dump(mode="json")


def one_line(text: str, width: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def open_vault(args: argparse.Namespace, *, write: bool = False):
    db = Path(args.db)
    if not write and not db.exists():
        raise UsageError(f"no vault at {db}; run `nexus sync` first, or pass --db PATH")
    return Vault.open(db, read_only=not write)


def require_topic(vault: Vault, topic_id: str) -> None:
    if vault.topic(topic_id) is None:
        known = ", ".join(t.topic_id for t in vault.topics()) or "none"
        raise UsageError(f"unknown topic {topic_id!r}; topics in the vault: {known}")
