"""Which tests are `slow`: a test is, when it (or a fixture it asks for, or a helper of our tests it
calls) runs a whole sync, a Dagster materialization, a `nexus` subprocess or a real server.

Read from the source at collection, so a new test is sorted without anyone listing it. On two
cores one sync is seconds and the suite has hundreds; the rest (rules, parsers, the gate, the
stores on a temp vault) is the fast subset, under three minutes (CONTRIBUTING.md).
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from typing import Any, Callable

import pytest

# A whole sync through the CLI or the service, Dagster, a subprocess, a real server.
SLOW_CODE = re.compile(
    r"sync_args\(|\bmaterialize|run_nexus\(|subprocess\.|[\"']sync[\"']|\buvicorn\b|run_sync\(|sync_service\.|\.sync\(|"
    r"\bserve_in_thread\(|\bApiServer\(|\bstart_server\("
)
_OURS = "nexus_assets_tests"
_seen: dict[Any, bool] = {}


def _source(func: Callable) -> str | None:
    try:
        return textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None


def _called_helpers(source: str, namespace: dict) -> list[Callable]:
    """Functions of our test package that `source` calls by name."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    helpers = []
    for name in names:
        value = namespace.get(name)
        if inspect.isfunction(value) and (value.__module__ or "").startswith(_OURS):
            helpers.append(value)
    return helpers


def _is_slow(func: Callable, depth: int = 0) -> bool:
    func = inspect.unwrap(func)
    key = getattr(func, "__code__", func)
    if key in _seen:
        return _seen[key]
    _seen[key] = False  # a helper that calls itself is not slow on that account
    source = _source(func)
    slow = bool(source and SLOW_CODE.search(source))
    if not slow and source and depth < 3:
        slow = any(_is_slow(h, depth + 1) for h in _called_helpers(source, getattr(func, "__globals__", {})))
    _seen[key] = slow
    return slow


def is_slow(item: pytest.Item) -> bool:
    function = getattr(item, "function", None)
    if function is None:
        return False
    # Hypothesis wraps the test; the body is the inner test.
    inner = getattr(getattr(function, "hypothesis", None), "inner_test", None)
    if _is_slow(inner or function):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info is not None else None
        if not defs:
            continue
        fixture = defs[-1].func
        if (getattr(fixture, "__module__", "") or "").startswith(_OURS) and _is_slow(fixture):
            return True
    return False
