"""Two topic files that define one topic_id are ambiguous configuration: `nexus sync` exits 2
naming both files before it touches the vault (docs/cli.md: 2 is bad usage or input)."""

from __future__ import annotations

import dagster as dg

from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.dagster_helpers import materialize_topic
from nexus_assets_tests.project import Project, nexus_run


def test_two_files_with_one_topic_id_stop_the_sync_before_the_vault(empty_project: Project):
    p = empty_project
    first = p.write_topic("vault-notes", keywords=["vault"])
    second = p.topics / "zz-copy.yaml"
    second.write_text(first.read_text().replace("Vault Notes", "Vault Notes (copy)"), encoding="utf-8")
    p.write_topic("other-notes", keywords=["other"])
    p.write_run("good.json", nexus_run("run-good", [("user", "We keep the vault in one DuckDB file.")]))
    done = run_nexus(*p.sync_args(), env={"NEXUS_NO_RECALL": "1"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"nexus: topic_id 'vault-notes' is defined by 2 topic files: {first}, {second}; "
        "keep it in one of them (give the others their own topic_id, or remove them) and sync again"
    )
    assert not p.db.exists()  # nothing was touched, not even created
    second.unlink()
    assert run_nexus(*p.sync_args(), env={"NEXUS_NO_RECALL": "1"}).returncode == 0


def test_the_dagster_path_refuses_a_topic_id_two_files_define(empty_project: Project):
    """The UI, the schedule and the sensor run the asset graph, not `nexus sync`: its first asset
    refuses the ambiguous topic the same way, and nothing is compiled."""
    p = empty_project
    first = p.write_topic("vault-notes", keywords=["vault"])
    second = p.topics / "zz-copy.yaml"
    second.write_text(first.read_text(), encoding="utf-8")
    p.write_run("good.json", nexus_run("run-good", [("user", "We keep the vault in one DuckDB file.")]))
    with dg.instance_for_test() as instance:
        result = materialize_topic(p, "vault-notes", instance, selection=["run_files", "raw_runs"])
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == "raw_runs"
    assert f"topic_id 'vault-notes' is defined by 2 topic files: {first}, {second}; " in failure.event_specific_data.error.message
