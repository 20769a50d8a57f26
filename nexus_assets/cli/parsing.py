"""What the command modules share to declare their subcommands: the argument types, the common
flags, and `Commands`, through which each module adds its parser with a direct reference to its
handler (`register` in each command module; `nexus_assets/cli/__init__.py` lists them in order).

Only argparse and the light vault address parser load here: every command module is imported to
build the parser, so each imports what its handler needs inside the handler (docs/extending.md).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable, Mapping

from nexus_assets.settings import Basics
from nexus_assets.vault.address import parse_address

RUNS_HELP = "default: $NEXUS_RUNS_DIR, else the vault's recorded one, else data/runs"
TOPICS_HELP = "default: $NEXUS_TOPICS_DIR, else the vault's recorded one, else data/topics"

Handler = Callable[[argparse.Namespace], int]


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (argparse exits 2 otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def bounded(low: int, high: int):
    """An argparse type: a whole number from `low` to `high`. A command passes the numbers its
    service's request declares (services/requests.py; the numbers are read from core/bounds.py so
    that building the parser loads no pydantic), and then builds that request with `request_of`."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    return whole


def request_of(model: type, names: Mapping[str, str], **values: Any):
    """The service's typed request (services/requests.py) from a command's arguments: its bounds are
    the API's and the MCP tools'. A value out of them is one line naming it with `names` (a field's
    name as the command calls it), exit 2, as every usage error."""
    from pydantic import ValidationError

    from nexus_assets.cli.common import UsageError

    try:
        return model(**values)
    except ValidationError as exc:
        raise UsageError(_out_of_bounds(exc.errors()[0], names)) from None


def _out_of_bounds(error: Mapping[str, Any], names: Mapping[str, str]) -> str:
    field = str(error["loc"][0]) if error["loc"] else "arguments"
    what, got, ctx = names.get(field, field), error.get("input"), error.get("ctx") or {}
    if error["type"] == "string_unicode" and len(error["loc"]) == 1:  # a shell passed bytes that are not UTF-8
        from nexus_assets.core.utf8 import utf8_problem

        return f"the {what} is {utf8_problem(got)}; pass it as UTF-8 text"
    if error["type"] == "string_too_long" and len(error["loc"]) == 1:
        return f"the {what} is {len(got)} characters; at most {ctx['max_length']} are taken"
    if error["type"] == "string_too_short" and len(error["loc"]) == 1:
        return f"give a {what}"
    if error["type"] == "too_long":
        return f"{len(got)} {what} given; at most {ctx['max_length']} are taken"
    return f"{what}: {error['msg'][:1].lower()}{error['msg'][1:]}"


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number of at least 0 (argparse exits 2 otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of at least 0, got {text}")
    return value


def who_and_when(p: argparse.ArgumentParser) -> None:
    p.add_argument("--speaker", help="only bricks said by this speaker (a name, or a role such as user)")
    p.add_argument("--since", help="only bricks said on or after this day (YYYY-MM-DD)")
    p.add_argument("--until", help="only bricks said on or before this day (YYYY-MM-DD)")


def vault_flag(p: argparse.ArgumentParser) -> None:
    """`--db` on a command without the common flags (the servers)."""
    p.add_argument("--db", default=argparse.SUPPRESS, type=parse_address, help="vault file")


def runs_dir_flag(p: argparse.ArgumentParser) -> None:
    # None: filled by resolve_dirs (the environment, else the vault's recorded directory, else ./data).
    p.add_argument("--runs-dir", default=None, help=RUNS_HELP)


def topics_dir_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topics-dir", default=None, help=TOPICS_HELP)


def common_flags() -> argparse.ArgumentParser:
    """The flags every reading command takes (`--json`, `--db` after the command name)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--db", default=argparse.SUPPRESS, type=parse_address, help="vault file")
    return common


class Commands:
    """The `nexus` subcommands being declared: `add` makes one subparser whose handler is the
    function itself, so an editor's find-references leads from a command to its parser."""

    def __init__(self, sub: Any, basics: Basics) -> None:
        self.sub = sub
        self.basics = basics  # the defaults read from the environment (NEXUS_EXTRACTOR, ...)
        self.common = common_flags()

    def add(self, name: str, handler: Handler, *, help: str, common: bool = True, sub: Any = None) -> argparse.ArgumentParser:
        p = (sub or self.sub).add_parser(name, parents=[self.common] if common else [], help=help)
        p.set_defaults(handler=handler)
        return p
