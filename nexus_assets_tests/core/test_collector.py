"""The sync's phases pause CPython's cyclic collector and always hand it back as they found it."""

import gc
from collections import defaultdict

import pytest

import nexus_assets.extract.step
import nexus_assets.gate.step
import nexus_assets.ingest.step
import nexus_assets.publish.step
import nexus_assets.resolve.step
from nexus_assets.core.collector import collector_paused
from nexus_assets.extract.backends import TaughtExtractor  # the default selector (v3's reading and its taught fit)
from nexus_assets.resolve.records import StageRecords
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.project import Project, nexus_run


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    gc.enable() if was else gc.disable()


@collector_paused
def observe(fail: bool = False) -> bool:
    if fail:
        raise ValueError("the phase failed")
    return gc.isenabled()


def test_a_phase_runs_without_the_collector_and_restores_it(collector_on):
    assert observe() is False
    assert gc.isenabled()
    with pytest.raises(ValueError, match="the phase failed"):
        observe(fail=True)
    assert gc.isenabled(), "a failing phase still turns the collector back on"


def test_a_collector_turned_off_by_the_caller_stays_off(collector_on):
    gc.disable()
    assert observe() is False
    assert not gc.isenabled()


def test_every_phase_of_a_real_sync_runs_paused_and_the_collector_is_back_after(
    empty_project: Project, capsys, monkeypatch, collector_on
):
    seen: dict[str, set[bool]] = defaultdict(set)

    def watch(owner, name: str, label: str) -> None:
        real = getattr(owner, name)

        def watched(*args, **kwargs):
            seen[label].add(gc.isenabled())
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, watched)

    # Inner calls of each phase: ingestion's file reader, the extractor, the gate, resolution, the
    # stage (where resolution's bricks are made, as it writes them), the publish.
    watch(nexus_assets.ingest.step, "iter_run_file", "ingest")
    watch(TaughtExtractor, "extract_runs", "extract")
    watch(nexus_assets.gate.step, "validate_pointers", "validate")
    watch(nexus_assets.resolve.step, "resolve_keyed", "resolve")
    watch(StageRecords, "write", "stage")
    watch(nexus_assets.publish.step, "next_manifest", "publish")

    p = empty_project
    p.write_topic("vault-notes", keywords=["vault"])
    for i in range(3):
        p.write_run(f"r{i}.json", nexus_run(f"run-{i}", [("user", f"The vault keeps item {i}."), ("assistant", "Noted.")]))
    results = run_json(capsys, *p.sync_args())

    assert [r["success"] for r in results] == [True]
    assert dict(seen) == {k: {False} for k in ("ingest", "extract", "validate", "resolve", "stage", "publish")}
    assert gc.isenabled()
