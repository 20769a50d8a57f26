"""One migration of the vault's schema (the ordered list is `MIGRATIONS` in vault/migrations.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import duckdb


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sql: str
    # Rows a new table needs from what is already stored (runs in the same transaction). A name:
    # a backfill that needs a phase's code, handed in from above (`nexus_assets.upgrades`), since
    # nothing under vault/ imports a phase.
    backfill: Callable[[duckdb.DuckDBPyConnection], None] | str | None = None
