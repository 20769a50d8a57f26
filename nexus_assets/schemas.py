"""The outside objects of docs/cli.md as pydantic models: what `--json` prints, what the HTTP API
answers (§10) and what the MCP tools return (§10.1). One set, so a tool is a route by another
door and a route is a command by another door.

Objects whose inner shape belongs to a phase (lineage, a conflict's sides, a recall result's
extra scores) allow extra fields: the fields named here are the contract; a phase may add more.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from nexus_assets.core import bounds
from nexus_assets.core.models import BrickState, ManifestEntry, RunStatus, SourceAddress, TopicState
from nexus_assets.extract.registry import ExtractorName

MinState = Literal["IMPROVISE", "FORMING", "FINAL"]
# IMPROVISE < FORMING < FINAL (docs/agents.md); SUPERSEDED is not on this ladder.
STATE_RANK = {"IMPROVISE": 0, "FORMING": 1, "FINAL": 2}


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class NamedSource(SourceAddress):
    """A source address with its conversation's title and start date, as a person names it."""

    run_title: str | None = None
    run_date: str | None = None


class BrickOut(BaseModel):
    """A brick as `nexus bricks --json` prints it: canonical source first."""

    brick_id: str
    topic_id: str
    content: str
    fingerprint: str
    state: BrickState
    order_index: int | None
    superseded_by: str | None = None
    stale: bool = False
    sources: list[NamedSource]
    abandoned: bool = False  # every source is on an abandoned branch
    # Why a brick left the manifest (superseded with no superseding brick): a person dropped it, or
    # the topic's definition or selector no longer selects it (docs/quality.md). None for every other brick.
    left_because: str | None = None


class TopicSummary(BaseModel):
    topic_id: str
    display_name: str | None
    state: TopicState | str
    ordering_rule: str | None
    bricks: dict[str, int]  # by state
    visible_bricks: int
    manifest_hash: str | None
    # How many keep and drop examples a person gave it (`nexus keep` / `nexus drop`, docs/inputs.md).
    examples: dict[str, int] = Field(default_factory=lambda: {"keep": 0, "drop": 0})


class ManifestOut(BaseModel):
    topic_id: str
    manifest_hash: str
    previous_hash: str | None
    bricks: list[ManifestEntry]


class RecallSource(SourceAddress):
    """A recall result's source; a passage's one source also names its conversation, speaker and time."""

    model_config = ConfigDict(frozen=True, extra="allow")

    time: str | None = None
    run_title: str | None = None
    run_date: str | None = None


class RecallResult(_Open):
    """A note (`kind` brick: `brick_id, topic_id, state`) or a sentence of the record (`kind` passage:
    `passage_id`, and `topic_ids`, the asked topics whose record holds it); `id` is either id."""

    kind: Literal["brick", "passage"]
    id: str
    content: str
    confidence: float = Field(ge=0, le=1)
    reranker_used: str
    sources: list[RecallSource]
    brick_id: str | None = None
    topic_id: str | None = None
    state: BrickState | None = None
    passage_id: str | None = None
    topic_ids: list[str] | None = None


class RecallOut(_Open):
    query: str
    model: str
    topics: list[str]
    results: list[RecallResult]
    reranker_used: str | None
    fell_through: list[str]
    not_embedded: int


class AroundPassage(BaseModel):
    """A passage of the same message, in order (`PassageOut.around`): the text around a passage."""

    passage_id: str
    content: str
    start: int
    end: int


class PassageOut(_Open):
    """One passage of the record where it was said (`GET /v1/passages/{id}`, MCP `get_brick`,
    `nexus trace ID --json`, which adds the whole message as `node_text`): its text, its one source
    (address, speaker, time, the conversation's title and date), the passages around it in its
    message (itself among them), and whether the run file still holds it as recorded (`current`;
    `problem` says why not, and the source is then `stale`)."""

    kind: Literal["passage"] = "passage"
    passage_id: str
    content: str
    speaker: str | None
    time: str | None
    run_title: str | None
    run_date: str | None
    conversation: str
    sources: list[RecallSource]
    around: list[AroundPassage]
    current: bool
    problem: str | None
    run_status: RunStatus | None
    version_id: str
    source_file: str | None
    line: int | None = None  # a session's node: the line of its file
    viewer_url: str


class Sentence(BaseModel):
    """An answer sentence and what it cites: its text is their texts verbatim (invariant 16)."""

    text: str
    brick_ids: list[str]
    passage_ids: list[str] = Field(default_factory=list)


