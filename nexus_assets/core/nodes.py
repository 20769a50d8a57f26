"""Text nodes as stored rows: what ingestion extracts from a run version once, and everything
downstream (extraction, the gate, resolution, checks) reads instead of re-parsing raw JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from nexus_assets.core.fingerprint import node_checksum
from nexus_assets.core.models import Node, Run
from nexus_assets.core.paths import parse_normalized
from nexus_assets.core.scope import node_text


@dataclass(frozen=True)
class NodeRecord:
    run_id: str
    version_id: str
    json_path: str
    node_type: str
    # The enclosing message's timestamp, else None (the run's start then applies).
    timestamp: str | None
    position: int
    text: str
    checksum: str
    branch: str = "current"
    hidden: bool = False


def node_records(run: Run) -> list[NodeRecord]:
    """Every string text node of a parsed run version, with its document position and checksum."""
    positions = run.positions
    out = []
    for node in run.nodes:
        text = node_text(run, node)
        if text is None:
            continue
        stamp = run.timestamp_of(node.steps)
        out.append(
            NodeRecord(
                run_id=run.run_id,
                version_id=run.version_id,
                json_path=node.path,
                node_type=node.node_type,
                timestamp=stamp if stamp != run.started_at else None,
                position=positions.get(node.steps, -1),
                text=text,
                checksum=node_checksum(text),
                branch=node.branch,
                hidden=node.hidden,
            )
        )
    return out


def run_from_records(
    *, run_id: str, version_id: str, status: str, started_at: str | None, format: str, records: Iterable[NodeRecord]
) -> Run:
    """A run version rebuilt from its stored nodes: no document, so nothing is parsed again."""
    nodes = tuple(
        Node(
            steps=parse_normalized(r.json_path) or (),
            node_type=r.node_type,
            timestamp=r.timestamp,
            text=r.text,
            position=r.position,
            checksum=r.checksum,
            branch=r.branch,
            hidden=r.hidden,
        )
        for r in sorted(records, key=lambda r: r.position)
    )
    return Run(run_id=run_id, status=status, started_at=started_at, format=format, document=None, nodes=nodes, version_id=version_id)
