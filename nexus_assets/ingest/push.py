"""Runs pushed live (issue 42 item 2, docs/agents.md): what an agent hands over is written as a run
file in the Nexus run format under the runs folder first, so the files stay the source of truth
(checksums, drift, forgetting and `verify` work unchanged) and the next sync reads it like any
other run file.

No HTTP here: the API's routes and the MCP `remember` tool call these functions and map the
errors to statuses (`RunClosed` → 409, `RunTooLarge` → 413, `BadPush` → 422, `RunNotFound` → 404).

- **Atomic**: a file is written whole to a temporary name, flushed to disk, then renamed over the
  old one (and the folder flushed), so a kill -9 leaves the old file or the new one, never half;
  a write is acknowledged only after the rename.
- **Idempotent**: every pushed message carries an `id`; a message whose id the run already holds
  adds nothing, so a retried request is harmless. The same id with other content is refused
  (`MessageConflict` → 409), naming the id: the first content is kept, never silently.
- **Named by a plain id**: a run id follows RUN_ID_RULE (`BadPush` → 422 naming the rule).
- **Bounded**: a run file never grows past the reader's own limit (`NEXUS_MAX_RUN_FILE_BYTES`),
  so every file written here can be read back by a sync.
- **One-way**: a CLOSED run refuses appends and changes.
- **One writer at a time** per runs folder (an advisory lock on the folder itself), so two
  appends at once never lose one another, and no request leaves a lock file behind: a refused or
  failed one leaves no file at all.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from nexus_assets.ingest.formats import FormatError
from nexus_assets.ingest.formats import limits as L
from nexus_assets.ingest.formats.nexus import nexus_run

# Pushed runs live in their own folder under the runs folder: a person sees what came from agents.
PUSHED_FOLDER = "pushed"
# What a pushed run may be called: a file name on every system once ':' is hashed away (below).
RUN_ID_RULE = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
_RUN_ID = re.compile(RUN_ID_RULE)
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_MAX_ID = 256  # a message id


class PushError(ValueError):
    """A push that was refused; nothing was written. The message says what to change."""


class BadPush(PushError):
    pass


class RunClosed(PushError):
    pass


class RunTooLarge(PushError):
    pass


class RunNotFound(PushError):
    pass


class MessageConflict(PushError):
    """A message id the run holds, pushed again with other content: the first content is kept."""


@dataclass(frozen=True)
class PushResult:
    run_id: str
    status: str
    messages: int  # messages the run holds now
    added: int  # messages this push added (0 for a retry)
    created: bool  # the run file did not exist before
    path: Path


def max_run_bytes() -> int:
    """The reader's default limit for one run file (NEXUS_MAX_RUN_FILE_BYTES unset): nothing is
    written that a sync could not read. The entry point passes the limit in effect as `max_bytes`."""
    return L.DEFAULTS["NEXUS_MAX_RUN_FILE_BYTES"]


def run_path(runs_dir: Path, run_id: str) -> Path:
    """Where a pushed run's file is. An id is checked against RUN_ID_RULE first (so none can reach
    outside the folder); one with ':' (not a file name everywhere) is named by its hash."""
    _check_run_id(run_id)
    name = run_id if _PLAIN_NAME.match(run_id) else "run-" + hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:40]
    return runs_dir / PUSHED_FOLDER / f"{name}.json"


def put_run(runs_dir: Path, run_id: str, document: Any, *, max_bytes: int | None = None) -> PushResult:
    """Write a whole run (PUT). The same run again is a no-op; a CLOSED run is never replaced."""
    if not isinstance(document, dict):
        raise BadPush(f"a run is a JSON object, not {type(document).__name__}")
    if document.get("run_id", run_id) != run_id:
        raise BadPush(f"the body's run_id {document.get('run_id')!r} is not the run_id of the address, {run_id!r}")
    document = {**document, "run_id": run_id}
    _check_run(document)
    path = run_path(runs_dir, run_id)
    with _locked(runs_dir):
        old = _read(path)
        if old is not None and old == document:
            return _result(old, 0, False, path)
        if old is not None and old.get("status") == "CLOSED":
            raise RunClosed(f"run {run_id!r} is CLOSED; a closed run never changes")
        _write(path, document, max_bytes)
        return _result(document, len(document["messages"]), old is None, path)


def append_messages(runs_dir: Path, run_id: str, messages: Any, *, max_bytes: int | None = None) -> PushResult:
    """Append messages to an OPEN run (created OPEN if it does not exist yet). Each message is
    `{id, role, content, name?, timestamp?}` (`name`: who said it); one whose id the run holds
    already adds nothing."""
    path = run_path(runs_dir, run_id)
    new = _checked_messages(messages)
    with _locked(runs_dir):
        old = _read(path)
        if old is not None and old.get("status") == "CLOSED":
            raise RunClosed(f"run {run_id!r} is CLOSED; it takes no more messages")
        document = old or {"run_id": run_id, "status": "OPEN", "messages": []}
        held = {m.get("id"): m for m in document["messages"] if isinstance(m, dict)}
        fresh = []
        for message in new:
            first = held.get(message["id"])
            if first is None:
                held[message["id"]] = message
                fresh.append(message)
            elif _said(first) != _said(message):
                raise MessageConflict(
                    f"message id {message['id']!r} is already in run {run_id!r} with other content; the first is kept: "
                    "a message is never changed, so give a new message a new id"
                )
        if not fresh and old is not None:
            return _result(old, 0, False, path)
        document = {**document, "messages": [*document["messages"], *fresh]}
        if "started_at" not in document and fresh and fresh[0].get("timestamp") is not None:
            document["started_at"] = fresh[0]["timestamp"]
        _check_run(document)
        _write(path, document, max_bytes)
        return _result(document, len(fresh), old is None, path)


def close_run(runs_dir: Path, run_id: str) -> PushResult:
    """Mark a pushed run CLOSED (one-way; closing a closed run changes nothing)."""
    path = run_path(runs_dir, run_id)
    if not path.is_file():  # asked before locking, so a refused close makes nothing (not even the folder)
        raise RunNotFound(f"no pushed run {run_id!r} under {runs_dir}")
    with _locked(runs_dir):
        old = _read(path)
        if old is None:
            raise RunNotFound(f"no pushed run {run_id!r} under {runs_dir}")
        if old.get("status") == "CLOSED":
            return _result(old, 0, False, path)
        document = {**old, "status": "CLOSED"}
        # Closing never fails on size: only "OPEN" becomes "CLOSED".
        _write(path, document, None, closing=True)
        return _result(document, 0, False, path)


def _check_run_id(run_id: Any) -> None:
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        shown = repr(run_id[:60] + ("…" if len(run_id) > 60 else "")) if isinstance(run_id, str) else type(run_id).__name__
        raise BadPush(
            f"run_id {shown} is not allowed: a run id is 1 to 128 characters, letters A-Z a-z, digits and . _ : - , "
            f"starting with a letter or digit ({RUN_ID_RULE})"
        )


def _said(message: dict) -> tuple:
    """What makes two messages with one id the same message: who said what (a retry may add a timestamp)."""
    return (message.get("role"), message.get("content"), message.get("name"))


def _check_run(document: dict) -> None:
    """Refused unless the run reader would take every message of it: what is written is read back whole."""
    try:
        run = nexus_run(document)
    except FormatError as exc:
        raise BadPush(str(exc)) from None
    if run.warnings:
        raise BadPush(f"{run.warnings[0]}; fix that message and push again")


def _checked_messages(messages: Any) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise BadPush("messages must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadPush(f"messages[{i}] is not an object")
        mid = m.get("id")
        if not isinstance(mid, str) or not mid.strip() or len(mid) > _MAX_ID:
            raise BadPush(f"messages[{i}] needs an 'id' string (1 to {_MAX_ID} characters): it is what makes a retry add nothing")
        if not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise BadPush(f"messages[{i}] needs 'role' and 'content' strings")
        if m.get("name") is not None and (not isinstance(m["name"], str) or not m["name"].strip()):
            raise BadPush(f"messages[{i}] 'name' (who said it) must be a non-empty string")
        out.append(dict(m))
    return out


def _result(document: dict, added: int, created: bool, path: Path) -> PushResult:
    return PushResult(document["run_id"], document["status"], len(document["messages"]), added, created, path)


def _read(path: Path) -> dict | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise PushError(f"{path} is not a readable run file; move it away before pushing to this run") from None
    if not isinstance(document, dict) or not isinstance(document.get("messages"), list):
        raise PushError(f"{path} is not a Nexus run; move it away before pushing to this run")
    return document


def _write(path: Path, document: dict, max_bytes: int | None, *, closing: bool = False) -> None:
    data = json.dumps(document, ensure_ascii=False, indent=1).encode("utf-8")
    limit = max_run_bytes() if max_bytes is None else max_bytes
    if len(data) > limit and not closing:
        raise RunTooLarge(
            f"run {document['run_id']!r} would be {len(data)} bytes, over the {limit}-byte limit for one run file "
            "(NEXUS_MAX_RUN_FILE_BYTES); close it and push to a new run"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    # The rename itself is durable only once the folder is flushed.
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


@contextmanager
def _locked(runs_dir: Path) -> Iterator[None]:
    """One writer at a time across threads and processes: an advisory lock on the runs folder
    itself (a folder can be locked like a file), so no lock file is left beside the runs. Only a
    push that was checked and may write gets here; it makes the runs folder if there is none."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    folder = os.open(runs_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # closing the descriptor releases the lock
