"""What a vault address names (DESIGN §11): a path or `duckdb:///path` is the embedded DuckDB file;
`postgresql://user@host:port/db` (or `postgres://…`) is a PostgreSQL database."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


@dataclass(frozen=True)
class VaultAddress:
    backend: str  # "duckdb" | "postgresql"
    target: str  # the file path, or the connection URL

    @property
    def is_postgres(self) -> bool:
        return self.backend == "postgresql"

    @property
    def path(self) -> Path:
        if self.is_postgres:
            raise ValueError(f"the vault {self.shown} is a PostgreSQL database, not a file")
        return Path(self.target)

    @property
    def shown(self) -> str:
        """The address as said to a person: a URL's password is never printed."""
        return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", self.target) if self.is_postgres else self.target


def parse_address(address: str | Path) -> VaultAddress:
    text = str(address)
    if text.startswith(POSTGRES_SCHEMES):
        return VaultAddress("postgresql", text)
    if text.startswith("duckdb://"):
        # duckdb:///abs/path (three slashes: absolute) or duckdb://relative/path
        return VaultAddress("duckdb", text.removeprefix("duckdb://") or ".")
    return VaultAddress("duckdb", text)


def is_postgres(address: str | Path) -> bool:
    return str(address).startswith(POSTGRES_SCHEMES)


def vault_exists(address: str | Path) -> bool:
    """Whether there is a vault to read at this address: a file that exists; a PostgreSQL database
    is taken as there (opening it makes its tables, and an unreachable one is its own error)."""
    return is_postgres(address) or Path(str(address)).exists()
