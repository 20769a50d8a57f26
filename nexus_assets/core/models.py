"""The domain's nouns. Pure data: no Dagster, no I/O."""

from __future__ import annotations

import fnmatch
import re
from datetime import date
from pathlib import PurePosixPath
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    computed_field,
    field_validator,
    model_serializer,
)

from nexus_assets.core.keywords import DEFAULT_KEYWORD_FORMS, KeywordForms, KeywordPattern, keyword_pattern
from nexus_assets.core.paths import Steps, format_path, string_leaves

TopicState = Literal["DRAFT", "ACTIVE", "SEALING", "LOCKED"]
# The states a sync compiles (a LOCKED topic's sealed manifest is final; a DRAFT one is not yet approved).
COMPILED_STATES: tuple[TopicState, ...] = ("ACTIVE", "SEALING")
OrderingRule = Literal["chronological", "source-run-order", "ingestion-order"]
BrickState = Literal["IMPROVISE", "FORMING", "FINAL", "SUPERSEDED"]
RunStatus = Literal["OPEN", "CLOSED"]
NodeType = Literal[
    "user_message", "assistant_message", "system_message", "tool_call", "tool_message", "other",
    # An artifact the model wrote inside its message (old Claude exports' <antArtifact> spans: code,
    # documents): compiled only for a topic whose target_node_types name it.
    "artifact",
]
# current = on the path from a conversation's root to the leaf the user last saw (docs/inputs.md);
# sidechain = a coding agent's subagent, beside the main conversation (Claude Code, Codex CLI).
Branch = Literal["current", "abandoned", "sidechain"]
BranchScope = Literal["all", "current"]

TOPIC_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,63}$"
DEFAULT_RELATED_THRESHOLD = 0.85  # docs/conflicts.md
# The embedded extractor keeps a statement whose relevance to the topic (`extract/relevance.py`)
# reaches this; measured on real exports (README, "What the offline extractor keeps").
DEFAULT_MIN_RELEVANCE = 0.35

RejectionReason = Literal[
    "malformed_pointer",
    "unknown_topic",
    "empty_quote",
    "path_not_found",
    "path_not_singular",
    "node_not_string",
    "quote_not_found",
    "out_of_scope",
    # The optional semantic veto (docs/conflicts.md): the LLM said the brick adds nothing over its related bricks.
    "semantic_veto",
]
REASON_CODES: tuple[str, ...] = get_args(RejectionReason)


class ExtractionPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    scope_description: str
    target_node_types: tuple[NodeType, ...] | None = None
    required_keywords: tuple[str, ...] | None = None
    exclusion_criteria: tuple[str, ...] = ()


class Examples(BaseModel):
    """A person's judgement for a topic (docs/inputs.md `examples`): verbatim sentences like ones to keep
    and like ones to drop. Both extractors read them; `nexus keep` / `nexus drop` add to them."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    keep: tuple[StrictStr, ...] = ()
    drop: tuple[StrictStr, ...] = ()

    @field_validator("keep", "drop")
    @classmethod
    def _not_blank(cls, texts: tuple[str, ...]) -> tuple[str, ...]:
        for text in texts:
            if not text.strip():
                raise ValueError("an example is a sentence, not an empty string")
        return texts


class QualityGate(BaseModel):
    """A topic's extraction-quality check (docs/quality.md): a gold file and the figures it must reach."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    gold: str  # relative paths are read from the topic file's directory
    min_precision: float = Field(default=0.0, ge=0.0, le=1.0)
    min_recall: float = Field(default=0.0, ge=0.0, le=1.0)


