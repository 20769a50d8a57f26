"""`nexus verify`: re-read every source, prove every manifest chain and every sealed brick."""

from __future__ import annotations

import argparse

from nexus_assets.cli.common import emit, open_vault
from nexus_assets.cli.forget import unfinished_line
from nexus_assets.drift.step import DriftCheck, file_drift, record_drift
from nexus_assets.forget.step import pending_erasure
from nexus_assets.lifecycle.step import immutability_problems
from nexus_assets.publish.manifest import chain_problems


def cmd_verify(args: argparse.Namespace) -> int:
    with open_vault(args, write=True) as vault:
        bricks = vault.bricks.select()
        check = DriftCheck(frozenset(a for b in bricks for a in b.sources), tuple(file_drift(vault, bricks)))
        record_drift(vault, check, observed_by="nexus verify")
        drifts = list(check.drifts)
        # Stale as recorded now, so verify, bricks, trace, the viewer and the check say the same.
        stale = vault.drift.stale_brick_ids()
        unfinished = pending_erasure(vault, args.db)
        chain, final = [], []
        for t in vault.topics.all():
            chain += chain_problems(vault.bricks.manifests(t.topic_id))
            final += immutability_problems(vault, t.topic_id, with_chain=False)
    data = {
        # A brick is stale by its canonical source (invariant 14); an unfinished forget may leave text behind (15).
        "ok": not stale and not chain and not final and unfinished is None,
        "bricks_checked": len(bricks),
        "sources_checked": sum(len(b.sources) for b in bricks),
        "drift": [
            {"brick_id": d.brick_id, "topic_id": d.topic_id, **d.address.model_dump(), "problem": d.problem} for d in drifts
        ],
        "stale_bricks": stale,
        "chain_problems": chain,
        "immutability_problems": final,
        "unfinished_forget": unfinished_line(unfinished) if unfinished else None,
    }
    lines = [f"checked {data['sources_checked']} source addresses of {len(bricks)} bricks"]
    lines += [f"DRIFT {d.brick_id[:12]} ({d.topic_id}): {d.problem}" for d in drifts]
    lines += [f"CHAIN {p}" for p in chain]
    lines += [f"FINAL {p}" for p in final]
    lines += [f"FORGET {unfinished_line(unfinished)}"] if unfinished else []
    lines.append(
        "ok"
        if data["ok"]
        else f"{len(data['stale_bricks'])} stale bricks, {len(chain)} manifest chain problems, {len(final)} FINAL brick problems"
        + (", 1 unfinished forget" if unfinished else "")
    )
    emit(args, data, "\n".join(lines))
    return 0 if data["ok"] else 1
