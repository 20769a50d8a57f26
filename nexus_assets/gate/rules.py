"""The hallucination gate (docs/invariants.md §2): a pointer becomes an occurrence only if code can lift
its quote, verbatim, from the one string node its path names."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from nexus_assets.core.fingerprint import fingerprint, node_checksum
from nexus_assets.core.models import (
    Node,
    Occurrence,
    Pointer,
    Rejection,
    Run,
    SourceAddress,
    trusted,
)
from nexus_assets.core.paths import (
    PathError,
    format_path,
    parse_normalized,
    resolve_string,
)
from nexus_assets.core.validation import explain
from nexus_assets.ingest.scope import Scope
from nexus_assets.gate.quotes import first_offsets
from nexus_assets.ingest.formats.claude import THINKING, region_of, tagged_regions


class NeedsDocument(Exception):
    """A pointer names no stored text node of a run loaded from the vault's nodes; only the whole
    document can say what it names (another string leaf, an object, several nodes, nothing)."""


def _node_key(path: str) -> str | None:
    """The key of the stored node a pointer's path names (`Run.node_index`); None for a path in
    any other syntax, which only the document can resolve."""
    steps = parse_normalized(path)
    return format_path(steps) if steps is not None else None


def _stored_node(run: Run, path: str) -> Node | None:
    if not run.node_index:
        return None
    key = _node_key(path)
    node = run.node_index.get(key) if key is not None else None
    return node if node is not None and node.text is not None else None


def named_paths(raws: list[Any]) -> set[str]:
    """The normalized paths a batch of untrusted pointers names: the only stored nodes the gate
    will look up for them (a pointer at anything else needs the document; see NeedsDocument)."""
    return {
        key
        for raw in raws
        if isinstance(raw, dict) and isinstance(path := raw.get("json_path"), str) and (key := _node_key(path)) is not None
    }


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return repr(value)[:500]


class _NodeMemo:
    """Per-node work done once per batch of pointers: the checksum of each node, and the first
    offset of each distinct quote, so a long node is not re-hashed or re-searched per pointer."""

    def __init__(self, raws: list[Any] = ()) -> None:
        self.checksums: dict[tuple, str] = {}
        self.excluded: dict[tuple, str | None] = {}
        self.found: dict[tuple, int] = {}
        self.tagged: dict[tuple, list] = {}
        # Quotes per path as written, so one node is searched once for all its quotes.
        self.pending: dict[str, set[str]] = {}
        for raw in raws:
            if isinstance(raw, dict) and isinstance(raw.get("json_path"), str) and isinstance(raw.get("verbatim_quote"), str):
                self.pending.setdefault(raw["json_path"], set()).add(raw["verbatim_quote"])

    def checksum(self, steps: tuple, node: str) -> str:
        value = self.checksums.get(steps)
        if value is None:
            value = self.checksums[steps] = node_checksum(node)
        return value

    def out_of_scope(self, scope: Scope, run: Run, steps: tuple, text: str) -> str | None:
        if steps not in self.excluded:
            node = run.node_index.get(format_path(steps))
            if node is None:
                self.excluded[steps] = "not a text node of the run"
            else:
                self.excluded[steps] = scope.excludes_node(node) or scope.excludes_text(text)
        return self.excluded[steps]

    def regions(self, steps: tuple, node: str) -> list:
        value = self.tagged.get(steps)
        if value is None:
            value = self.tagged[steps] = tagged_regions(node)
        return value

    def find(self, steps: tuple, node: str, quote: str, path: str) -> int:
        key = (steps, quote)
        value = self.found.get(key)
        if value is None:
            batch = self.pending.pop(path, set()) | {quote}
            for q, at in first_offsets(node, batch).items():
                self.found.setdefault((steps, q), at)
            value = self.found[key]
        return value


def validate_pointer(
    raw: Any, *, topic_id: str, run: Run, scope: Scope | None = None, memo: _NodeMemo | None = None
) -> Occurrence | Rejection:
    """Check one untrusted pointer against the run it claims to point into; with `scope`, the node
    must also be one the topic compiles (an extractor is never shown any other)."""
    memo = memo or _NodeMemo()

    def reject(reason: str, detail: str) -> Rejection:
        fields = raw if isinstance(raw, dict) else {}
        return Rejection(
            topic_id=topic_id,
            run_id=run.run_id,
            json_path=_as_text(fields.get("json_path")),
            verbatim_quote=_as_text(fields.get("verbatim_quote")),
            reason=reason,
            detail=detail,
        )

    try:
        pointer = Pointer.model_validate(raw)
    except ValidationError as exc:
        return reject(
            "malformed_pointer",
            f"pointer is not {{topic_id, json_path, verbatim_quote}} strings: {explain(exc, whole='pointer')}",
        )
    if pointer.topic_id != topic_id:
        return reject("unknown_topic", f"pointer names topic {pointer.topic_id!r}; this extraction is for {topic_id!r}")
    if not pointer.verbatim_quote.strip():
        return reject("empty_quote", "verbatim_quote is empty or only whitespace")
    stored = _stored_node(run, pointer.json_path)
    checksum = None
    if stored is not None:
        steps, node, checksum = stored.steps, stored.text, stored.checksum
    elif run.document is None:
        raise NeedsDocument(run.run_id)
    else:
        try:
            steps, node = resolve_string(run.document, pointer.json_path)
        except PathError as exc:
            return reject(exc.reason, exc.detail)
    if scope is not None and (why := memo.out_of_scope(scope, run, steps, node)) is not None:
        return reject("out_of_scope", f"{format_path(steps)} is {why}")
    start = memo.find(steps, node, pointer.verbatim_quote, pointer.json_path)
    if start < 0:
        return reject("quote_not_found", f"quote is not a verbatim substring of {format_path(steps)}")
    end = start + len(pointer.verbatim_quote)
    node_type, branch = run.kind_of(steps)
    if run.format == "claude" and (inside := region_of(memo.regions(steps, node), start, end)) is not None:
        # Old Claude exports hold private reasoning and artifacts inline in the message text.
        if inside == THINKING:
            return reject("out_of_scope", f"{format_path(steps)}[{start}:{end}] is inside <antThinking>, the model's private reasoning")
        if scope is None or scope.node_types is None or "artifact" not in scope.node_types:
            return reject("out_of_scope", f"{format_path(steps)}[{start}:{end}] is inside an <antArtifact> (not in the topic's target_node_types)")
        node_type = "artifact"
    content = node[start:end]
    # Every value below is computed here from the validated pointer and the stored node, so the
    # models are built without validating them again (a third of the gate's time).
    return trusted(
        Occurrence,
        topic_id=topic_id,
        address=trusted(
            SourceAddress,
            run_id=run.run_id,
            json_path=format_path(steps),
            start=start,
            end=end,
            node_checksum=checksum or memo.checksum(steps, node),
            node_type=node_type,
            branch=branch,
        ),
        content=content,
        fingerprint=fingerprint(content),
        timestamp=run.timestamp_of(steps),
        position=run.positions.get(steps, -1),
    )


def validate_pointers(
    raws: list[Any], *, topic_id: str, run: Run, scope: Scope | None = None
) -> tuple[list[Occurrence], list[Rejection]]:
    occurrences: list[Occurrence] = []
    rejections: list[Rejection] = []
    memo = _NodeMemo(raws)
    for raw in raws:
        result = validate_pointer(raw, topic_id=topic_id, run=run, scope=scope, memo=memo)
        (occurrences if isinstance(result, Occurrence) else rejections).append(result)
    return occurrences, rejections