class SourceFilter(BaseModel):
    """Which runs a topic reads (docs/inputs.md `sources`); every given criterion must admit a run, and
    within one list any entry may. Globs match the end of the run file's path (`chatgpt/*.zip`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    files: tuple[str, ...] = ()
    titles: tuple[str, ...] = ()  # regular expressions, searched in the conversation title
    runs: tuple[str, ...] = ()
    since: date | None = None  # run dates, inclusive
    until: date | None = None

    @field_validator("titles")
    @classmethod
    def _patterns_compile(cls, titles: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in titles:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"title pattern {pattern!r} is not a regular expression: {exc}") from None
        return titles

    def admits(self, run_id: str, file: str | None, title: str | None, started: str | None) -> bool:
        if self.runs and run_id not in self.runs:
            return False
        if self.files and not (file and any(PurePosixPath(file.replace("\\", "/")).match(g) for g in self.files)):
            return False
        if self.titles and not (title and any(re.search(p, title) for p in self.titles)):
            return False
        if self.since or self.until:
            day = _day(started)
            if day is None or (self.since and day < self.since) or (self.until and day > self.until):
                return False
        return True


def _day(timestamp: str | None) -> date | None:
    try:
        return date.fromisoformat(timestamp[:10]) if timestamp else None
    except ValueError:
        return None


class Topic(BaseModel):
    """A compilation scope, defined by a person in a topic file."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    topic_id: str = Field(pattern=TOPIC_ID_PATTERN)
    display_name: str
    extraction_policy: ExtractionPolicy
    ordering_rule: OrderingRule = "chronological"
    state: TopicState = "DRAFT"
    # Messages an export hides from the conversation view are compiled only when asked for.
    include_hidden: bool = False
    # `current` compiles only the path the user last saw; `all` keeps abandoned branches too.
    branches: BranchScope = "all"
    # Gold spans and thresholds for the `extraction_quality` check; it changes no brick.
    quality: QualityGate | None = None
    # The hierarchy of truth: run-file glob pattern → authority level (1 authoritative records,
    # 2 reviewed, 3 everything else, the default). Recall breaks ties by it; answers lead with it.
    authority: dict[str, Literal[1, 2, 3]] | None = None
    # Two bricks are related at or above this embedding similarity (docs/conflicts.md). Relations are
    # records beside the bricks: neither this nor the veto switch changes a brick or a hash.
    related_threshold: float = Field(default=DEFAULT_RELATED_THRESHOLD, ge=0.0, le=1.0)
    # The semantic veto (docs/conflicts.md): off unless the topic asks and an LLM is configured.
    semantic_veto: bool = False
    # The embedded extractor's bar for a statement's relevance to the topic (0 keeps every keyword hit).
    min_relevance: float = Field(default=DEFAULT_MIN_RELEVANCE, ge=0.0, le=1.0)
    # Only these runs are read for the topic (None: every run).
    sources: SourceFilter | None = None
    # A person's keep/drop judgement (None: none given); part of the definition, so a change selects again.
    examples: Examples | None = None
    # How `required_keywords` match (core/keywords.py): with their plurals and possessives, or exactly
    # as written (what a topic compiled before the inflections keeps until `--reselect`).
    keyword_forms: KeywordForms = DEFAULT_KEYWORD_FORMS

    @model_serializer(mode="wrap")
    def _without_unset_options(self, handler):
        # A topic without a quality gate or authority serializes as before they existed, so its
        # stored definition (and the inputs digest over it) does not change.
        data = handler(self)
        if isinstance(data, dict):
            for key in ("quality", "authority", "sources", "examples"):
                if data.get(key, 0) is None:
                    del data[key]
            for key, default in (("related_threshold", DEFAULT_RELATED_THRESHOLD), ("semantic_veto", False),
                                 ("min_relevance", DEFAULT_MIN_RELEVANCE), ("keyword_forms", DEFAULT_KEYWORD_FORMS)):
                if key in data and data[key] == default:
                    del data[key]
        return data

    def authority_of(self, source_file: str | None) -> int:
        """The level of a run file: the best (lowest) level whose pattern matches its path."""
        if not self.authority or not source_file:
            return 3
        matched = [level for pattern, level in self.authority.items() if fnmatch.fnmatch(source_file, pattern)]
        return min(matched, default=3)

    def keyword_pattern(self) -> KeywordPattern | None:
        """The matcher of the topic's `required_keywords` (None: no keyword pre-filter)."""
        return keyword_pattern(self.extraction_policy.required_keywords or (), self.keyword_forms)

    @property
    def compiled(self) -> bool:
        return self.state in ("ACTIVE", "SEALING")


