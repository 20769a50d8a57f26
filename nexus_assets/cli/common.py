"""What every `nexus` command shares: usage errors, output, opening the vault."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from nexus_assets.dagster_home import project_dagster_home  # noqa: F401 (the CLI's commands import it from here)
from nexus_assets.settings import (  # noqa: F401 (DEFAULT_DB: the CLI imports it from here)
    DEFAULT_DB,
    DEFAULT_RUNS_DIR,
    DEFAULT_TOPICS_DIR,
    Basics,
)
from nexus_assets.vault.address import VaultAddress, is_postgres, parse_address, vault_exists  # noqa: F401 (the CLI's commands import it from here)
from nexus_assets.catalog import Catalog
from nexus_assets.core.display import json_for_terminal, visible

COMPILED_STATES = ("ACTIVE", "SEALING")


class UsageError(Exception):
    """Bad usage or input: exit 2 with the message."""


def emit(args: argparse.Namespace, data: Any, text: str | None = None) -> None:
    """--json: the exact data; otherwise the text for a person, its control characters shown, never obeyed."""
    if args.json:
        print(json_for_terminal(json.dumps(data, indent=2, ensure_ascii=False, default=str)))
    elif text is not None:
        print(visible(text))


def one_line(text: str, width: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _existing(args: argparse.Namespace, create: bool) -> VaultAddress:
    """The vault's address as the command was given it, with this process's options (memory, pool)."""
    address = parse_address(args.db)
    if address.is_postgres:
        return address  # a database, not a file: opening it makes its tables if it has none
    if not create and not address.path.exists():
        raise UsageError(f"no vault at {address.path}; run `nexus sync` first, or pass --db PATH")
    return address


def open_vault(args: argparse.Namespace, *, write: bool = False, create: bool = False):
    """The vault; only commands that build it (sync, discover, activate) may create the file."""
    # Loaded here, not at the top: `Vault` brings the models (pydantic), which `nexus topics` never needs.
    from nexus_assets.store import Vault

    db = _existing(args, create)
    if create and not db.is_postgres and not db.path.exists():
        # A mistyped --db must not pass as a sync into the vault meant: say a new one was made, and where.
        path = db.path
        folder = "" if path.parent.exists() else f", and the folder {path.parent} for it"
        return _announced(Vault.open(db, read_only=not write), f"nexus: created a new vault at {path}{folder}")
    return Vault.open(db, read_only=not write)


@contextmanager
def _announced(opened, message: str):
    with opened as vault:
        print(message, file=sys.stderr, flush=True)
        yield vault


def open_catalog(args: argparse.Namespace):
    """The vault for a command that only lists what it holds (plain rows, no models)."""
    return Catalog.open(_existing(args, False), read_only=True)


DEFAULT_DIRS = {"runs_dir": DEFAULT_RUNS_DIR, "topics_dir": DEFAULT_TOPICS_DIR}


def resolve_dirs(args: argparse.Namespace, basics: Basics) -> None:
    """Fill --runs-dir/--topics-dir not given: the environment, else the directories the vault
    was last synced from (invariant 13), else ./data. An explicit flag always wins."""
    wanted = [name for name in DEFAULT_DIRS if hasattr(args, name) and getattr(args, name) is None]
    recorded: dict[str, str] = {}
    pending = [n for n in wanted if not getattr(basics, n)]
    if pending and (is_postgres(args.db) or Path(args.db).exists()):
        try:
            with Catalog.open(args.db, read_only=True) as vault:
                recorded = vault.recorded_sources()
        except duckdb.Error:
            # A process that has written the file cannot also open it read-only; read it read-write.
            with Catalog.open(args.db) as vault:
                recorded = vault.recorded_sources()
    origins = getattr(args, "dir_origins", {})
    for name in wanted:
        if getattr(basics, name):
            origins[name] = f"NEXUS_{name.upper()}"
        elif recorded.get(name):
            origins[name] = f"recorded in the vault {args.db}"
        else:
            origins[name] = "the default"
        setattr(args, name, getattr(basics, name) or recorded.get(name) or DEFAULT_DIRS[name])
    for name in DEFAULT_DIRS:
        if hasattr(args, name) and name not in origins:
            origins[name] = f"--{name.replace('_', '-')}"
    args.dir_origins = origins


def shown_path(path: str | Path) -> str:
    """A path as a person would type it here: relative to the working directory when below it."""
    absolute = Path(path).resolve()
    try:
        return str(absolute.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(absolute)


def folders_note(args: argparse.Namespace) -> str | None:
    """Which runs and topics folders a command reads, when they are not ./data/runs and ./data/topics
    and no flag named them (the vault or the environment chose): one line, so a person never syncs
    another folder unawares."""
    parts = []
    for name, what in (("runs_dir", "runs"), ("topics_dir", "topics")):
        value = getattr(args, name, None)
        origin = getattr(args, "dir_origins", {}).get(name, "--")
        if value is not None and not origin.startswith("--") and Path(value).resolve() != Path(DEFAULT_DIRS[name]).resolve():
            parts.append(f"{what} from {shown_path(value)} ({origin})")
    return f"reading {' and '.join(parts)}" if parts else None


def require_folder(path: Path, what: str, flag: str) -> Path:
    """A --runs-dir/--topics-dir that must be an existing folder; exit 2 naming what is wrong."""
    if not path.exists():
        raise UsageError(f"{what} folder {path} does not exist; pass {flag}")
    if not path.is_dir():
        kind = "a file, not a folder" if path.is_file() else "not a folder"
        raise UsageError(f"{what} folder {path} is {kind}; pass {flag}")
    return path


def require_topic(vault: Catalog, topic_id: str) -> None:
    if vault.topic_state(topic_id) is None:
        known = ", ".join(t["topic_id"] for t in vault.topic_summaries()) or "none"
        raise UsageError(f"unknown topic {topic_id!r}; topics in the vault: {known}")


def require_brick(vault, prefix: str) -> str:
    """The one brick id `prefix` names (a unique prefix is enough); the query's NotFound or
    BadQuery says why not (exit 2, as every usage error)."""
    from nexus_assets.services.queries import find_brick

    return find_brick(vault, prefix)


def settings_of(args: argparse.Namespace):
    """This command's `Settings` (nexus_assets/settings.py): made once, when the command first asks
    (a command that never asks never loads pydantic), and handed to what it calls."""
    made = getattr(args, "settings", None)
    if made is None:
        from nexus_assets import settings

        made = args.settings = settings.load()
    return made
