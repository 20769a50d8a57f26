import json

import pytest

from nexus_assets.cli import main


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture, *argv: str, expect: int = 0):
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == expect, err
    return json.loads(out)
