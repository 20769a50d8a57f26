"""Text nodes as stored rows: what ingestion extracts from a run version once, and everything
downstream (extraction, the gate, resolution, checks) reads instead of re-parsing raw JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from nexus_assets.core.fingerprint import node_checksum
from nexus_assets.core.models import Node, Run
from nexus_assets.core.paths import Steps, parse_normalized
from nexus_assets.ingest.scope import node_text


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
    # Last: a row of the nodes table is read positionally in this order (NODE_COLUMNS).
    speaker: str | None = None


# Who speaks when the format names nobody: the role, as the node's kind says it.
ROLE_SPEAKERS = {
    "user_message": "user",
    "assistant_message": "assistant",
    "tool_call": "assistant",
    "tool_message": "tool",
    "system_message": "system",
}


def speaker_of(node: Node) -> str | None:
    """A node's speaker (docs/inputs.md): the name the format gives (a Nexus run's `name`, ChatGPT's
    `author.name`), else its role; None for a node of no known role."""
    return node.speaker or ROLE_SPEAKERS.get(node.node_type)


def node_records(run: Run) -> Iterator[NodeRecord]:
    """Every string text node of a parsed run version, with its document position and checksum.

    A generator: a run of a million short messages is stored a slice at a time, never as a
    million records at once (invariant 12)."""
    positions = node_positions(run)
    for node in run.nodes:
        text = node_text(run, node)
        if text is None:
            continue
        stamp = run.timestamp_of(node.steps)
        yield NodeRecord(
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
            speaker=speaker_of(node),
        )


def node_positions(run: Run) -> dict[Steps, int]:
    """The document-order index (among all string leaves) of each text node: the same numbers
    as `Run.positions`, but kept for the nodes only, not for every role, id and timestamp."""
    if run.document is None:
        return {n.steps: n.position for n in run.nodes}
    # Keyed by the nodes' own step tuples; the walk holds one iterator per level, not every
    # leaf's path at once as `string_leaves` does (150 MB for 600k messages).
    wanted = {n.steps: n.steps for n in run.nodes}
    positions: dict[Steps, int] = {}
    index = 0
    stack: list[tuple[Steps, Iterator]] = [((), iter([((), run.document)]))]
    while stack:
        steps, children = stack[-1]
        item = next(children, None)
        if item is None:
            stack.pop()
            continue
        key, value = item
        at = steps + key
        if isinstance(value, str):
            if at in wanted:
                positions[wanted[at]] = index
            index += 1
        elif isinstance(value, dict):
            stack.append((at, (((k,), v) for k, v in value.items())))
        elif isinstance(value, list):
            stack.append((at, (((i,), v) for i, v in enumerate(value))))
    return positions


class StepsCache:
    """Parsed paths with their keys shared: a million messages name 'messages' and 'content' a
    million times each, and a fresh string per step cost ~100 bytes a node."""

    def __init__(self) -> None:
        self._keys: dict[str, str] = {}

    def steps(self, path: str) -> Steps:
        keys = self._keys
        return tuple(keys.setdefault(s, s) if isinstance(s, str) else s for s in parse_normalized(path) or ())


def node_from_record(r: NodeRecord, cache: StepsCache | None = None) -> Node:
    return Node(
        steps=(cache or StepsCache()).steps(r.json_path),
        node_type=r.node_type,
        timestamp=r.timestamp,
        text=r.text,
        position=r.position,
        checksum=r.checksum,
        branch=r.branch,
        hidden=r.hidden,
        speaker=r.speaker,
    )


def run_from_nodes(*, run_id: str, version_id: str, status: str, started_at: str | None, format: str, nodes: list[Node]) -> Run:
    """A run version rebuilt from its stored nodes: no document, so nothing is parsed again."""
    nodes.sort(key=lambda n: n.position)
    return Run(run_id=run_id, status=status, started_at=started_at, format=format, document=None, nodes=tuple(nodes), version_id=version_id)


