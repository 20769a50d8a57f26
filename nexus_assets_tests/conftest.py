import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from nexus_assets_tests.markers import is_slow
from nexus_assets_tests.project import Project, sample_project

# CI runs on two busy cores: a per-example deadline (or the too-slow health check) there measures
# the neighbours, not the code. The profile drops both and prints how to reproduce a failure.
# Unlike Hypothesis's own "ci" profile it keeps searching with a new seed each run, printed in the
# header (below). `CI` (set by CI services and by .ci/run) selects it; `--hypothesis-profile` wins.
hypothesis_settings.register_profile(
    "nexus-ci", deadline=None, print_blob=True, database=None, derandomize=False, suppress_health_check=[HealthCheck.too_slow]
)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("nexus-ci")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Under CI every run has one Hypothesis seed, chosen here unless given, printed in the header
    and handed to xdist workers with the other options: a failure is re-run with the same seed."""
    if os.environ.get("CI") and config.getoption("hypothesis_seed", None) is None:
        config.option.hypothesis_seed = str(random.SystemRandom().randrange(2**32))


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = config.getoption("hypothesis_seed", None)
    if seed is None:
        return None
    return f"hypothesis seed {seed} (re-run with --hypothesis-seed={seed})"


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
def _no_dagster_home(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests use ephemeral instances unless they set DAGSTER_HOME themselves.
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    for var in ("NEXUS_DB", "NEXUS_RUNS_DIR", "NEXUS_TOPICS_DIR", "NEXUS_EXTRACTOR", "NEXUS_NO_RECALL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def postgres_server():
    """One real PostgreSQL per test worker (nexus_assets_tests/postgres.py), stopped at the end."""
    from nexus_assets_tests.postgres import PostgresServer

    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """The address of a new, empty PostgreSQL database for this test."""
    return postgres_server.database()


# Markers (registered in pyproject.toml) so a fast subset runs without the slow, PostgreSQL and
# browser tests: `python -m pytest -n 2 -m "not slow and not postgres and not browser"`.
# `postgres` follows the fixture a test uses, `browser` the modules that drive Chromium, and `slow`
# the modules measured with `--durations` to cost over a minute of a CI run, and every test that
# syncs, materializes, runs `nexus` in a subprocess or starts a server (markers.py reads it from
# the source, so a new test is sorted without being listed).
BROWSER_MODULES = frozenset({"test_conflict_view", "test_dagster_ui_tour", "test_viewer"})
SLOW_MODULES = frozenset({
    "test_dagster_dev", "test_dagster_ui_tour", "test_deploy", "test_readme_examples", "test_first_hour",
    "test_hostile_input", "test_sync_memory", "test_real_exports", "test_postgres_backend",
})


# Tests the source reading above leaves in the fast subset that `--durations` measured at over ten
# seconds each on two busy cores (a worker pool, the sync service, a search over every superset,
# the torch comparison, a large export, a scan of the whole package).
SLOW_TESTS = frozenset({
    "test_llm_at_scale::test_concurrent_extraction_equals_sequential",
    "test_sync_service::test_run_compiles_then_skips_when_nothing_changed_and_force_compiles_again",
    "test_sync_service::test_runs_carry_the_callers_tags_on_the_instance_it_passes",
    "test_uniqueness_gate::test_superset_search_finds_exactly_the_smallest_containing_text",
    "test_incremental_resolution::test_incremental_resolution_equals_full",
    "test_embedder_onnx::test_a_texts_vector_does_not_depend_on_its_batch",
    "test_embedder_onnx::test_recall_at_5_holds_against_torch",
    "test_embedder_onnx::test_vectors_match_the_torch_model",
    "test_formats_exports::test_large_export_streams_in_bounded_memory",
    "test_settings::test_only_the_settings_module_reads_the_environment",
    "test_discover::test_discover_never_overwrites_a_file",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if getattr(item, "module", None) else ""
        if "postgres_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)
        if module in BROWSER_MODULES:
            item.add_marker(pytest.mark.browser)
        name = f"{module}::{getattr(item, 'originalname', item.name)}"
        if module in SLOW_MODULES or name in SLOW_TESTS or is_slow(item):
            item.add_marker(pytest.mark.slow)
