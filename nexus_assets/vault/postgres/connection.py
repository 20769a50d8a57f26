"""The PostgreSQL backend's way in: a bounded psycopg pool per address, and a connection that takes
the stores' SQL as DuckDB spells it.

The stores write one SQL. Where the two engines only spell a thing differently (placeholders, a
list parameter, a cast's type name), `translate` rewrites it here, in the backend; where they
differ in substance, the store asks `vault.backend` and the difference is written out beside it.
"""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from decimal import Decimal
from functools import lru_cache
from typing import Any, Iterator

import psycopg
from psycopg.adapt import Loader
from psycopg.types.string import TextLoader
from psycopg_pool import ConnectionPool

from nexus_assets.vault.address import parse_address
from nexus_assets.vault.connection import VaultConfigError, VaultUnusable

# The pool's bound: connections one process holds at most (NEXUS_PG_POOL_SIZE, handed over with the address).
DEFAULT_POOL_SIZE = 8
_pools: dict[str, ConnectionPool] = {}
_pools_lock = threading.Lock()


class _NumericLoader(Loader):
    """sum() of integers is numeric in PostgreSQL and an integer in DuckDB: load it as DuckDB gives it."""

    def load(self, data):
        value = Decimal(bytes(data).decode())
        return int(value) if value == value.to_integral_value() else float(value)


# PostgreSQL's text cannot hold NUL, which a conversation may (DuckDB stores it). It is kept as
# U+FDD0, a noncharacter Unicode reserves for internal use, one character for one so every offset
# stays; text is read back with it as NUL. (A U+FDD0 in the input itself reads back as NUL.)
NUL, STAND_IN = "\x00", "\ufdd0"


def storable(value):
    if isinstance(value, str):
        return value.replace(NUL, STAND_IN) if NUL in value else value
    if isinstance(value, list) and value and isinstance(value[0], str):
        return [storable(v) for v in value]
    return value


class _TextLoader(TextLoader):
    def load(self, data):
        text = super().load(data)
        return text.replace(STAND_IN, NUL) if STAND_IN in text else text


def _setup(conn: psycopg.Connection) -> None:
    conn.adapters.register_loader("numeric", _NumericLoader)
    for name in ("text", "varchar"):
        conn.adapters.register_loader(name, _TextLoader)
    # Times come back in UTC whatever the server's zone, as DuckDB's do here.
    conn.execute("SET TimeZone = 'UTC'")


def _reset(conn: psycopg.Connection) -> None:
    conn.execute("RESET ALL")
    conn.execute("SET TimeZone = 'UTC'")


def pool_bound(pool_size: str | None) -> int:
    """NEXUS_PG_POOL_SIZE as given (text, or None: DEFAULT_POOL_SIZE), checked."""
    if pool_size is None or pool_size == "":
        return DEFAULT_POOL_SIZE
    try:
        size = int(pool_size)
    except ValueError:
        size = 0
    if size < 1:
        raise VaultConfigError(f"NEXUS_PG_POOL_SIZE={pool_size!r} is not a number of connections (1 or more)")
    return size


def pool(url: str, pool_size: str | None = None) -> ConnectionPool:
    """The process's pool for this database, opened on first use and bounded by `pool_size`
    (what the address's options say; the first open of a database decides its bound)."""
    with _pools_lock:
        found = _pools.get(url)
        if found is None:
            found = _pools[url] = ConnectionPool(
                url, min_size=0, max_size=pool_bound(pool_size), kwargs={"autocommit": True}, configure=_setup,
                reset=_reset, open=True, name=f"nexus-vault-{len(_pools)}", timeout=120.0,
            )
        return found


class PostgresUnreachable(VaultUnusable):
    """The vault's PostgreSQL refused or did not answer: one line naming it and what to check."""


@contextmanager
def connection(url: str, *, read_only: bool = False, pool_size: str | None = None) -> Iterator["PgConnection"]:
    try:
        held = pool(url, pool_size).connection()
        raw = held.__enter__()
    except (psycopg.OperationalError, psycopg.errors.Error) as exc:
        raise PostgresUnreachable(f"cannot reach the vault {parse_address(url).shown}: {str(exc).strip().splitlines()[0]}") from None
    except Exception as exc:  # the pool's own timeout
        if type(exc).__name__ == "PoolTimeout":
            raise PostgresUnreachable(f"cannot reach the vault {parse_address(url).shown}: {exc}") from None
        raise
    try:
        if read_only:
            raw.execute("SET default_transaction_read_only = on")
        yield PgConnection(raw)
    except BaseException as exc:
        held.__exit__(type(exc), exc, exc.__traceback__)
        raise
    else:
        held.__exit__(None, None, None)


