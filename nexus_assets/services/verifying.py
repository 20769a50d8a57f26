"""`nexus verify` as a service: every source re-read (each flip recorded), every manifest chain
and every sealed brick proved, and the forgets left unfinished. The CLI prints what it finds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nexus_assets.drift.step import Drift, DriftCheck, file_drift, record_drift
from nexus_assets.forget.step import pending_erasures
from nexus_assets.lifecycle.step import immutability_problems
from nexus_assets.publish.manifest import chain_problems
from nexus_assets.store import Vault


@dataclass(frozen=True)
class Verification:
    bricks: int
    sources: int
    drifts: list[Drift]
    drift_by_run: list[dict]
    stale_bricks: list[str]
    chain_problems: list[str]
    immutability_problems: list[str]
    unfinished_forgets: list[dict]  # journals of erasures committed but not finished, oldest first

    @property
    def ok(self) -> bool:
        # A brick is stale by its canonical source (invariant 14); an unfinished forget may leave text behind (15).
        return not self.stale_bricks and not self.chain_problems and not self.immutability_problems and not self.unfinished_forgets


def verify(vault: Vault, db: str | Path) -> Verification:
    """Re-read every source of every brick and record what flipped, as `nexus verify` always has."""
    bricks = vault.bricks.select()
    check = DriftCheck(frozenset(a for b in bricks for a in b.sources), tuple(file_drift(vault, bricks)))
    record_drift(vault, check, observed_by="nexus verify")
    drifts = list(check.drifts)
    # Stale as recorded now, so verify, bricks, trace, the viewer and the check say the same.
    stale = vault.drift.stale_brick_ids()
    unfinished = pending_erasures(vault, db)
    chain, final = [], []
    for t in vault.topics.all():
        chain += chain_problems(vault.bricks.manifests(t.topic_id))
        final += immutability_problems(vault, t.topic_id, with_chain=False)
    names = vault.runs.run_names(d.address.run_id for d in drifts)
    return Verification(
        bricks=len(bricks), sources=sum(len(b.sources) for b in bricks), drifts=drifts,
        drift_by_run=drift_by_run(drifts, names), stale_bricks=stale, chain_problems=chain,
        immutability_problems=final, unfinished_forgets=unfinished,
    )


def drift_by_run(drifts: list, names: dict) -> list[dict]:
    """Drifted addresses grouped by run: how many addresses, messages, bricks and topics each
    conversation's change touched, and its problems (each said once)."""
    runs: dict[str, dict] = {}
    for d in drifts:
        run_id = d.address.run_id
        name = names.get(run_id)
        entry = runs.setdefault(
            run_id,
            {"run_id": run_id, **(name.as_json() if name else {"run_title": None, "run_date": None}),
             "label": name.label if name else run_id, "sources": 0, "messages": set(), "bricks": [], "topics": [], "problems": []},
        )
        entry["sources"] += 1
        entry["messages"].add(d.address.json_path)
        for key, value in (("bricks", d.brick_id), ("topics", d.topic_id), ("problems", d.problem)):
            if value not in entry[key]:
                entry[key].append(value)
    return [{**e, "messages": len(e["messages"])} for _, e in sorted(runs.items())]
