"""Forgetting, as every shell does it (CLI `nexus forget`, the MCP `forget` tool): one service, so
no shell can skip a step (invariant 15; docs/architecture.md: the shells parse and print).

Before anything new is forgotten, every erasure an earlier forget committed but did not finish
(killed after its commit: the text may still be in the vault's freed blocks, its indexes, Dagster's
storage, or a file asked to be deleted) is finished first, each from its own journal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nexus_assets.forget.step import (
    ForgetError, crash_point, erase, find_target, finish_erasure, pending_erasures, plan, tombstone_manifests,
)
from nexus_assets.store import Vault


@dataclass
class ForgetOutcome:
    planned: dict | None = None  # without confirm: what would be removed (None when only unfinished work was asked for)
    pending: list[dict] = field(default_factory=list)  # erasures found unfinished, oldest first
    finished: list[dict] = field(default_factory=list)  # their reports, when confirmed
    report: dict | None = None  # this forget's report, when confirmed

    @property
    def changed(self) -> bool:
        return bool(self.finished) or self.report is not None

    @property
    def last_report(self) -> dict | None:
        """This forget's report, else the last finished one's (a re-run that only finished one)."""
        return self.report or (self.finished[-1] if self.finished else None)


def forward_lineage(vault: Vault, *, run_id: str | None = None, file: str | None = None) -> dict:
    """`nexus lineage --run | --file`: everything forgetting the run or file would remove or change.
    ForgetError when the vault holds nothing of it."""
    return plan(vault, find_target(vault, run_id=run_id, file=file))


def forget_source(
    db: str | Path,
    *,
    run_id: str | None = None,
    file: str | None = None,
    reason: str,
    actor: str,
    confirm: bool,
    delete_file: bool = False,
) -> ForgetOutcome:
    """Forget a run or every run of a file: without `confirm` only the plan (nothing changes); with
    it, unfinished erasures first, then this one. Asking again for a source whose forget was
    interrupted finishes that one. ForgetError for bad usage (nothing changed)."""
    if bool(run_id) == bool(file):
        raise ForgetError("give exactly one of a run id or a file")
    if not reason or not reason.strip():
        raise ForgetError("a reason is required: it is recorded in the tombstone")
    # Read-write only to plan: a confirmed forget opens the vault itself, for writing.
    with Vault.open(db, read_only=confirm) as vault:
        pending = pending_erasures(vault, db)
        try:
            target = find_target(vault, run_id=run_id, file=file)
        except ForgetError:
            # "Already forgotten" by a forget that was interrupted: asking again finishes it.
            if not any(_asks_for(p, run_id, file) for p in pending):
                raise
            target = None
        planned = plan(vault, target) if target is not None else None
    if not confirm:
        return ForgetOutcome(planned=planned, pending=pending)
    if target is not None and delete_file and run_id and len(target.files) != 1:
        raise ForgetError("deleting the file of a run needs the run to come from exactly one file")
    finished = [finish_pending(db, p) for p in pending]
    if target is None:
        return ForgetOutcome(pending=pending, finished=finished)
    report = forget(db, target, reason=reason.strip(), actor=actor, delete_file=delete_file)
    return ForgetOutcome(pending=pending, finished=finished, report=report)


def forget(db: str | Path, target, *, reason: str, actor: str, delete_file: bool = False) -> dict:
    """One forget: its journal and the logical erasure in one transaction, then (the vault closed)
    the physical erasure and the proof."""
    with Vault.open(db) as vault:
        journal, removed, manifests = erase(vault, db, target, reason=reason, actor=actor, delete_file=delete_file)
    crash_point("committed")
    return finish_erasure(db, journal, removed=removed, manifests=manifests)


def finish_pending(db: str | Path, journal: dict) -> dict:
    """Finish an erasure an earlier forget committed but did not finish (from its journal)."""
    with Vault.open(db) as vault:
        manifests = tombstone_manifests(vault, journal)
    return finish_erasure(db, journal, manifests=manifests, resumed=True)


def _asks_for(pending: dict, run_id: str | None, file: str | None) -> bool:
    if run_id:
        return run_id in pending["run_ids"]
    return str(Path(file).resolve()) in pending["files"]