class Grounding(_Open):
    """Where a cited brick or passage was said (`kind`; `brick_id` null for a passage)."""

    kind: Literal["brick", "passage"] = "brick"
    id: str | None = None
    brick_id: str | None
    passage_id: str | None = None
    content_snippet: str
    run_id: str
    json_path: str
    start: int
    end: int
    viewer_url: str
    confidence: float
    retrieval_timestamp: str


class AnswerOut(_Open):
    """An answer, or a refusal (`outcome` refused, `answer` null, `reason` says why); always audited."""

    outcome: Literal["answered", "refused"]
    answer: str | None
    refused: bool
    reason: str | None
    sentences: list[Sentence]
    ccc: float
    revisions: int
    model: str
    audit_id: str
    sources: list[Grounding]


class AskPreview(BaseModel):
    """The bricks and passages an answer would cite (the recall it would rest on); nothing audited."""

    question: str
    topics: list[str]
    bricks: list[RecallResult]


class SearchHit(BaseModel):
    rank: int
    brick_id: str
    topic_id: str
    content: str
    state: BrickState | None
    order_index: int | None
    stale: bool | None
    score: float
    highlights: list[dict[str, int]]
    highlighted: str
    sources: list[SourceAddress]
    # The conversation the brick was said in (its canonical source), as `nexus bricks` names it.
    run_title: str | None = None
    run_date: str | None = None
    conversation: str | None = None


class ConflictSide(_Open):
    brick_id: str
    content: str
    state: BrickState
    said_at: str | None
    run_title: str | None


class Conflict(_Open):
    topic_id: str
    similarity: float
    conflict: str
    bricks: list[ConflictSide]


class Lineage(_Open):
    direction: Literal["backwards"]
    brick: dict
    sources: list[dict]
    manifests: list[dict]
    sealed: bool


class Health(BaseModel):
    status: Literal["ok"]
    vault: str
    schema_version: int


class SyncInitiate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic_ids: list[str] | None = Field(default=None, max_length=bounds.SYNC_TOPICS)
    run_ids: list[str] | None = Field(default=None, max_length=bounds.SYNC_RUN_IDS)
    force_recompile: bool = False
    extractor: ExtractorName | None = None


class SyncAccepted(BaseModel):
    sync_job_id: str
    status_url: str


class SyncJob(BaseModel):
    sync_job_id: str
    status: Literal["queued", "running", "succeeded", "failed"]
    topics: list[str]
    started_at: str | None
    finished_at: str | None
    error: str | None
    dagster_run_ids: list[str] = []
    results: list[dict] = []  # per topic, as `nexus sync --json`, once finished


class RunMessage(BaseModel):
    """One message pushed into a run (docs/agents.md): its `id` makes a retried push add nothing."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=bounds.MESSAGE_ID_CHARS[0], max_length=bounds.MESSAGE_ID_CHARS[1])
    role: str = Field(min_length=bounds.ROLE_CHARS[0], max_length=bounds.ROLE_CHARS[1])
    content: str
    # Who said it (docs/inputs.md), as in OpenAI chat messages: every brick from it names this speaker.
    name: str | None = Field(default=None, min_length=1, max_length=bounds.NAME_CHARS)
    timestamp: str | None = None


class RunMessages(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[RunMessage] = Field(min_length=bounds.MESSAGES[0], max_length=bounds.MESSAGES[1])


class RunPushed(BaseModel):
    """What a push did: the run as it stands now, and the sync it queued (None when no ACTIVE topic reads it)."""

    run_id: str
    status: RunStatus
    messages: int  # messages the run holds now
    added: int  # messages this push added (0 for a retry)
    sync_job_id: str | None = None


class Problem(_Open):
    """RFC 9457 problem details."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None


class TeachBody(BaseModel):
    """`POST /v1/bricks/{id}/keep|drop`: why (optional), recorded in the vault's audit trail."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=bounds.REASON_CHARS)


class Taught(BaseModel):
    """A person's judgement taken (`nexus keep` / `nexus drop --json`): the brick's text joined its
    topic file's examples; the next sync selects with them."""

    topic_id: str
    brick_id: str
    verdict: Literal["keep", "drop"]
    content: str
    reason: str | None
    actor: str
    topic_file: str
    file_changed: bool
    examples: dict[str, int]
    next: str
