"""The LLM records: per-topic answers (`llm_calls`, the replay cache and audit trail), the requests
that carried them (`llm_requests`), and Batch API jobs (`llm_batches`). Append-only, except a
batch's status."""

from __future__ import annotations

import json
from datetime import datetime

import duckdb

from nexus_assets.llm.client import BatchRecord, CallRecord, RequestRecord
from nexus_assets.vault.connection import now
from nexus_assets.vault.records import storable_json, storable_text

CALL_COLUMNS = (
    "call_key", "topic_id", "run_id", "model", "prompt_version", "prompt_hash", "request_json", "raw_response",
    "pointers_json", "prompt_tokens", "completion_tokens", "latency_ms", "status", "error", "attempts", "chunk_index",
    "chunk_count", "response_format", "request_key", "response_bytes", "response_sha256",
)
REQUEST_COLUMNS = (
    "request_key", "run_id", "topic_ids_json", "model", "prompt_version", "prompt_hash", "request_json", "raw_response",
    "response_bytes", "response_sha256", "prompt_tokens", "completion_tokens", "latency_ms", "status", "error",
    "attempts", "chunk_index", "chunk_count", "response_format", "batch_id",
)


def _insert(conn: duckdb.DuckDBPyConnection, table: str, columns: tuple[str, ...], row: dict) -> None:
    conn.execute(
        f"INSERT INTO {table} ({', '.join(columns)}, recorded_at) VALUES ({', '.join('?' * (len(columns) + 1))})",
        [storable_text(v) if isinstance(v := row.get(c), str) else v for c in columns] + [now()],
    )


class LLMCallRecords:
    """The LLM client's CallStore over the vault's connection. Each record is committed as it is
    written (no transaction is held), so a paid-for answer survives a later failure."""

    def __init__(self, conn: duckdb.DuckDBPyConnection):
        self.conn = conn

    # The CallStore protocol

    def get(self, key: str) -> CallRecord | None:
        cur = self.conn.execute(
            f"SELECT {', '.join(CALL_COLUMNS)} FROM llm_calls WHERE call_key = ? AND status = 'ok' ORDER BY recorded_at LIMIT 1",
            [key],
        )
        rows = cur.fetchall()
        if not rows:
            return None
        row = dict(zip(CALL_COLUMNS, rows[0]))
        return CallRecord(
            key=row.pop("call_key"),
            pointers=json.loads(row.pop("pointers_json")),
            **row,
        )

    def put(self, record: CallRecord) -> None:
        row = record.model_dump(exclude={"key", "pointers", "cached"})
        _insert(self.conn, "llm_calls", CALL_COLUMNS, {**row, "call_key": record.key, "pointers_json": storable_json(record.pointers)})

    def put_request(self, record: RequestRecord) -> None:
        row = record.model_dump(exclude={"key", "topic_ids"})
        _insert(
            self.conn, "llm_requests", REQUEST_COLUMNS, {**row, "request_key": record.key, "topic_ids_json": storable_json(record.topic_ids)}
        )

    def open_batches(self, model: str) -> list[BatchRecord]:
        rows = self.conn.execute(
            """SELECT batch_id, input_file_id, model, request_keys_json, status FROM llm_batches
               WHERE model = ? AND status <> 'applied' ORDER BY created_at, batch_id""",
            [model],
        ).fetchall()
        return [
            BatchRecord(batch_id=b, input_file_id=f, model=m, request_keys=json.loads(k), status=s) for b, f, m, k, s in rows
        ]

    def put_batch(self, record: BatchRecord) -> None:
        self.conn.execute(
            """INSERT INTO llm_batches VALUES (?, ?, ?, ?, ?, ?, NULL)
               ON CONFLICT (batch_id) DO UPDATE SET status = excluded.status,
                   finished_at = CASE WHEN excluded.status = 'applied' THEN now() ELSE NULL END""",
            [record.batch_id, record.model, record.input_file_id, storable_json(record.request_keys), record.status, now()],
        )

    # Reading the audit trail

    @property
    def _request_join(self) -> str:
        if getattr(self.conn, "backend", "duckdb") == "postgresql":  # no ASOF join there
            return """LEFT JOIN LATERAL (SELECT * FROM llm_requests r WHERE r.request_key = c.request_key
                                         AND r.recorded_at <= c.recorded_at ORDER BY r.recorded_at DESC LIMIT 1) q ON true"""
        return "ASOF LEFT JOIN llm_requests q ON q.request_key = c.request_key AND c.recorded_at >= q.recorded_at"

    def calls(self, topic_id: str | None = None) -> list[dict]:
        """Every answer of the topic (or all), oldest first, with what its request sent and cost.
        An answer that shared its request with other topics shows the request's tokens."""
        where = "WHERE c.topic_id = ?" if topic_id else ""
        cur = self.conn.execute(
            f"""SELECT c.call_key, c.topic_id, c.run_id, c.model, c.prompt_version, c.prompt_hash, c.status, c.error,
                       c.attempts, coalesce(c.prompt_tokens, q.prompt_tokens) AS prompt_tokens,
                       coalesce(c.completion_tokens, q.completion_tokens) AS completion_tokens,
                       coalesce(c.latency_ms, q.latency_ms) AS latency_ms, c.chunk_index, c.chunk_count,
                       c.response_format, c.recorded_at, coalesce(c.raw_response, q.raw_response) AS raw_response,
                       c.request_key, coalesce(c.response_bytes, q.response_bytes) AS response_bytes,
                       coalesce(c.response_sha256, q.response_sha256) AS response_sha256,
                       coalesce(json_array_length(q.topic_ids_json), 1) AS topics_in_request, q.batch_id
                FROM llm_calls c
                -- the request as sent for this answer: the newest one with its key recorded before it
                {self._request_join}
                {where} ORDER BY c.recorded_at, c.call_key""",
            [topic_id] if topic_id else [],
        )
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def tokens_since(self, since: datetime) -> tuple[int, int]:
        """(prompt, completion) tokens of the requests recorded since `since`: what a sync has spent."""
        row = self.conn.execute(
            "SELECT coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0) FROM llm_requests WHERE recorded_at >= ?",
            [since],
        ).fetchone()
        return int(row[0]), int(row[1])