class PgConnection:
    """A pooled psycopg connection with the few methods the stores call on DuckDB's."""

    backend = "postgresql"

    def __init__(self, raw: psycopg.Connection):
        self.raw = raw

    def execute(self, sql: str, params: Any = None) -> psycopg.Cursor:
        text, values = translate(sql, params)
        return self.raw.execute(text, values, prepare=False)

    def executemany(self, sql: str, rows) -> None:
        rows = list(rows)
        if not rows:
            return
        text, _ = translate(sql, rows[0])
        with self.raw.cursor() as cur:
            cur.executemany(text, [translate(sql, r)[1] for r in rows])

    def close(self) -> None:
        """The pool takes the connection back when the vault is closed."""


# ---- DuckDB's spelling to PostgreSQL's ------------------------------------------------------

_STRING = re.compile(r"('(?:[^']|'')*')")
_ANY = re.compile(r"(\bNOT\s+)?\bIN\s*\(\s*SELECT\s+unnest\((\?|\$\w+)\)\s*\)", re.IGNORECASE)
_JSON_FIELD = re.compile(r"\bjson_extract_string\(([\w.]+), '\$\.(\w+)'\)")
_PLACEHOLDER = re.compile(r"\?|\$([A-Za-z_]\w*)|%")
_SPELLINGS = (
    (re.compile(r"::BLOB\b", re.I), "::bytea"),
    (re.compile(r"::VARCHAR\b", re.I), "::text"),
    (re.compile(r"::FLOAT\[\d*\]", re.I), "::real[]"),
    (re.compile(r"::DOUBLE\b", re.I), "::float8"),
    (re.compile(r"\blist\(", re.I), "array_agg("),
    (re.compile(r"\bany_value\(", re.I), "min("),
    (re.compile(r"\bjson_array_length\(([\w.]+)\)", re.I), r"json_array_length(\1::json)"),
    (re.compile(r"\bBEGIN TRANSACTION\b", re.I), "BEGIN"),
)


def _kind(value) -> str:
    """The array type a list parameter is sent as where PostgreSQL cannot infer one (`unnest`)."""
    if not isinstance(value, (list, tuple)):
        return ""
    first = next((v for v in value if v is not None), None)
    if isinstance(first, bool):
        return "::boolean[]"
    if isinstance(first, int):
        return "::bigint[]"
    if isinstance(first, float):
        return "::float8[]"
    if isinstance(first, bytes):
        return "::bytea[]"
    return "::text[]"


def translate(sql: str, params: Any = None) -> tuple[str, Any]:
    if isinstance(params, dict):
        signature = tuple(sorted((k, _kind(v)) for k, v in params.items()))
        return _translate(sql, signature), {k: storable(v) for k, v in params.items()}
    values = [storable(v) for v in params] if params is not None else None
    signature = tuple(_kind(v) for v in values) if values is not None else None
    return _translate(sql, signature), values


@lru_cache(maxsize=4096)
def _translate(sql: str, signature) -> str:
    kinds_by_name = dict(signature) if signature and isinstance(signature[0], tuple) else {}
    kinds = list(signature) if signature and not kinds_by_name else []
    position = 0
    bound = signature is not None  # without parameters the driver leaves % alone
    # A NUL escaped in stored JSON cannot become text in PostgreSQL: it is read as its stand-in.
    sql = _JSON_FIELD.sub(lambda m: f"(replace({m.group(1)}, '\\u0000', '\\ufdd0')::json ->> '{m.group(2)}')", sql)
    parts = _STRING.split(sql)
    out = []
    for i, part in enumerate(parts):
        if i % 2:  # a string literal: only the driver's % needs doubling
            out.append(part.replace("%", "%%") if bound else part)
            continue
        for pattern, spelling in _SPELLINGS:
            part = pattern.sub(spelling, part)
        # x IN (SELECT unnest(?)) is x = ANY(?): PostgreSQL takes the list without knowing its type.
        part = _ANY.sub(lambda m: f"{'<> ALL' if m.group(1) else '= ANY'}({m.group(2)}§)", part)

        def placeholder(m: re.Match) -> str:
            nonlocal position
            if m.group(0) == "%":
                return "%%" if bound else "%"
            if m.group(0) == "?":
                kind = kinds[position] if position < len(kinds) else ""
                position += 1
                return "%s" + kind
            return f"%({m.group(1)})s" + kinds_by_name.get(m.group(1), "")

        part = _PLACEHOLDER.sub(placeholder, part)
        # Inside ANY/ALL the list goes untyped (an empty one included); elsewhere (unnest) it is typed.
        part = re.sub(r"(%s|%\(\w+\)s)(?:::\w+\[\])?§", r"\1", part)
        out.append(part)
    return "".join(out)
