"""`nexus verify`: re-read every source, prove every manifest chain and every sealed brick."""

from __future__ import annotations

import argparse

from nexus_assets.cli.common import emit, open_vault
from nexus_assets.cli.forget import unfinished_line
from nexus_assets.cli.parsing import Commands


def cmd_verify(args: argparse.Namespace) -> int:
    from nexus_assets.drift.step import DriftCheck, file_drift, record_drift
    from nexus_assets.forget.step import pending_erasures
    from nexus_assets.lifecycle.step import immutability_problems
    from nexus_assets.publish.manifest import chain_problems

    with open_vault(args, write=True) as vault:
        bricks = vault.bricks.select()
        check = DriftCheck(frozenset(a for b in bricks for a in b.sources), tuple(file_drift(vault, bricks)))
        record_drift(vault, check, observed_by="nexus verify")
        drifts = list(check.drifts)
        # Stale as recorded now, so verify, bricks, trace, the viewer and the check say the same.
        stale = vault.drift.stale_brick_ids()
        unfinished = pending_erasures(vault, args.db)
        chain, final = [], []
        for t in vault.topics.all():
            chain += chain_problems(vault.bricks.manifests(t.topic_id))
            final += immutability_problems(vault, t.topic_id, with_chain=False)
        names = vault.runs.run_names(d.address.run_id for d in drifts)
    by_run = drift_by_run(drifts, names)
    data = {
        # A brick is stale by its canonical source (invariant 14); an unfinished forget may leave text behind (15).
        "ok": not stale and not chain and not final and not unfinished,
        "bricks_checked": len(bricks),
        "sources_checked": sum(len(b.sources) for b in bricks),
        "drift": [
            {"brick_id": d.brick_id, "topic_id": d.topic_id, **d.address.model_dump(), "problem": d.problem} for d in drifts
        ],
        # The same drift, one entry per conversation: an edit usually moves every address of a message.
        "drift_by_run": by_run,
        "stale_bricks": stale,
        "chain_problems": chain,
        "immutability_problems": final,
        "unfinished_forget": unfinished_line(unfinished[0]) if unfinished else None,  # the oldest
        "unfinished_forgets": [unfinished_line(u) for u in unfinished],
    }
    lines = [f"checked {data['sources_checked']} source addresses of {len(bricks)} bricks"]
    lines += [
        f"DRIFT {r['label']}: {_n(r['sources'], 'source address', 'source addresses')} in {_n(r['messages'], 'message')}, "
        f"{_n(len(r['bricks']), 'brick')} "
        f"of {', '.join(r['topics'])}: {'; '.join(r['problems'])}"
        for r in by_run
    ]
    lines += [f"CHAIN {p}" for p in chain]
    lines += [f"FINAL {p}" for p in final]
    lines += [f"FORGET {unfinished_line(u)}" for u in unfinished]
    lines.append(
        "ok"
        if data["ok"]
        else f"{len(data['stale_bricks'])} stale bricks, {len(chain)} manifest chain problems, {len(final)} FINAL brick problems"
        + (f", {len(unfinished)} unfinished forget{'s' if len(unfinished) > 1 else ''}" if unfinished else "")
    )
    emit(args, data, "\n".join(lines))
    return 0 if data["ok"] else 1


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


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"


def register(commands: Commands) -> None:
    commands.add("verify", cmd_verify, help="re-check sources against run files, manifest chains and sealed (FINAL) bricks")
