"""The topic and run lifecycle on the command line: discover, activate, seal, close (docs/cli.md).

Exit codes as everywhere: 0 done; 1 the work ran but was refused (a seal gate, an unusable LLM
reply); 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nexus_assets.vault.address import vault_exists
from nexus_assets import settings
from nexus_assets.cli.common import (
    settings_of,
    UsageError,
    emit,
    open_vault,
    project_dagster_home,
    require_folder,
)
from nexus_assets.cli.parsing import Commands, runs_dir_flag, topics_dir_flag
from nexus_assets.extract.registry import extractor_names


def _dirs(args: argparse.Namespace, *, must_exist: bool = True) -> tuple[Path, Path]:
    topics_dir, runs_dir = Path(args.topics_dir), Path(getattr(args, "runs_dir", "data/runs"))
    if must_exist:
        require_folder(topics_dir, "topics", "--topics-dir")
    return topics_dir, runs_dir


def cmd_discover(args: argparse.Namespace) -> int:
    from nexus_assets.core.actors import user_actor
    from nexus_assets.services.lifecycle import DiscoveryFailed, LifecycleRefused, discover, runs_to_discover

    topics_dir, runs_dir = Path(args.topics_dir), require_folder(Path(args.runs_dir), "runs", "--runs-dir")
    if args.recent < 1 or (args.max is not None and args.max < 1):
        raise UsageError("--recent and --max take a positive number")
    try:
        runs = runs_to_discover(runs_dir, args.recent)
        with open_vault(args, write=True, create=True) as vault:
            report = discover(
                vault, runs, topics_dir, extractor=args.extractor, env=lambda: settings_of(args).as_env(),
                actor=user_actor("nexus discover", settings.user()), max_proposals=args.max,
            )
    except LifecycleRefused as exc:
        raise UsageError(str(exc)) from None
    except DiscoveryFailed as exc:
        print(f"nexus: discover: {exc}", file=sys.stderr)
        return 1
    lines = [f"looked at {report.runs_considered} recent runs ({report.extractor})"]
    if report.runs_covered:
        lines.append(f"{report.runs_covered} of them mention an existing topic's keywords (already covered: those are never proposed again)")
    for w in report.written:
        lines.append(
            f"wrote DRAFT {w['path']}: {w['display_name']} [{', '.join(w['required_keywords'])}]; "
            f"seen in {len(w['evidence'])} of {report.runs_considered} conversations"
        )
    for s in report.skipped:
        lines.append(f"skipped {s['topic_id']}: {s['reason']}")
    if report.written:
        lines.append("review each file, then `nexus activate TOPIC` to compile it")
    else:
        # What it read and what a proposal needs: a bare "nothing" leaves a new user guessing.
        lines.append(f"no new topics to propose; {report.needs['rule']}")
        if report.strongest:
            lines.append(
                f"the new term most conversations are about is {report.strongest['term']!r} "
                f"({report.strongest['conversations']} of {report.runs_considered})"
            )
    emit(args, report.as_dict(), "\n".join(lines))
    return 0


def cmd_activate(args: argparse.Namespace) -> int:
    from nexus_assets.core.actors import user_actor
    from nexus_assets.services.lifecycle import LifecycleRefused, activate

    topics_dir, _ = _dirs(args)
    with open_vault(args, write=True, create=True) as vault:
        try:
            data = activate(vault, topics_dir, args.topic, actor=user_actor("nexus activate", settings.user()))
        except LifecycleRefused as exc:
            raise UsageError(str(exc)) from None
    # Activation makes the topic compilable, so it becomes a partition of the shared instance now.
    if project_dagster_home(args.db, settings.dagster_home()) is not None:
        from nexus_assets.services.sync import (
            dagster_instance,  # Dagster only when there is an instance to tell
        )

        dagster_instance(args.db, [data["topic_id"]])
    if data["previous_state"] == "ACTIVE" and not data["file_rewritten"]:
        text = f"topic {data['topic_id']} was already ACTIVE"
    else:
        text = (
            f"topic {data['topic_id']} is ACTIVE (was {data['previous_state'] or 'unrecorded'})"
            + (f"; {data['file']} now says `state: ACTIVE`" if data["file_rewritten"] else "")
            + f". Compile it with `nexus sync --topic {data['topic_id']}`"
        )
    emit(args, data, text)
    return 0


def cmd_seal(args: argparse.Namespace) -> int:
    from nexus_assets.core.actors import user_actor
    from nexus_assets.services.lifecycle import LifecycleRefused, SealFailed, seal

    topics_dir, runs_dir = _dirs(args, must_exist=False)
    if not vault_exists(args.db):
        raise UsageError(f"no vault at {args.db}; run `nexus sync` first, or pass --db PATH")
    with open_vault(args, write=True) as vault:
        try:
            result, data = seal(vault, args.topic, actor=user_actor("nexus seal", settings.user()), topics_dir=topics_dir, runs_dir=runs_dir)
        except SealFailed as exc:
            emit(args, exc.data)
            print(f"nexus: {exc}", file=sys.stderr)
            return 1
        except LifecycleRefused as exc:
            raise UsageError(str(exc)) from None
    for note in result.notes:
        print(f"warning: {note}", file=sys.stderr)
    if result.already_sealed:
        text = f"topic {result.topic_id} is already LOCKED (sealed manifest {(result.manifest_hash or '-')[:16]}); nothing changed"
    else:
        text = (
            f"sealed {result.topic_id}: {result.bricks} bricks FINAL, order frozen; manifest {result.manifest_hash[:16]}; "
            f"state LOCKED{' (topic file updated)' if result.file_updated else ''}"
        )
    emit(args, data, text)
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    with open_vault(args, write=True) as vault:
        try:
            changed = vault.runs.close_run(args.run_id)
        except KeyError:
            raise UsageError(f"no run {args.run_id!r} in the vault") from None
    emit(
        args,
        {"run_id": args.run_id, "closed": True, "changed": changed},
        f"run {args.run_id} {'closed' if changed else 'was already closed'}; bricks move to FORMING on the next sync",
    )
    return 0


def register_close(commands: Commands) -> None:
    p = commands.add("close", cmd_close, help="close a run (one-way)")
    p.add_argument("run_id")


def register(commands: Commands) -> None:
    """discover, activate and seal (`close` sits with the reading commands in `nexus --help`)."""
    p = commands.add("discover", cmd_discover, help="propose topics from recent runs as DRAFT topic files")
    runs_dir_flag(p)
    topics_dir_flag(p)
    p.add_argument("--extractor", choices=extractor_names(), default=commands.basics.extractor)
    p.add_argument("--recent", type=int, default=200, help="look at this many most recent runs (default 200)")
    p.add_argument("--max", type=int, default=None, help="write at most this many proposals")
    p = commands.add("activate", cmd_activate, help="the human gate: DRAFT → ACTIVE (rewrites the file's state line)")
    p.add_argument("topic")
    topics_dir_flag(p)
    p = commands.add("seal", cmd_seal, help="ACTIVE → LOCKED: every brick FINAL and immutable, once the gates pass")
    p.add_argument("topic")
    runs_dir_flag(p)
    topics_dir_flag(p)
