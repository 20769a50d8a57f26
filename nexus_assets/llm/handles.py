"""Short node handles: a request shows each node as `r<run>n<node>` (its run's place in the request,
the node's place in that run's list) instead of its JSON path, and code maps the handle a reply
names back to the run and the exact `json_path`. The stored pointer keeps the path; a handle the
request did not show is passed to the gate as the path it claims to be, which names no node
(`path_not_found`)."""

from __future__ import annotations

from typing import Any, Mapping


def handle(run_number: int, node_number: int) -> str:
    """The handle of the `node_number`-th node shown of the `run_number`-th run of a request (both from 1)."""
    return f"r{run_number}n{node_number}"


def _named(item: dict) -> Any:
    # The v3 reply names a node by "node"; a model that writes "json_path" instead is read the same.
    return item["node"] if "node" in item else item.get("json_path")


def resolve_handles(items: list[Any], handles: Mapping[str, tuple[str, str]], first_run: str) -> dict[str, list[Any]]:
    """A reply's items by the run their handle names, each with `json_path` set to the node's
    exact path (the handle dropped). An item whose handle the request did not show (or that is
    not a pointer at all) goes, as it came, to `first_run`, so the gate judges and rejects it
    exactly once; an unknown handle stays in `json_path`, where it names no node. Reply order is
    kept within each run."""
    out: dict[str, list[Any]] = {}
    for item in items:
        run_id = first_run
        if isinstance(item, dict):
            named = _named(item)
            key = str(named) if isinstance(named, (str, int)) and not isinstance(named, bool) else None
            pointer = {k: v for k, v in item.items() if k != "node"}
            if key is not None and key in handles:
                run_id, pointer["json_path"] = handles[key]
            elif "node" in item:
                pointer["json_path"] = named
            item = pointer
        out.setdefault(run_id, []).append(item)
    return out
