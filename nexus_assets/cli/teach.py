"""`nexus keep BRICK_ID` / `nexus drop BRICK_ID [--reason TEXT]`: parse, call the teaching service
(nexus_assets/services/teaching.py), print. Refused (exit 2, one line) on a sealed topic, an
unknown brick or a topic file that cannot be written."""

from __future__ import annotations

import argparse

from nexus_assets import settings
from nexus_assets.cli.common import UsageError, emit, one_line, open_vault
from nexus_assets.cli.parsing import Commands, topics_dir_flag


def cmd_keep(args: argparse.Namespace) -> int:
    return _teach(args, "keep")


def cmd_drop(args: argparse.Namespace) -> int:
    return _teach(args, "drop")


def _teach(args: argparse.Namespace, verdict: str) -> int:
    from nexus_assets.core.actors import user_actor
    from nexus_assets.services.teaching import TeachingRefused, teach

    with open_vault(args, write=True) as vault:
        try:
            done = teach(
                vault, args.topics_dir, args.brick_id, verdict, reason=getattr(args, "reason", None),
                actor=user_actor(f"nexus {verdict}", settings.user()),
            )
        except TeachingRefused as exc:
            raise UsageError(str(exc)) from None
    said = "kept" if verdict == "keep" else "dropped"
    already = "" if done.file_changed else f" (already a {verdict} example)"
    text = (
        f"{said} {done.brick_id[:12]} of {done.topic_id}{already}: \"{one_line(done.content, 80)}\"; "
        f"{done.topic_file} now has {done.examples['keep']} keep and {done.examples['drop']} drop examples; "
        "the next `nexus sync` selects with them"
    )
    emit(args, done.as_json(), text)
    return 0


def register(commands: Commands) -> None:
    for verdict, handler in (("keep", cmd_keep), ("drop", cmd_drop)):
        doc = f"a person's judgement: the brick's text joins its topic's examples to {verdict}"
        p = commands.add(verdict, handler, help=f"{doc} (the topic file is rewritten, comments kept); the next sync selects with it")
        p.add_argument("brick_id", help="a brick id or unique prefix")
        p.add_argument("--reason", help="why; recorded in the vault's audit trail")
        topics_dir_flag(p)
