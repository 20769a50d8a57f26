"""The README's and the docs' example blocks are what the commands print (issue 40).

A block rendered from real output follows a marker line, `<!-- example: KIND -->`, where KIND names
the data it runs on: `sample` (the shipped sample data, synced in a folder of its own) or
`first-hour` (the generated export of `test_first_hour.py`). In the block, each `$ nexus …` line
is a command run from that folder, and the lines after it, up to the next `$`, are its output.

When the output changes on purpose (a new extractor keeps other sentences), write the blocks again:
`.venv/bin/python -m nexus_assets_tests.readme_examples --write` — then read the diff.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.project import REPO

README = REPO / "README.md"


def pages() -> list[Path]:
    """Where example blocks live: the README, then the manual's pages."""
    return [README, *sorted((REPO / "docs").glob("*.md"))]
MARKER = re.compile(r"^\s*<!-- example: ([a-z-]+) -->\s*$")


@dataclass(frozen=True)
class Command:
    argv: list[str]
    expected: str


@dataclass(frozen=True)
class Block:
    kind: str
    first_line: int  # 0-based index of the fence's first content line in the README
    last_line: int  # 0-based index of the closing fence
    indent: str
    commands: list[Command]
    page: Path = README


def blocks(kind: str, text: str | None = None) -> list[Block]:
    if text is not None:
        return _blocks(kind, text, README)
    return [b for page in pages() for b in _blocks(kind, page.read_text(encoding="utf-8"), page)]


def _blocks(kind: str, text: str, page: Path) -> list[Block]:
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m or m.group(1) != kind:
            continue
        fence = i + 1
        assert lines[fence].strip() == "```", f"README line {fence + 1}: an example marker must precede a bare ``` fence"
        indent = lines[fence][: len(lines[fence]) - len(lines[fence].lstrip())]
        end = next(j for j in range(fence + 1, len(lines)) if lines[j].strip() == "```")
        commands: list[Command] = []
        for body in (line.removeprefix(indent) for line in lines[fence + 1 : end]):
            if body.startswith("$ nexus "):
                commands.append(Command(shlex.split(body[len("$ nexus "):]), ""))
            else:
                assert commands, f"README line {fence + 2}: an example block starts with a `$ nexus …` line"
                last = commands[-1]
                commands[-1] = Command(last.argv, last.expected + body + "\n")
        found.append(Block(kind, fence + 1, end, indent, commands, page))
    return found


def output(argv: list[str], cwd: Path) -> str:
    done = run_nexus(*argv, cwd=cwd)
    assert done.returncode == 0, f"nexus {' '.join(argv)}: {done.stderr[-2000:]}"
    return "\n".join(line.rstrip() for line in done.stdout.splitlines()) + "\n"


def mismatches(kind: str, cwd: Path) -> list[str]:
    """One message per README command whose printed output differs from the README's."""
    problems = []
    for block in blocks(kind):
        for command in block.commands:
            got = output(command.argv, cwd)
            if got != command.expected:
                problems.append(f"`nexus {shlex.join(command.argv)}` ({block.page.relative_to(REPO)} line {block.first_line + 1}) prints:\n{got}\nthe README shows:\n{command.expected}")
    return problems


def write(kind: str, cwd: Path) -> int:
    """Rewrite the `kind` blocks from what the commands print now; returns how many changed."""
    return sum(_write(kind, cwd, page) for page in pages())


def _write(kind: str, cwd: Path, page: Path) -> int:
    lines = page.read_text(encoding="utf-8").splitlines()
    changed = 0
    for block in reversed(_blocks(kind, "\n".join(lines), page)):
        body = []
        for command in block.commands:
            body.append(f"{block.indent}$ nexus {shlex.join(command.argv)}")
            body += [f"{block.indent}{line}" if line else "" for line in output(command.argv, cwd).splitlines()]
        if lines[block.first_line : block.last_line] != body:
            changed += 1
            lines[block.first_line : block.last_line] = body
    if changed:
        page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return changed


def sample_folder(root: Path) -> Path:
    """The shipped sample data in a folder of its own, laid out as the repository has it, synced
    (with recall) by a bare `nexus sync` run there."""
    for part in ("runs", "topics", "gold"):  # not a vault the checkout may hold
        shutil.copytree(REPO / "data" / part, root / "data" / part)
    done = run_nexus("sync", cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return root


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    from nexus_assets_tests.cli.test_first_hour import first_hour_folder

    with tempfile.TemporaryDirectory() as scratch:
        n = write("sample", sample_folder(Path(scratch) / "sample"))
        n += write("first-hour", first_hour_folder(Path(scratch) / "first-hour"))
    print(f"{n} README example blocks rewritten")
