"""`nexus eval`: extraction quality against a gold file (docs/quality.md). Read-only: it never writes the
vault, and imports neither Dagster nor the LLM client."""

from __future__ import annotations

import argparse
from pathlib import Path

from nexus_assets.cli.common import UsageError, emit, open_vault, require_topic
from nexus_assets.cli.parsing import Commands


def cmd_eval(args: argparse.Namespace) -> int:
    from nexus_assets.services.evaluation import EvaluationRefused, below, score

    if args.init_gold:
        return _init_gold(args)
    if not args.gold:
        raise UsageError("nexus eval needs --gold PATH (or --init-gold PATH to start a gold file from the current bricks)")
    with open_vault(args) as vault:
        require_topic(vault, args.topic)
        try:
            results = score(vault, args.topic, Path(args.gold), extractor=args.extractor, every=args.extractors)
        except EvaluationRefused as exc:
            raise UsageError(str(exc)) from None
    low = [r for r in results if below(r, args.min_precision, args.min_recall)]
    if args.json:
        emit(args, results if args.extractors else results[0])
    else:
        emit(args, None, "\n\n".join(_text(r, detail=not args.extractors) for r in results))  # quotes gold and brick text
        for r in low:
            print(f"BELOW THRESHOLD: {r['extractor']} overlap precision {r['overlap_precision']:.3f} "
                  f"(min {args.min_precision}), overlap recall {r['overlap_recall']:.3f} (min {args.min_recall})")
    return 1 if low else 0


def _init_gold(args: argparse.Namespace) -> int:
    from nexus_assets.services.evaluation import EvaluationRefused, refuse_existing_gold, write_gold

    path = Path(args.init_gold)
    try:
        refuse_existing_gold(path)  # before the vault is opened, as ever
        with open_vault(args) as vault:
            require_topic(vault, args.topic)
            written = write_gold(vault, args.topic, path)
    except EvaluationRefused as exc:
        raise UsageError(str(exc)) from None
    emit(args, {"gold_file": str(path), "lines": written}, f"wrote {written} gold spans to {path}; edit it by hand")
    return 0


def _row(name: str, f: dict) -> str:
    return (
        f"{name:<34} {f['predicted']:>5} {f['gold']:>5} {f['exact_matches']:>5}  "
        f"{f['exact_precision']:.3f} {f['exact_recall']:.3f} {f['exact_f1']:.3f}  "
        f"{f['overlap_precision']:.3f} {f['overlap_recall']:.3f} {f['overlap_f1']:.3f}"
    )


def _addr(s: dict) -> str:
    return f"  {s['run_id']} {s['json_path']} [{s['start']}:{s['end']}]"


def _text(r: dict, *, detail: bool) -> str:
    lines = [
        f"{r['topic_id']} against {r['gold_file']} ({r['extractor']}); gate acceptance {r['acceptance_rate']:.3f} "
        f"({r['accepted_pointers']} accepted, {r['rejected_pointers']} rejected)",
        f"{'':<34} {'pred':>5} {'gold':>5} {'exact':>5}  {'P':<5} {'R':<5} {'F1':<5}  {'oP':<5} {'oR':<5} {'oF1':<5}",
        _row("all runs", r),
        *(_row(p["run_id"][:34], p) for p in r["per_run"]),
    ]
    if detail:
        lines += [f"misses ({len(r['misses'])}, exact):", *map(_addr, r["misses"])]
        lines += [f"false positives ({len(r['false_positives'])}, exact):", *map(_addr, r["false_positives"])]
    return "\n".join(lines)


def register(commands: Commands) -> None:
    p = commands.add("eval", cmd_eval, help="extraction quality against a gold file: exact and overlap P/R/F1; read-only")
    p.add_argument("topic")
    p.add_argument("--gold", help="gold spans, JSONL: {topic_id, run_id, json_path, start, end} or {…, quote} per line")
    p.add_argument("--init-gold", metavar="PATH", help="write the topic's current bricks as a starting gold file (never overwrites)")
    p.add_argument("--extractor", help="score this extractor identity from the extractions kept in the vault")
    p.add_argument("--extractors", action="store_true", help="score the bricks and every extractor identity seen for the topic")
    p.add_argument("--min-precision", type=float, default=None, help="exit 1 when overlap precision is below this")
    p.add_argument("--min-recall", type=float, default=None, help="exit 1 when overlap recall is below this")
