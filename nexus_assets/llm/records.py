"""What the LLM path keeps: each topic's answer (replayed by its key), each request as sent, each
Batch API job; and the `CallStore` interface the vault implements (nexus_assets/llm/store.py, `vault.llm_calls`)."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field


class _Exchange(BaseModel):
    """What one LLM exchange records, whether kept per request or per topic answer."""

    model_config = ConfigDict(frozen=True)

    key: str
    run_id: str
    model: str
    prompt_version: str
    prompt_hash: str
    request_json: str
    raw_response: str | None = None  # for a reply over the size limit, only its start
    response_bytes: int | None = None
    response_sha256: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: int | None = None
    status: Literal["ok", "failed"]
    error: str | None = None
    attempts: int = 0
    chunk_index: int = 0
    chunk_count: int = 1
    response_format: str | None = None  # json_schema | json_object | none: what the server accepted


class CallRecord(_Exchange):
    """One topic's answer for one chunk, as kept in the audit trail and replayed by `key`.
    `pointers` are raw and untrusted. Since prompt v2 the request itself (sent once for every topic
    that needed the chunk) is a RequestRecord named by `request_key`, and `request_json` holds only
    this topic's part of the prompt."""

    topic_id: str
    pointers: list[Any] = Field(default_factory=list)
    request_key: str | None = None
    cached: bool = False  # set on records replayed from the store, never stored as True


class RequestRecord(_Exchange):
    """One request as sent (possibly for several topics; `request_json` is its canonical JSON) and
    what came back; never replayed itself."""

    topic_ids: list[str]
    batch_id: str | None = None


class BatchRecord(BaseModel):
    """A Batch API job this vault paid for: its requests are answered by it, never sent twice."""

    batch_id: str
    input_file_id: str
    model: str
    request_keys: list[str]
    status: str


class CallStore(Protocol):
    def get(self, key: str) -> CallRecord | None:
        """The stored *successful* answer for `key`; failed calls are never returned."""

    def put(self, record: CallRecord) -> None:
        """Keep a record (ok or failed); append-only."""

    def put_request(self, record: RequestRecord) -> None:
        """Keep what one request sent and got back; append-only."""

    def open_batches(self, model: str) -> list[BatchRecord]:
        """Batches of `model` whose replies have not been applied yet."""

    def put_batch(self, record: BatchRecord) -> None:
        """Record a batch (or its new status)."""
