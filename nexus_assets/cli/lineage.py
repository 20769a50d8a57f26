"""`nexus lineage BRICK_ID` (backwards: file → run version → extraction/LLM call → occurrence → brick
→ manifests) and `nexus lineage --run RUN_ID | --file PATH` (forwards: what `forget` would remove)."""

from __future__ import annotations

import argparse

from nexus_assets.cli.common import UsageError, emit, open_vault
from nexus_assets.cli.forget import _describe_plan
from nexus_assets.services.queries import lineage_of
from nexus_assets.cli.parsing import Commands


def cmd_lineage(args: argparse.Namespace) -> int:
    from nexus_assets.services.forgetting import ForgetError, forward_lineage

    given = [x for x in (args.brick_id, args.run, args.file) if x]
    if len(given) != 1:
        raise UsageError("give exactly one of BRICK_ID, --run RUN_ID or --file PATH")
    with open_vault(args) as vault:
        if args.brick_id:
            from nexus_assets.schemas import Lineage

            data = Lineage.model_validate(lineage_of(vault, args.brick_id)).model_dump(mode="json")
        else:
            try:
                data = {"direction": "forwards", **forward_lineage(vault, run_id=args.run, file=args.file)}
            except ForgetError as exc:
                raise UsageError(str(exc)) from None
    if data["direction"] == "forwards":
        emit(args, data, "\n".join(_describe_plan(data)))
        return 0
    b = data["brick"]
    lines = [f"brick {b['brick_id']} [{b['state']}] in {b['topic_id']}{' (sealed)' if data['sealed'] else ''}"]
    for s in data["sources"]:
        ext = s["extraction"]
        lines.append(
            f"  {'canonical' if s['canonical'] else 'linked'} source: file {s['file']} (sha256 {str(s['file_sha256'])[:16]}…) → "
            f"run {s['run_id']} version {str(s['run_version'])[:12]} → extraction by {ext['extractor']}"
            + (f" (LLM calls {', '.join(c['call_key'][:12] + ' ' + c['model'] + ' ' + c['prompt_version'] for c in s['llm_calls'])})" if s["llm_calls"] else "")
            + f" → pointer {s['pointer']['json_path']} → occurrence [{s['occurrence']['start']}:{s['occurrence']['end']}]"
        )
    lines += [f"  manifest #{m['seq']} {m['manifest_hash'][:16]}{' sealed' if m['sealed'] else ''}: position {m['order_index']}" for m in data["manifests"]]
    lines.append(f"  answers citing it: {len(data['answers'])}")
    emit(args, data, "\n".join(lines))
    return 0


def register(commands: Commands) -> None:
    p = commands.add("lineage", cmd_lineage, help="a brick's lineage backwards, or a run's or file's forwards")
    p.add_argument("brick_id", nargs="?", help="a brick id or unique prefix (backwards)")
    p.add_argument("--run", help="everything derived from this run (forwards)")
    p.add_argument("--file", help="everything derived from the runs of this run file (forwards)")
