"""Nexus Sync talks to Dagster through its public API only (issue 31): no module imports
`dagster._…`, and none reads a private attribute of a Dagster object (a run result, the instance,
a context, an event or a record). Dagster changes its internals between releases; what is public
is what it keeps.

Read from the source (AST), not at run time, so every path counts, including lazy imports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from nexus_assets_tests.project import REPO, TESTS

PACKAGE = REPO / "nexus_assets"
MODULES = sorted(PACKAGE.rglob("*.py"))

# `dagster._core`, `dagster_duckdb._impl`, …: a private module of Dagster or one of its libraries.
PRIVATE_MODULE = re.compile(r"^dagster(_\w+)?\._")
# The names Dagster objects go by in this code base, wherever they are used.
DAGSTER_NAMES = {"result", "results", "ingested", "instance", "context", "event", "events", "entry", "record", "records",
                 "storage", "run", "defs", "job", "step_context", "evaluation"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _imports_dagster(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0].startswith("dagster") for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0].startswith("dagster"):
            return True
    return False


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def private_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    speaks_dagster = _imports_dagster(tree)
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where}: import {a.name}" for a in node.names if PRIVATE_MODULE.match(a.name)]
        elif isinstance(node, ast.ImportFrom) and PRIVATE_MODULE.match(node.module or ""):
            found.append(f"{where}: from {node.module} import …")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and PRIVATE_MODULE.match(node.value):
            found.append(f"{where}: {node.value!r} (imported by name?)")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            root = _root(node.value)
            if root in ("self", "cls"):
                continue  # a class of ours reading its own state
            if speaks_dagster or root in DAGSTER_NAMES:
                found.append(f"{where}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr", "setattr"):
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value):
                if _root(node.args[0]) not in ("self", "cls"):
                    found.append(f"{where}: {ast.unparse(node)}")
    return found


def test_the_scan_sees_the_package():
    assert len(MODULES) > 50 and PACKAGE / "cli" / "sync.py" in MODULES


@pytest.mark.parametrize(
    "source",
    [
        "from dagster._serdes import serialize_value",
        "import dagster._core.storage.event_log.schema as schema",
        "import dagster as dg\ndef f(x):\n    return x._output_capture",
        "def f(result):\n    return getattr(result, '_output_capture', None)",
        "def f(instance):\n    return instance._event_storage",
        "import importlib\nimportlib.import_module('dagster._core.events')",
    ],
)
def test_the_scan_catches_private_uses(tmp_path, source):
    probe = tmp_path / "probe.py"
    probe.write_text(source, encoding="utf-8")
    assert private_uses(probe)


def test_no_module_imports_dagster_internals_or_reads_private_attributes():
    found = [f"{path.relative_to(PACKAGE)}: {use}" for path in MODULES for use in private_uses(path)]
    assert found == [], "use Dagster's public API (`import dagster as dg`):\n" + "\n".join(found)


def test_no_test_imports_dagster_internals():
    """The same rule for the tests (issue 44): they read Dagster through its public API as well, so
    a Dagster release that moves an internal cannot break a test of behaviour that did not change."""
    tests = sorted(p for p in TESTS.rglob("*.py") if p != Path(__file__).resolve())
    assert len(tests) > 50
    found = [f"{path.name}: {use}" for path in tests for use in private_uses(path) if ": import " in use or ": from " in use]
    assert found == [], "use Dagster's public API (`import dagster as dg`) in tests too:\n" + "\n".join(found)
