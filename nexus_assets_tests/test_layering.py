"""docs/architecture.md layering: `vault/` is the base. Nothing under it imports a phase or the composition
root, not even inside a function or for a type hint; the phases' stores stand on it."""

from __future__ import annotations

import ast
from pathlib import Path
from nexus_assets_tests.project import REPO

PACKAGE = REPO / "nexus_assets"


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n == "nexus_assets" or n.startswith("nexus_assets.")}


def test_the_vault_layer_imports_only_itself():
    outside = {
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path in (PACKAGE / "vault").rglob("*.py")
        for name in imported(path)
        if not name.startswith("nexus_assets.vault")
    }
    assert not outside, sorted(outside)


def test_each_phase_store_stands_on_the_vault_layer_and_no_store_imports_the_root():
    stores = list(PACKAGE.glob("*/records.py"))
    assert len(stores) >= 10
    for path in stores:
        names = imported(path)
        assert "nexus_assets.store" not in names, path
    assert "nexus_assets.vault.records" in imported(PACKAGE / "publish" / "records.py")


PHASES = (
    "ingest", "topics", "extract", "gate", "resolve", "publish", "recall", "relate", "drift", "lifecycle", "forget",
    "search", "export", "trace", "eval", "discovery", "llm", "history", "teaching",
)
SHELLS = ("cli", "api", "mcp_server", "web")


def test_no_phase_imports_the_composition_root():
    """Each step names the stores it uses as a Protocol (docs/architecture.md#layers); not even a
    type hint reaches `store.py`."""
    reaching = sorted(
        str(path.relative_to(PACKAGE.parent))
        for phase in PHASES
        for path in (PACKAGE / phase).rglob("*.py")
        if "nexus_assets.store" in imported(path)
    )
    assert reaching == [], reaching


def test_the_services_import_no_shell():
    upward = sorted(
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path in (PACKAGE / "services").rglob("*.py")
        for name in imported(path)
        if (name.split(".") + [""])[1] in SHELLS
    )
    assert upward == [], upward


def test_the_viewer_reads_through_the_services():
    """The viewer opens no vault and calls no phase: what it shows comes from services/pages.py."""
    names = set().union(*(imported(path) for path in (PACKAGE / "web").rglob("*.py")))
    assert not {n for n in names if n == "nexus_assets.store" or (n.split(".") + [""])[1] in PHASES}, sorted(names)
