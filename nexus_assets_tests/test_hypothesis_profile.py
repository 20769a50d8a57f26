"""The suite's own footing (issue 44): under CI, Hypothesis has no per-example deadline (two busy
cores measure the neighbours, not the code) and every run prints the seed it used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nexus_assets_tests.project import TESTS

PROBE = '''
from hypothesis import given, settings, strategies as st

def test_profile():
    assert settings.get_current_profile_name() == "{profile}"
    assert settings.default.deadline {deadline}
    assert settings.default.derandomize is False

@given(st.integers())
def test_runs(n):
    pass
'''


def run_probe(tmp_path: Path, profile: str, deadline: str, **env: str) -> subprocess.CompletedProcess:
    """A pytest run of a probe module beside a conftest that is this suite's own."""
    (tmp_path / "conftest.py").write_text("from nexus_assets_tests.conftest import *  # noqa: F403\n", encoding="utf-8")
    (tmp_path / "test_probe.py").write_text(PROBE.format(profile=profile, deadline=deadline), encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if k != "CI"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
        cwd=tmp_path, env={**environ, "PYTHONPATH": str(TESTS.parent), **env}, capture_output=True, text=True, timeout=300,
    )


def test_ci_selects_the_profile_without_a_deadline_and_prints_the_seed(tmp_path):
    done = run_probe(tmp_path, "nexus-ci", "is None", CI="true")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (header,) = [line for line in done.stdout.splitlines() if line.startswith("hypothesis seed ")]
    seed = header.split()[2]
    assert seed.isdigit() and f"--hypothesis-seed={seed}" in header


def test_without_ci_the_default_profile_keeps_its_deadline(tmp_path):
    done = run_probe(tmp_path, "default", "is not None")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "hypothesis seed" not in done.stdout