class Pointer(BaseModel):
    """What an extractor returns. Untrusted until the gate has checked it."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    topic_id: StrictStr
    json_path: StrictStr
    verbatim_quote: StrictStr


class SourceAddress(BaseModel):
    """Where a brick's text lives: `resolve(run, json_path)[start:end]`."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str
    json_path: str
    start: int
    end: int
    node_checksum: str
    # Descriptive only: neither enters brick ids, fingerprints, manifest hashes nor equality
    # (an address recorded before these existed is the same address).
    node_type: NodeType | None = None
    branch: Branch = "current"
    # As the files stand now (invariant 14); kept by the vault, never part of the address.
    stale: bool = False
    # Who said it (docs/inputs.md): the speaker's name where the format carries one, else the role;
    # None where the format has neither. Descriptive, like node_type.
    speaker: str | None = None

    def _identity(self) -> tuple[str, str, int, int, str]:
        return (self.run_id, self.json_path, self.start, self.end, self.node_checksum)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SourceAddress):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())


class Rejection(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    topic_id: str
    run_id: str
    json_path: str | None
    verbatim_quote: str | None
    reason: RejectionReason
    detail: str


class Occurrence(BaseModel):
    """A pointer that passed the gate: verbatim text at one source address."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    topic_id: str
    address: SourceAddress
    content: str
    fingerprint: str
    timestamp: str | None
    position: int
    # The place of the run version it was first seen in among that run's versions (smaller is
    # older); None when not known (straight from the gate). It only ranks versions of one node
    # that hold the text at one place: the oldest is the canonical source. Not part of any output.
    version_seq: int | None = Field(default=None, exclude=True, repr=False)


class Brick(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    brick_id: str
    topic_id: str
    content: str
    fingerprint: str
    state: BrickState
    order_index: int | None
    superseded_by: str | None = None
    stale: bool = False
    sources: tuple[SourceAddress, ...]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def abandoned(self) -> bool:
        """Every source lies on a branch the user abandoned (an edited prompt, a regenerated answer)."""
        return bool(self.sources) and all(s.branch == "abandoned" for s in self.sources)


class ManifestEntry(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    order_index: int
    brick_id: str
    fingerprint: str
    state: BrickState


class Tombstone(BaseModel):
    """What `nexus forget` removed from a topic, recorded in its manifest chain (invariant 15).
    Ids and hashes only: never the forgotten text."""

    model_config = ConfigDict(frozen=True, defer_build=True, extra="forbid")

    tombstone_id: str
    run_ids: tuple[str, ...]
    file_sha256s: tuple[str, ...]
    brick_ids: tuple[str, ...]  # bricks removed from this topic (every source was forgotten)
    reason: str
    actor: str
    forgotten_at: str


@dataclass(frozen=True)
class ManifestHead:
    """What a manifest is known by without its brick list: its hash, the hash it chains to, and
    how many bricks it lists."""

    manifest_hash: str
    previous_hash: str | None
    bricks: int

    @classmethod
    def of(cls, manifest: "Manifest") -> "ManifestHead":
        return cls(manifest.manifest_hash, manifest.previous_hash, len(manifest.bricks))


class Manifest(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    topic_id: str
    previous_hash: str | None
    bricks: tuple[ManifestEntry, ...]
    manifest_hash: str
    tombstone: Tombstone | None = None


@cache
def _all_fields(model: type[BaseModel]) -> set[str]:
    return set(model.model_fields)


@cache
def _plain_defaults(model: type[BaseModel]) -> tuple[tuple[str, ...], dict[str, Any]] | None:
    """The model's field names and defaults when no default needs a factory (then `trusted` may
    fill them in itself), else None."""
    if any(f.default_factory is not None for f in model.model_fields.values()) or model.__pydantic_post_init__ is not None:
        return None
    return tuple(model.model_fields), {name: f.default for name, f in model.model_fields.items() if not f.is_required()}


def trusted(model: type[BaseModel], **values: Any):
    """`model` built from values already of its fields' types (read back from the vault, or computed
    from validated ones), without validating them again: validation copies every string, and a
    large topic holds hundreds of thousands. All instances share one fields-set (every field is
    given); `model_copy` copies it before adding to it.

    What `model_construct` does, minus its per-call field walk (a third of reading a big topic back)."""
    plan = _plain_defaults(model)
    if plan is None:
        return model.model_construct(_all_fields(model), **values)
    names, defaults = plan
    obj = model.__new__(model)
    # In field order, as model_construct would: dumps (and so `--json` output) follow it.
    object.__setattr__(obj, "__dict__", {k: values[k] if k in values else defaults[k] for k in names})
    object.__setattr__(obj, "__pydantic_fields_set__", _all_fields(model))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


# slots: a run may hold a million nodes, and a __dict__ each cost ~300 bytes more (invariant 12).
@dataclass(frozen=True, slots=True)
class Node:
    """A text node of a run that extractors look at (a message's content, a text part)."""

    steps: Steps
    node_type: NodeType
    timestamp: str | None
    # The message object the node belongs to; any path below it shares its timestamp.
    message_steps: Steps = ()
    branch: Branch = "current"
    hidden: bool = False
    # Filled when the node comes from the vault's nodes table rather than from a parsed document.
    text: str | None = None
    position: int = -1
    checksum: str | None = None
    # Who said it, as the format names them (the Nexus format's `name`, ChatGPT's `author.name`);
    # None: the role stands for the speaker (`speaker_of`).
    speaker: str | None = None

    @property
    def path(self) -> str:
        return format_path(self.steps)


@dataclass(frozen=True)
class Run:
    """One conversation document. Paths are relative to `document`."""

    run_id: str
    status: RunStatus
    started_at: str | None
    format: str
    document: Any
    nodes: tuple[Node, ...] = field(default=())
    version_id: str = ""
    # Entries of the conversation that were skipped (a null message, an unknown block kind),
    # as "position: problem"; the rest of the run is kept.
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @cached_property
    def positions(self) -> dict[Steps, int]:
        """Document-order index of every string leaf, for canonical order."""
        if self.document is None:
            return {n.steps: n.position for n in self.nodes}
        return {steps: i for i, (steps, _) in enumerate(string_leaves(self.document))}

    @cached_property
    def node_index(self) -> dict[str, Node]:
        """Text nodes by normalized path."""
        return {n.path: n for n in self.nodes}

    @cached_property
    def _message_timestamps(self) -> dict[Steps, str | None]:
        return {n.message_steps or n.steps: n.timestamp for n in self.nodes}

    @cached_property
    def _node_kinds(self) -> dict[Steps, tuple[NodeType, Branch]]:
        kinds: dict[Steps, tuple[NodeType, Branch]] = {}
        for n in self.nodes:
            kinds[n.steps] = (n.node_type, n.branch)
            kinds.setdefault(n.message_steps or n.steps, (n.node_type, n.branch))
        return kinds

    def kind_of(self, steps: Steps) -> tuple[NodeType | None, Branch]:
        """(node type, branch) of the node at `steps`, else of the message enclosing it."""
        kinds = self._node_kinds
        for cut in range(len(steps), -1, -1):
            if steps[:cut] in kinds:
                return kinds[steps[:cut]]
        return None, "current"

    def timestamp_of(self, steps: Steps) -> str | None:
        """The timestamp of the message enclosing `steps`, else the run's start."""
        stamps = self._message_timestamps
        for cut in range(len(steps), -1, -1):
            prefix = steps[:cut]
            if prefix in stamps and stamps[prefix] is not None:
                return stamps[prefix]
        return self.started_at


@dataclass(frozen=True)
class IngestionError:
    """A run file (or one conversation in an export) that could not be read."""

    file: str
    problem: str
    conversation: str | None = None
    file_sha256: str | None = None
