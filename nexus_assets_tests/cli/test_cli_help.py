"""Every `nexus` command's help, flags and usage errors, pinned: moving how the parser is wired
(each command module registers its own subcommand) must not change a byte a person or a script sees.

After an intended change: `.venv/bin/python -m pytest nexus_assets_tests/test_cli_help.py --snapshot-update`.
"""

import pytest

from nexus_assets.cli import main

COMMANDS = (
    "sync plan calls topics bricks rejections conflicts manifest trace explain verify errors close discover "
    "activate seal eval recall ask audit lineage forget keep drop search export api mcp serve vault"
).split()

# Wrong usage of each kind argparse checks: no command, an unknown one, a bad choice, a bad
# number, a missing argument, a missing required option, a nested command left out.
MISUSE = (
    (),
    ("frobnicate",),
    ("sync", "--extractor", "nope"),
    ("sync", "--parallel", "0"),
    ("sync", "--max-cost", "-1"),
    ("recall", "x", "--k", "0"),
    ("search", "x", "--limit", "many"),
    ("bricks",),
    ("forget", "--run", "r"),
    ("export", "t"),
    ("vault",),
    ("vault", "copy", "a"),
)


def _run(argv, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return f"$ nexus {' '.join(argv)}\nexit {code}\n--- stdout\n{out}--- stderr\n{err}"


@pytest.mark.parametrize("argv", [("--help",), *[(c, "--help") for c in COMMANDS], ("vault", "copy", "--help")], ids=" ".join)
def test_every_help_is_unchanged(argv, capsys, monkeypatch, snapshot):
    assert _run(argv, capsys, monkeypatch) == snapshot


@pytest.mark.parametrize("argv", MISUSE, ids=lambda a: " ".join(a) or "nothing")
def test_every_usage_error_is_unchanged(argv, capsys, monkeypatch, snapshot):
    assert _run(argv, capsys, monkeypatch) == snapshot
