import json
import os
import subprocess
import sys

import pytest

from nexus_assets.cli import main
from nexus_assets_tests.project import REPO


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture, *argv: str, expect: int = 0):
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == expect, err
    return json.loads(out)


def run_nexus(*argv: str, stdout=subprocess.PIPE, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """The real command in a fresh interpreter, on this checkout's code: exit code and stderr as a shell sees them."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "nexus_assets.cli", *argv],
        stdout=stdout, stderr=subprocess.PIPE, text=True, check=False, env={**os.environ, **(env or {}), "PYTHONPATH": path}, cwd=cwd, timeout=120,
    )
