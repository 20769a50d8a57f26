"""The one way into the vault's DuckDB file: waiting for other writers, announcing ours, and the
connection settings every handle gets."""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
import threading
import time
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import duckdb


def now() -> datetime:
    return datetime.now(timezone.utc)


class VaultBusy(RuntimeError):
    """Another process holds the DuckDB write lock for longer than we were willing to wait."""


class VaultPathError(ValueError):
    """The vault path names a folder, a file that is not a DuckDB database, or a place where no
    file can be opened or created. Nothing is created beside it."""


# DuckDB's IOException texts about the path itself, not a lock or a damaged vault.
_PATH_PROBLEMS = ("Cannot open file", "Is a directory", "Not a directory")


class VaultUnusable(RuntimeError):
    """The vault's storage refuses the command: the file is damaged or read-only, or its disk is
    full. The message is one line: the file, what is wrong, what to do."""


# What the errors of DuckDB and of the OS say, as text (DuckDB gives no errno).
_FULL = {errno.ENOSPC: "No space left on device", errno.EFBIG: "File too large", errno.EDQUOT: "Disk quota exceeded"}
_DENIED = {errno.EACCES: "Permission denied", errno.EPERM: "Operation not permitted", errno.EROFS: "Read-only file system"}
_DAMAGE = {
    "Could not read enough bytes": "part of the file is missing: it was truncated",
    "Corrupt database file": "a block of the file fails its checksum",
    "does not match stored checksum": "a block of the file fails its checksum",
}
READ_ONLY_COMMANDS = "topics, bricks, manifest, trace, search, export"


def damaged(db_path: str | Path, detail: str) -> VaultUnusable:
    return VaultUnusable(f"vault {db_path} is damaged ({detail}); restore it from a backup copy, or sync into a new vault with --db NEW_PATH")


def read_only(db_path: str | Path) -> VaultUnusable:
    """The one line for a write refused by permissions: the file's own, else its folder's."""
    db_path = Path(db_path)
    if db_path.exists() and not os.access(db_path, os.W_OK):
        return VaultUnusable(
            f"vault {db_path} is read-only: this command writes to it; make the file writable (chmod u+w {db_path}), "
            f"or use a command that only reads ({READ_ONLY_COMMANDS})"
        )
    return VaultUnusable(
        f"vault folder {db_path.parent} is read-only: this command writes beside the vault file {db_path.name}; "
        f"make the folder writable, or use a command that only reads ({READ_ONLY_COMMANDS})"
    )


def storage_problem(db_path: str | Path, error: BaseException | str) -> VaultUnusable | None:
    """The vault's storage problem behind an error (DuckDB's, the OS's, or its text as a step
    reported it), or None when the error is about something else."""
    text = str(error)
    code = getattr(error, "errno", None)
    full = _FULL.get(code) or next((t for t in _FULL.values() if t in text), None)
    if full:
        return VaultUnusable(
            f"cannot write the vault {db_path}: the disk that holds it is full ({full}); free space there and run "
            "the command again (what was committed before is kept)"
        )
    if code in _DENIED or any(t in text for t in _DENIED.values()):
        return read_only(db_path)
    detail = next((d for marker, d in _DAMAGE.items() if marker in text), None)
    return damaged(db_path, detail) if detail else None


def check_intact(conn: duckdb.DuckDBPyConnection, db_path: Path) -> None:
    """Refuse a vault file shorter than the blocks it says it uses: it was truncated, and a read
    would otherwise answer from the part that is left (`nexus errors`: "none") or fail midway.
    Only where no write-ahead log is pending: its blocks are not in the file yet."""
    if Path(f"{db_path}.wal").exists():
        return
    block, used = conn.execute("SELECT block_size, used_blocks FROM pragma_database_size()").fetchone()
    if db_path.stat().st_size < block * used:
        raise damaged(db_path, "the file is shorter than the data it holds: it was truncated")


def check_vault_path(db_path: Path) -> None:
    """Refuse, before anything is created beside it, a path that cannot be a vault file."""
    if db_path.is_dir():
        raise VaultPathError(f"vault path {db_path} is a folder, not a vault file")
    if db_path.exists() and not db_path.is_file():
        raise VaultPathError(f"vault path {db_path} is not a regular file")


