"""`nexus sync --batch`: a backfill through the OpenAI Batch API (`/v1/files` + `/v1/batches`).

Half the price on OpenAI, answered within a day instead of at once. Each batch is recorded in the
vault before the sync waits for it, so a sync that is interrupted (or stops waiting) resumes the
same batch next time instead of paying for its requests twice. Replies are applied exactly like
synchronous ones (the same per-topic answers, stored and replayed the same way).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import TYPE_CHECKING, Callable, Protocol

from nexus_assets.llm.transport import (
    ChatTransport,
    Fatal,
    TransportError,
    parse_completion,
)

from nexus_assets.llm.config import LLMFatalError
from nexus_assets.llm.outcomes import ExtractionBatch, SendProgress
from nexus_assets.llm.records import BatchRecord, CallStore
from nexus_assets.llm.replies import POINTER_FORMATS

if TYPE_CHECKING:
    from nexus_assets.llm.requests import Request


class ReplySink(Protocol):
    """What the batch path hands each answer to: the client that planned the requests
    (`PointerClient`), named by what it does so this module does not import it."""

    def apply_reply(self, request: Request, store: CallStore, result: ExtractionBatch, *, reply=None, error=None, batch_id=None) -> None: ...

    def mark_unsent(self, request: Request, result: ExtractionBatch) -> None: ...


ENDPOINT = "/v1/chat/completions"
# A batch in one of these states will produce no more output.
FINISHED = ("completed", "failed", "expired", "cancelled")


def batch_line(request: Request, chat: ChatTransport) -> dict:
    cfg = chat.config
    _, response_format = chat_formats(chat)
    body = {
        "model": cfg.model,
        "messages": request.messages,
        "temperature": 0,
        "seed": cfg.seed,
        chat.token_param: cfg.max_output_tokens,
    }
    if response_format is not None:
        body["response_format"] = response_format
    return {"custom_id": request.key, "method": "POST", "url": ENDPOINT, "body": body}


def chat_formats(chat: ChatTransport):
    return POINTER_FORMATS[min(chat.format_index, len(POINTER_FORMATS) - 1)]


async def _submit(chat: ChatTransport, requests: list[Request], store: CallStore) -> BatchRecord:
    data = "\n".join(json.dumps(batch_line(r, chat), ensure_ascii=False) for r in requests).encode("utf-8", "surrogatepass")
    name = f"nexus-{hashlib.sha256(data).hexdigest()[:16]}.jsonl"
    uploaded = await chat.sdk.files.create(file=(name, data), purpose="batch")
    batch = await chat.sdk.batches.create(input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h")
    record = BatchRecord(
        batch_id=batch.id,
        input_file_id=uploaded.id,
        model=chat.config.model,
        request_keys=[r.key for r in requests],
        status=batch.status,
    )
    store.put_batch(record)  # before waiting: an interrupted sync resumes this batch
    return record


async def _lines(chat: ChatTransport, file_id: str | None) -> list[dict]:
    if not file_id:
        return []
    content = await chat.sdk.files.content(file_id)
    out = []
    for line in content.content.splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a damaged line leaves its request unanswered: asked again next sync
    return out


def _reply_of(line: dict, chat: ChatTransport, mode: str):
    """A batch output line as a ChatReply, or the TransportError it amounts to."""
    url = chat.config.base_url
    response = line.get("response") if isinstance(line.get("response"), dict) else None
    error = line.get("error") if isinstance(line.get("error"), dict) else None
    if response is None or response.get("status_code") != 200:
        status = response.get("status_code") if response else None
        body = (response or {}).get("body")
        server_error = body.get("error") if isinstance(body, dict) else None
        message = (error or {}).get("message") or (server_error.get("message") if isinstance(server_error, dict) else None)
        return TransportError(f"the batch answered {status or 'an error'} for this request: {message or 'no detail'}")
    body = json.dumps(response.get("body"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    if len(body) > chat.config.max_reply_bytes:
        return TransportError(
            f"the reply was over {chat.config.max_reply_bytes:,} bytes (NEXUS_LLM_MAX_REPLY_BYTES; {len(body):,} bytes)",
            response_bytes=len(body),
            kept=body[:4096].decode("utf-8", "replace"),
        )
    try:
        return parse_completion(body, url=url, latency_ms=0, attempts=1, mode=mode)
    except TransportError as exc:
        return exc


async def run_batches(
    client: ReplySink,
    chat: ChatTransport,
    requests: list[Request],
    store: CallStore,
    result: ExtractionBatch,
    progress: Callable[[SendProgress], None] | None,
) -> None:
    import openai

    cfg = chat.config
    by_key = {r.key: r for r in requests}
    tracker = SendProgress(total=len(requests))
    waiting: list[BatchRecord] = []
    covered: set[str] = set()
    for recorded in store.open_batches(cfg.model):
        if any(k in by_key for k in recorded.request_keys):
            waiting.append(recorded)
            covered.update(recorded.request_keys)
    fresh = [r for r in requests if r.key not in covered]
    mode, _ = chat_formats(chat)
    try:
        if fresh:
            waiting.append(await _submit(chat, fresh, store))
        deadline = time.monotonic() + cfg.batch_wait_s
        pending = {b.batch_id: b for b in waiting}
        while pending:
            for batch_id, recorded in list(pending.items()):
                batch = await chat.sdk.batches.retrieve(batch_id)
                if batch.status not in FINISHED:
                    continue
                answered = set()
                for line in await _lines(chat, batch.output_file_id) + await _lines(chat, batch.error_file_id):
                    request = by_key.get(line.get("custom_id"))
                    if request is None or request.key in answered:
                        continue  # asked by an earlier sync and not needed now, or a duplicate line
                    answered.add(request.key)
                    reply = _reply_of(line, chat, mode)
                    if isinstance(reply, TransportError):
                        client.apply_reply(request, store, result, error=reply, batch_id=batch_id)
                    else:
                        client.apply_reply(request, store, result, reply=reply, batch_id=batch_id)
                    tracker.done += 1
                for key in recorded.request_keys:
                    if key in by_key and key not in answered:
                        missing = TransportError(f"the batch ended ({batch.status}) without a reply for this request")
                        client.apply_reply(by_key[key], store, result, error=missing, batch_id=batch_id)
                        tracker.done += 1
                store.put_batch(recorded.model_copy(update={"status": "applied"}))
                result.batch_ids.append(batch_id)
                del pending[batch_id]
                if progress is not None:
                    progress(tracker)
            if pending:
                if time.monotonic() >= deadline:
                    for recorded in pending.values():
                        result.batch_ids.append(recorded.batch_id)
                        for key in recorded.request_keys:
                            if key in by_key:
                                client.mark_unsent(by_key[key], result)
                    return
                await asyncio.sleep(cfg.batch_poll_s)
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        result.fatal = LLMFatalError(f"{cfg.base_url} refused the batch request ({exc.status_code}): {exc.message}")
    except openai.NotFoundError:
        result.fatal = LLMFatalError(f"{cfg.base_url} has no Batch API (/files, /batches); sync without --batch")
    except (openai.APIError, Fatal) as exc:
        for request in requests:
            if not any(c.request_key == request.key for s in request.shares for c in result.outcomes[(s.topic.topic_id, s.run_id)].calls):
                client.apply_reply(request, store, result, error=TransportError(f"the batch could not be submitted or read: {exc}"))
