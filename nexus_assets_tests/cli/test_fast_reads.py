"""Commands that only read start fast: they import neither Dagster, nor the LLM client, nor pandas.

Measured by what a fresh interpreter has imported after the command ran, not by a clock.
"""

import hashlib
import json
import subprocess
import sys

import pytest

from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.project import Project

HEAVY = ("dagster", "openai", "pandas", "jinja2")
PROBE = """
import json, sys
heavy = set(sys.argv[1].split(","))
from nexus_assets.cli import main
code = main(sys.argv[2:])
print(json.dumps({"code": code, "heavy": sorted({m.split('.')[0] for m in sys.modules} & heavy)}), file=sys.stderr)
"""


def imported_by(*argv: str, heavy: tuple[str, ...] = HEAVY) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, ",".join(heavy), *argv], capture_output=True, text=True, timeout=120)
    return json.loads(proc.stderr.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def synced(tmp_path_factory) -> Project:
    from nexus_assets.cli import main
    from nexus_assets_tests.project import sample_project

    p = sample_project(tmp_path_factory.mktemp("fast") / "proj")
    assert main([*p.sync_args(), "--json"]) == 0
    return p


def test_read_commands_import_no_dagster_llm_client_or_pandas(synced: Project, capsys):
    db = ["--db", str(synced.db)]
    brick = run_json(capsys, *db, "bricks", "nexus-server-sync")[0]["brick_id"]
    # A passage of the sample (DESIGN §1: sha256 of run id, path and offsets): "Where should the vault live?"
    passage = hashlib.sha256(b"run-2026-10-09-vault-design:$['messages'][0]['content']:0:28").hexdigest()
    for argv in (
        ["topics"],
        ["bricks", "nexus-server-sync", "--json"],
        ["trace", brick[:12]],
        ["trace", passage[:12]],
        ["manifest", "storage-decisions"],
        ["errors"],
        ["rejections", "nexus-server-sync"],
        ["calls"],
    ):
        seen = imported_by(*db, *argv)
        assert seen == {"code": 0, "heavy": []}, argv


def test_help_imports_nothing_heavy():
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from nexus_assets.cli import build_parser; build_parser(); "
         f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.stdout.strip() == "[]", proc.stderr


def test_topics_reads_the_catalog_without_loading_the_models(synced: Project, capsys):
    """`nexus topics` is the command people run to see where they are; it lists plain rows, so it
    does not even load pydantic (the models are most of a read command's start-up after DuckDB)."""
    listed = run_json(capsys, "--db", str(synced.db), "topics")
    active = {t["topic_id"]: t for t in listed if t["state"] == "ACTIVE"}
    assert set(active) == {"nexus-server-sync", "storage-decisions"}
    assert all(t["visible_bricks"] > 0 and t["manifest_hash"] for t in active.values())
    assert imported_by("--db", str(synced.db), "topics", heavy=(*HEAVY, "pydantic")) == {"code": 0, "heavy": []}


def test_a_sync_with_the_embedded_extractor_never_imports_the_llm_sdk(tmp_path):
    """Importing the OpenAI SDK is a third of an offline no-change sync's start-up: only a request
    to a model loads it."""
    from nexus_assets_tests.project import sample_project

    p = sample_project(tmp_path / "proj")
    assert imported_by(*p.sync_args(), "--json", heavy=("openai",)) == {"code": 0, "heavy": []}
    assert imported_by(*p.sync_args(), "--json", heavy=("openai",)) == {"code": 0, "heavy": []}