def derived_path(db_path: str | Path, suffix: str) -> Path:
    """Where data derived from the vault (a search or vector index) is kept: beside the vault file,
    or, when its folder is read-only, in a folder of the temp directory named after the vault, so
    commands that only read still work on a read-only vault (rebuilt there from the vault)."""
    if str(db_path).startswith(("postgresql://", "postgres://")):
        # A PostgreSQL vault has no folder: each machine keeps its own copy, rebuilt from the vault.
        from nexus_assets.vault.address import parse_address

        key = hashlib.sha256(parse_address(db_path).shown.encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"nexus-{os.getuid()}-pg-{key}" / f"vault{suffix}"
    db = Path(db_path)
    beside = db.parent / f"{db.stem}{suffix}"
    if os.access(beside, os.W_OK) if beside.exists() else os.access(db.parent, os.W_OK):
        return beside
    key = hashlib.sha256(str(db.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"nexus-{os.getuid()}-{key}" / beside.name


def _make_folder(folder: Path, db_path: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno in _DENIED and folder.parent.is_dir():
            raise read_only(db_path) from None
        verb = "open" if db_path.exists() else "create"
        raise VaultPathError(f"cannot {verb} the vault {db_path}: cannot make the folder {exc.filename or folder} ({exc.strerror or exc})") from None


def _intents(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".writers")


# Called with the vault's path when a writer of this process announces itself: a process that
# holds the vault open for reading (`vault/warm.py`) lets go of it at once.
_writer_hooks: list = []


def on_writer(hook) -> None:
    if hook not in _writer_hooks:
        _writer_hooks.append(hook)


@contextmanager
def writer_intent(db_path: str | Path) -> Iterator[None]:
    """Announce a writer for as long as it wants or holds the vault.

    DuckDB gives no writer priority: a steady stream of short read-only connections (viewer tabs)
    can keep the file locked forever. Readers see this mark and step aside until it is gone.
    """
    db_path = Path(db_path)
    check_vault_path(db_path)
    folder = _intents(db_path)
    created = not folder.exists()
    _make_folder(folder, db_path)
    mark = folder / f"{os.getpid()}-{threading.get_ident()}"
    try:
        mark.touch()
    except OSError as exc:
        raise (storage_problem(db_path, exc) or exc) from None
    try:
        for hook in list(_writer_hooks):
            hook(db_path)
        yield
    except VaultPathError:
        # Not a vault after all (DuckDB refused the file): leave no folder beside it.
        mark.unlink(missing_ok=True)
        if created:
            with suppress(OSError):
                folder.rmdir()
        raise
    finally:
        mark.unlink(missing_ok=True)


def writer_waiting(db_path: str | Path) -> bool:
    """Whether a live process has announced a writer; marks left by dead processes are removed."""
    folder = _intents(Path(db_path))
    try:
        marks = list(folder.iterdir())
    except OSError:
        return False
    for mark in marks:
        try:
            os.kill(int(mark.name.split("-")[0]), 0)
        except ProcessLookupError:
            mark.unlink(missing_ok=True)
            continue
        except (ValueError, PermissionError, OSError):
            pass
        return True
    return False


def connect(
    db_path: str | Path, *, read_only: bool = False, wait_s: float = 120.0, memory: str | None = None
) -> duckdb.DuckDBPyConnection:
    """Open the vault, waiting for another writer to finish instead of failing at once. The one
    place that waits for the vault: the CLI, the Dagster resource and the viewer all come here.

    A read-only open also waits while a writer has announced itself (`writer_intent`). DuckDB's
    memory is `memory`, else the one the address carries (`VaultOptions`), else DEFAULT_MEMORY."""
    from nexus_assets.vault.address import parse_address

    if memory is None and not isinstance(db_path, Path):
        memory = parse_address(db_path).options.memory
    db_path = Path(db_path)
    if read_only and not db_path.exists():
        raise FileNotFoundError(f"no vault at {db_path}; run `nexus sync` first or pass --db")
    check_vault_path(db_path)
    _make_folder(db_path.parent, db_path)
    deadline = time.monotonic() + wait_s
    if read_only:
        while writer_waiting(db_path):
            if time.monotonic() > deadline:
                raise VaultBusy(f"vault {db_path} is being written by a sync; try again when it is done")
            time.sleep(0.05)
    delay = 0.05
    while True:
        try:
            conn = duckdb.connect(str(db_path), read_only=read_only)
            try:
                check_intact(conn, db_path)
                limit_memory(conn, memory)
            except BaseException:
                conn.close()
                raise
            return conn
        except duckdb.ConnectionException:
            # A writer in this same process (a test, a notebook, the viewer beside a sync): DuckDB
            # refuses a handle of another configuration rather than waiting on a lock.
            if time.monotonic() > deadline:
                raise VaultBusy(f"vault {db_path} is being written by this process; try again when it is done") from None
            time.sleep(0.05)
        except duckdb.IOException as exc:
            message = str(exc)
            problem = None if "lock" in message.lower() else storage_problem(db_path, exc)
            if problem is not None:
                raise problem from None
            if "Could not set lock" not in message:
                if "not a valid DuckDB database file" in message:
                    raise VaultPathError(f"{db_path} is not a vault: the file exists, but it is not a DuckDB database") from None
                if any(problem in message for problem in _PATH_PROBLEMS):
                    raise VaultPathError(f"cannot open the vault {db_path}: {message.removeprefix('IO Error: ')}") from None
            if "lock" not in message.lower() or time.monotonic() > deadline:
                if "lock" in message.lower():
                    raise VaultBusy(f"vault {db_path} is locked by another process: {exc}") from None
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


DEFAULT_MEMORY = "512MB"


class VaultConfigError(ValueError):
    """A vault setting from the environment that DuckDB does not accept."""


def limit_memory(conn: duckdb.DuckDBPyConnection, memory: str | None) -> None:
    """DuckDB's own default is 80% of the machine's memory, which it keeps as cache; a bounded pool
    spills large sorts and joins to disk instead, so a sync of a big export stays small."""
    try:
        conn.execute(f"SET memory_limit = '{memory or DEFAULT_MEMORY}'")
    except duckdb.Error as exc:
        raise VaultConfigError(f"NEXUS_VAULT_MEMORY={memory!r} is not a DuckDB memory size such as 512MB: {exc}") from None
