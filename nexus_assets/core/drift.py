"""Drift (invariant 9): does a source address still hold the text it was lifted from?"""

from __future__ import annotations

from typing import Any

from nexus_assets.core.fingerprint import node_checksum
from nexus_assets.core.models import SourceAddress
from nexus_assets.core.paths import PathError, resolve_string


def address_problem(document: Any, address: SourceAddress) -> str | None:
    """None when `document` still yields the address's node checksum; else what changed."""
    try:
        _, node = resolve_string(document, address.json_path)
    except PathError as exc:
        return f"{address.json_path} no longer resolves ({exc.reason})"
    if node_checksum(node) != address.node_checksum:
        return f"{address.json_path} changed (checksum {address.node_checksum[:12]}… no longer matches)"
    if len(node) < address.end:
        return f"{address.json_path} is shorter than offset {address.end}"
    return None


def slice_problem(document: Any, address: SourceAddress, content: str) -> str | None:
    """None when the address still holds exactly `content` (invariant 1); else what is wrong."""
    problem = address_problem(document, address)
    if problem:
        return problem
    _, node = resolve_string(document, address.json_path)
    if node[address.start : address.end] != content:
        return f"stored text differs from {address.json_path}[{address.start}:{address.end}]"
    return None
