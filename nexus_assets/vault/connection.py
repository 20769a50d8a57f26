"""The one way into the vault's DuckDB file: waiting for other writers, announcing ours, and the
connection settings every handle gets."""

from __future__ import annotations

import os
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


def check_vault_path(db_path: Path) -> None:
    """Refuse, before anything is created beside it, a path that cannot be a vault file."""
    if db_path.is_dir():
        raise VaultPathError(f"vault path {db_path} is a folder, not a vault file")
    if db_path.exists() and not db_path.is_file():
        raise VaultPathError(f"vault path {db_path} is not a regular file")


def _make_folder(folder: Path, db_path: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        verb = "open" if db_path.exists() else "create"
        raise VaultPathError(f"cannot {verb} the vault {db_path}: cannot make the folder {exc.filename or folder} ({exc.strerror or exc})") from None


def _intents(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".writers")


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
    mark.touch()
    try:
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


def connect(db_path: str | Path, *, read_only: bool = False, wait_s: float = 120.0) -> duckdb.DuckDBPyConnection:
    """Open the vault, waiting for another writer to finish instead of failing at once. The one
    place that waits for the vault: the CLI, the Dagster resource and the viewer all come here.

    A read-only open also waits while a writer has announced itself (`writer_intent`)."""
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
            return duckdb.connect(str(db_path), read_only=read_only)
        except duckdb.ConnectionException:
            # A writer in this same process (a test, a notebook, the viewer beside a sync): DuckDB
            # refuses a handle of another configuration rather than waiting on a lock.
            if time.monotonic() > deadline:
                raise VaultBusy(f"vault {db_path} is being written by this process; try again when it is done") from None
            time.sleep(0.05)
        except duckdb.IOException as exc:
            message = str(exc)
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
