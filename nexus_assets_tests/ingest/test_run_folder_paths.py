"""What a sync does with the paths under the runs folder (invariant 11): a name that is not UTF-8,
a link that leaves the folder and a folder it may not read are each skipped and named in
`nexus errors`; the rest of the folder syncs. Real `nexus` commands in a child process."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.project import REPO, Project, nexus_run

TOPIC = "vault-notes"
NO_RECALL = {"NEXUS_NO_RECALL": "1"}


def project(p: Project) -> Project:
    p.write_topic(TOPIC, keywords=["vault"])
    p.write_run("good.json", nexus_run("run-good", [("user", "We keep the vault in one DuckDB file.")]))
    return p


def sources(p: Project) -> set[str]:
    done = run_nexus(*p.cli_args(), "bricks", TOPIC, "--all", "--json")
    assert done.returncode == 0, done.stderr
    return {s["run_id"] for b in json.loads(done.stdout) for s in b["sources"]}


def errors(p: Project, cwd: Path) -> list[str]:
    done = run_nexus(*p.cli_args(), "errors", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_file_name_that_is_not_utf8_is_named_escaped_and_the_rest_syncs(empty_project: Project):
    p = project(empty_project)
    bad = os.path.join(os.fsencode(p.runs), b"bad\xff.json")
    Path(os.fsdecode(bad)).write_text(json.dumps(nexus_run("run-bad", [("user", "The vault has a bad name.")])))
    for _ in range(2):  # the second sync meets it again: named once, still no crash
        done = run_nexus(*p.sync_args(TOPIC), env=NO_RECALL, cwd=p.root)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Traceback" not in done.stderr
    assert sources(p) == {"run-good"}
    assert errors(p, p.root) == [
        "runs/bad\\xff.json: file name is not valid UTF-8, so the vault cannot record it as a source; skipped; "
        "rename it to a UTF-8 name and sync again"
    ]


def test_links_that_leave_the_runs_folder_are_not_followed_and_are_named(empty_project: Project, tmp_path: Path):
    p = project(empty_project)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text(json.dumps(nexus_run("run-secret", [("user", "The vault must not read this.")])))
    (p.runs / "secret.json").symlink_to(outside / "secret.json")
    (p.runs / "elsewhere").symlink_to(outside)
    (p.runs / "again.json").symlink_to(p.runs / "good.json")  # a link inside the folder is read as before
    done = run_nexus(*p.sync_args(TOPIC), env=NO_RECALL, cwd=p.root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "skipped runs/secret.json: is a link to" in done.stderr
    assert sources(p) == {"run-good"}
    real = os.path.realpath(outside)
    assert errors(p, p.root) == [
        f"runs/elsewhere: is a link to {real}, outside the runs folder; not followed; copy it into the runs folder to sync it",
        f"runs/secret.json: is a link to {real}/secret.json, outside the runs folder; not followed; copy it into the runs folder to sync it",
    ]


# Root reads any folder whatever its mode. To make chmod 000 mean something, a child run as root
# gives up the two capabilities that bypass read and search permissions (prctl PR_CAPBSET_DROP
# before exec); its own files stay readable, as they are root's.
_PR_CAPBSET_DROP, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 24, 1, 2


def _without_permission_bypass() -> None:
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def nexus_unprivileged(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "nexus_assets.cli", *argv],
        capture_output=True, text=True, timeout=300, cwd=cwd, preexec_fn=_without_permission_bypass,
        env={**os.environ, **NO_RECALL, "PYTHONPATH": path},
    )


def _permissions_hold(folder: Path) -> bool:
    probe = nexus_unprivileged_probe(folder)
    return probe.returncode != 0 and "Permission denied" in probe.stderr


def nexus_unprivileged_probe(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", f"import os; os.listdir({str(folder)!r})"],
        capture_output=True, text=True, timeout=60, preexec_fn=_without_permission_bypass,
    )


def test_an_unreadable_folder_is_one_ingestion_error_and_verify_names_it(empty_project: Project):
    p = project(empty_project)
    p.write_run("locked/inner.json", nexus_run("run-inner", [("user", "The vault is locked away.")]))
    first = nexus_unprivileged(*p.sync_args(TOPIC), cwd=p.root)
    assert first.returncode == 0, first.stderr[-3000:]
    locked = p.runs / "locked"
    locked.chmod(0)
    try:
        if not _permissions_hold(locked):
            pytest.skip("this machine lets the test process read a chmod 000 folder even without CAP_DAC_OVERRIDE")
        synced = nexus_unprivileged(*p.sync_args(TOPIC), cwd=p.root)
        verified = nexus_unprivileged(*p.cli_args(), "verify", cwd=p.root)
        listed = nexus_unprivileged(*p.cli_args(), "errors", cwd=p.root)
        # Forgetting a file in the unreadable folder works from what the vault recorded of it.
        forgot = nexus_unprivileged(
            *p.cli_args(), "forget", "--file", str(locked / "inner.json"), "--reason", "test", "--yes", cwd=p.root
        )
    finally:
        locked.chmod(0o755)
    assert forgot.returncode == 0 and "Traceback" not in forgot.stderr, forgot.stderr[-3000:]
    for done in (synced, verified, listed):
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # The sync ran; the brick whose source cannot be read is drift, so its check fails (exit 1).
    assert synced.returncode == 1, synced.stderr[-3000:]
    assert "check failed: vault-notes: checksum_drift" in synced.stderr
    assert listed.stdout.splitlines() == [
        "runs/locked: folder could not be read (Permission denied); the run files in it were not synced; "
        "make it readable (chmod u+rx) and sync again"
    ]
    assert verified.returncode == 1
    assert f"source file {locked / 'inner.json'} cannot be read (Permission denied); make it readable and run this again" in verified.stdout
