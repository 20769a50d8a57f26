"""What a vault address names (docs/deployment.md): a path or `duckdb:///path` is the embedded DuckDB file;
`postgresql://user@host:port/db` (or `postgres://…`) is a PostgreSQL database.

An address is parsed once, where it enters (the `--db` flag, `NEXUS_DB`, the API's and the MCP
server's configuration), into a `VaultAddress`. It is a `str` whose text is the canonical form
(the file path, or the connection URL), so everything below that takes a path or a URL takes it
as it is: `duckdb:///tmp/v.duckdb` never reaches `Path()` with its scheme still on.

An address also carries how this process opens it (`VaultOptions`: DuckDB's memory, the size of
the PostgreSQL pool), set by the entry point from its settings (docs/configuration.md): the code
that opens a vault is handed them with the address, never reads them from a module global.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
DUCKDB_SCHEME = "duckdb://"


@dataclass(frozen=True)
class VaultOptions:
    """How a process opens a vault, as its settings say; each value as text, checked where the
    vault is opened (so a bad one fails only what opens a vault, with the message it always had)."""

    memory: str | None = None  # NEXUS_VAULT_MEMORY: DuckDB's memory (None: vault.connection.DEFAULT_MEMORY)
    pool_size: str | None = None  # NEXUS_PG_POOL_SIZE: PostgreSQL connections held at most (None: 8)


class VaultAddress(str):
    """A parsed vault address: `backend` is "duckdb" or "postgresql"; the text is the file path or
    the URL; `options`: how to open it. Equal to its text, whatever the options."""

    backend: str
    options: VaultOptions

    def __new__(cls, backend: str, target: str, options: VaultOptions | None = None) -> VaultAddress:
        address = super().__new__(cls, target)
        address.backend = backend
        address.options = options or VaultOptions()
        return address

    def __reduce__(self):  # pickled into Dagster runs and worker processes as what it is
        return (VaultAddress, (self.backend, str(self), self.options))

    def using(self, options: VaultOptions) -> VaultAddress:
        """This address, opened with `options`."""
        return VaultAddress(self.backend, self.target, options)

    @property
    def target(self) -> str:
        """The file path, or the connection URL."""
        return str.__str__(self)

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


def parse_address(address: str | Path, options: VaultOptions | None = None) -> VaultAddress:
    """The address a text names; an address already parsed is kept as it is (its options too,
    unless `options` are given)."""
    if isinstance(address, VaultAddress):
        return address if options is None else address.using(options)
    text = str(address)
    if text.startswith(POSTGRES_SCHEMES):
        return VaultAddress("postgresql", text, options)
    if text.startswith(DUCKDB_SCHEME):
        # duckdb:///abs/path (three slashes: absolute) or duckdb://relative/path
        return VaultAddress("duckdb", text.removeprefix(DUCKDB_SCHEME) or ".", options)
    return VaultAddress("duckdb", text, options)


def is_postgres(address: str | Path) -> bool:
    return parse_address(address).is_postgres


def vault_exists(address: str | Path) -> bool:
    """Whether there is a vault to read at this address: a file that exists; a PostgreSQL database
    is taken as there (opening it makes its tables, and an unreachable one is its own error)."""
    parsed = parse_address(address)
    return parsed.is_postgres or parsed.path.exists()
