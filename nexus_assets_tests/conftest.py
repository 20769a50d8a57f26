from pathlib import Path

import pytest

from nexus_assets_tests.project import Project, sample_project


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """The shipped sample data copied into a temp dir, with a vault path of its own."""
    return sample_project(tmp_path / "proj")


@pytest.fixture
def empty_project(tmp_path: Path) -> Project:
    p = Project(tmp_path / "proj")
    p.runs.mkdir(parents=True)
    p.topics.mkdir(parents=True)
    return p


@pytest.fixture(autouse=True)
def _settings_handed_over_afresh():
    """What the shell hands to deep code (limits, vault memory, viewer address) is set per command;
    a test that calls that code directly hands it over itself (`settings.apply()` after setenv).
    Afterwards the defaults are back, so no test sees another's values."""
    from nexus_assets import settings

    settings.apply({})
    yield
    settings.apply({})


@pytest.fixture(autouse=True)
def _no_dagster_home(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests use ephemeral instances unless they set DAGSTER_HOME themselves.
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    for var in ("NEXUS_DB", "NEXUS_RUNS_DIR", "NEXUS_TOPICS_DIR", "NEXUS_EXTRACTOR", "NEXUS_NO_RECALL"):
        monkeypatch.delenv(var, raising=False)
