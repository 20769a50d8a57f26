"""`nexus verify`: re-read every source, prove every manifest chain and every sealed brick."""

from __future__ import annotations

import argparse

from nexus_assets.cli.common import emit, open_vault
from nexus_assets.cli.forget import unfinished_line
from nexus_assets.cli.parsing import Commands


def cmd_verify(args: argparse.Namespace) -> int:
    from nexus_assets.services.verifying import verify

    with open_vault(args, write=True) as vault:
        found = verify(vault, args.db)
    drifts, by_run, unfinished = found.drifts, found.drift_by_run, found.unfinished_forgets
    chain, final = found.chain_problems, found.immutability_problems
    data = {
        "ok": found.ok,
        "bricks_checked": found.bricks,
        "sources_checked": found.sources,
        "drift": [
            {"brick_id": d.brick_id, "topic_id": d.topic_id, **d.address.model_dump(), "problem": d.problem} for d in drifts
        ],
        # The same drift, one entry per conversation: an edit usually moves every address of a message.
        "drift_by_run": by_run,
        "stale_bricks": found.stale_bricks,
        "chain_problems": chain,
        "immutability_problems": final,
        "unfinished_forget": unfinished_line(unfinished[0]) if unfinished else None,  # the oldest
        "unfinished_forgets": [unfinished_line(u) for u in unfinished],
    }
    lines = [f"checked {data['sources_checked']} source addresses of {found.bricks} bricks"]
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


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"


def register(commands: Commands) -> None:
    commands.add("verify", cmd_verify, help="re-check sources against run files, manifest chains and sealed (FINAL) bricks")
