"""Requests to one OpenAI-compatible endpoint: concurrent, rate-limited, bounded as a whole.

What this adds to the SDK's async client (which it uses for HTTP, auth and error mapping):
- each request is bounded from connect to last byte (`timeout_s`); the SDK's own timeout bounds
  each socket read, so an endpoint that drips one byte every few seconds would hang it for good;
- a reply is read as a stream and cut off past `max_reply_bytes`, so it is never held whole;
- retries by tenacity: a `429`'s `Retry-After` is waited out in full (never retried early; a wait
  longer than the request timeout gives up instead), 5xx and refused connections back off
  exponentially with jitter;
- optional requests- and tokens-per-minute ceilings (aiolimiter) and a bound on requests in flight.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    stop_any,
    wait_exponential_jitter,
)

if TYPE_CHECKING:
    import openai

    from nexus_assets.llm.config import LLMConfig

# What is kept of a reply over the size limit: enough to see what the server was sending.
KEPT_PREFIX_CHARS = 4096

ResponseFormats = tuple[tuple[str, "dict[str, Any] | None"], ...]


class TransportError(Exception):
    """One request got no usable answer; `attempts` requests were sent for it."""

    def __init__(self, message: str, *, attempts: int = 1, response_bytes: int | None = None, kept: str | None = None):
        super().__init__(message)
        self.attempts = attempts
        self.response_bytes = response_bytes
        self.kept = kept  # the start of an oversized reply, never the whole of it


class Fatal(TransportError):
    """The endpoint refuses every request (bad key, unknown model, wrong URL)."""


@dataclass(frozen=True)
class ChatReply:
    """What one successful request returned; `latency_ms` is the last attempt's round trip."""

    text: str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_ms: int
    attempts: int
    response_format: str
    response_bytes: int
    response_sha256: str

    def record_fields(self) -> dict[str, Any]:
        """The reply's part of a stored call."""
        return dict(
            raw_response=self.text,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            latency_ms=self.latency_ms,
            attempts=self.attempts,
            response_format=self.response_format,
            response_bytes=self.response_bytes,
            response_sha256=self.response_sha256,
        )


class _TooLarge(Exception):
    def __init__(self, size: int, head: bytes):
        self.size, self.head = size, head


class _TimedOut(Exception):
    pass


def _one_line(text: object, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict) and body.get("message"):
        return _one_line(body["message"])
    return _one_line(exc.message)


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, `retry-after` in seconds or as a date)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(raw) if raw.strip() else None
        return None if parsed is None else max(0.0, parsed.timestamp() - time.time())


def _transient(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return False  # the whole-request bound is ours; a read timeout inside it is not retried either
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return isinstance(exc, openai.APIConnectionError)


class _Wait:
    """tenacity's wait: a server's Retry-After in full (plus a little jitter, never less), else
    exponential backoff with jitter (0.5 s, 1 s, 2 s, … up to 8 s)."""

    def __init__(self) -> None:
        self._backoff = wait_exponential_jitter(initial=0.5, max=8, jitter=0.25)

    def __call__(self, state) -> float:
        asked = retry_after_s(state.outcome.exception())
        if asked is not None:
            return asked * (1 + random.random() * 0.05)
        return self._backoff(state)


class ChatTransport:
    """Chat completions against one endpoint from one event loop. Create it inside that loop."""

    def __init__(self, config: LLMConfig):
        import openai
        from aiolimiter import AsyncLimiter

        self.config = config
        # max_retries=0: retries are tenacity's, so Retry-After is honoured in full.
        self.sdk = openai.AsyncOpenAI(
            base_url=config.base_url, api_key=config.api_key, timeout=config.timeout_s, max_retries=0
        )
        self.slots = asyncio.Semaphore(config.concurrency)
        self.rpm = AsyncLimiter(config.rpm, 60) if config.rpm else None
        self.tpm = AsyncLimiter(config.tpm, 60) if config.tpm else None
        self.in_flight = 0
        self.peak_in_flight = 0
        self.format_index = 0  # first response_format the server accepted; kept across calls
        self.token_param = "max_tokens"  # newer OpenAI models insist on max_completion_tokens

    async def close(self) -> None:
        await self.sdk.close()

    def _fatal(self, exc: openai.APIStatusError, attempts: int) -> Fatal:
        url, status = self.config.base_url, exc.status_code
        if status == 401:
            return Fatal(f"OPENAI_API_KEY was refused by {url} (401)", attempts=attempts)
        if status == 403:
            return Fatal(
                f"OPENAI_API_KEY may not use model {self.config.model!r} at {url} (403): {server_message(exc)}",
                attempts=attempts,
            )
        body = exc.body if isinstance(exc.body, dict) else {}
        message = server_message(exc)
        if body.get("code") == "model_not_found" or "model" in message.lower():
            return Fatal(f"model {self.config.model!r} is unknown to {url} (404)", attempts=attempts)
        return Fatal(f"{url} has no chat completions endpoint (404); OPENAI_BASE_URL usually ends in /v1", attempts=attempts)

    async def _one_request(self, kwargs: dict[str, Any], retry_count: int, tokens: int) -> tuple[bytes, int]:
        """One HTTP request, read to its last byte within the timeout: (body, latency_ms)."""
        cfg = self.config
        if self.rpm is not None:
            await self.rpm.acquire()
        if self.tpm is not None:
            await self.tpm.acquire(min(tokens, self.tpm.max_rate))
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        started = time.monotonic()
        try:
            async with asyncio.timeout(cfg.timeout_s):
                async with self.sdk.chat.completions.with_streaming_response.create(
                    **kwargs, extra_headers={"x-stainless-retry-count": str(retry_count)}
                ) as response:
                    declared = response.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > cfg.max_reply_bytes:
                        raise _TooLarge(int(declared), b"")
                    body = bytearray()
                    async for piece in response.iter_bytes():
                        body += piece
                        if len(body) > cfg.max_reply_bytes:
                            raise _TooLarge(len(body), bytes(body[: KEPT_PREFIX_CHARS * 4]))
        except TimeoutError:
            raise _TimedOut() from None
        finally:
            self.in_flight -= 1
        return bytes(body), round((time.monotonic() - started) * 1000)

    async def complete(self, messages: list[dict[str, Any]], formats: ResponseFormats, *, tokens: int = 0) -> ChatReply:
        """One chat completion: retried where that can help, with the response_format ladder.
        Raises Fatal (stop everything) or TransportError (this request only)."""
        async with self.slots:
            return await self.send(messages, formats, tokens=tokens)

    async def send(self, messages: list[dict[str, Any]], formats: ResponseFormats, *, tokens: int = 0) -> ChatReply:
        """`complete` for a caller that already holds one of `slots`."""
        import openai

        cfg = self.config
        url = cfg.base_url
        format_index, token_param = min(self.format_index, len(formats) - 1), self.token_param
        attempts = 0
        while True:
            mode, response_format = formats[format_index]
            kwargs: dict[str, Any] = {
                "model": cfg.model,
                "messages": messages,
                "temperature": 0,
                "seed": cfg.seed,
                "stream": False,
                token_param: cfg.max_output_tokens,
            }
            if response_format is not None:
                kwargs["response_format"] = response_format
            retrying = AsyncRetrying(
                retry=retry_if_exception(_transient),
                stop=stop_any(stop_after_attempt(cfg.max_retries + 1), _StopWhenAskedToWaitTooLong(cfg.timeout_s)),
                wait=_Wait(),
                reraise=True,
            )
            try:
                async for attempt in retrying:
                    with attempt:
                        attempts += 1
                        body, latency_ms = await self._one_request(kwargs, attempt.retry_state.attempt_number - 1, tokens)
            except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
                raise self._fatal(exc, attempts) from None
            except openai.BadRequestError as exc:
                message = server_message(exc)
                if token_param == "max_tokens" and "max_completion_tokens" in message:
                    token_param = "max_completion_tokens"
                    continue
                # Which 400 means "unsupported response_format" differs per server: try the next
                # rung and only remember a rung once a request through it succeeded.
                if format_index + 1 < len(formats):
                    format_index += 1
                    continue
                raise TransportError(f"{url} rejected the request (400): {message}", attempts=attempts) from None
            except _TimedOut:
                raise TransportError(
                    f"no complete answer within {cfg.timeout_s:g}s (NEXUS_LLM_TIMEOUT bounds each request as a whole)",
                    attempts=attempts,
                ) from None
            except _TooLarge as exc:
                raise TransportError(
                    f"the reply was over {cfg.max_reply_bytes:,} bytes (NEXUS_LLM_MAX_REPLY_BYTES; "
                    f"{exc.size:,} bytes read before it was cut off)",
                    attempts=attempts,
                    response_bytes=exc.size,
                    kept=exc.head.decode("utf-8", "replace")[:KEPT_PREFIX_CHARS],
                ) from None
            except (openai.APIStatusError, openai.APIConnectionError) as exc:
                raise self._failed(exc, attempts) from None
            except UnicodeEncodeError:
                # Nothing was sent: a lone surrogate that JSON input may carry cannot be encoded.
                raise TransportError(
                    "the source text holds invalid Unicode (a lone surrogate) and cannot be sent", attempts=attempts - 1
                ) from None
            self.format_index, self.token_param = format_index, token_param
            return parse_completion(body, url=url, latency_ms=latency_ms, attempts=attempts, mode=mode)

    def _failed(self, exc: Exception, attempts: int) -> TransportError:
        """What a failed status or connection says once retrying stopped (or would not help)."""
        import openai

        cfg, url = self.config, self.config.base_url
        status = getattr(exc, "status_code", None)
        if isinstance(exc, openai.APITimeoutError):
            what = f"no answer within {cfg.timeout_s:g}s"
        elif isinstance(exc, openai.APIStatusError):
            what = f"{url} answered {status}: {server_message(exc)}"
            asked = retry_after_s(exc)
            if status == 429 and asked is not None and asked > cfg.timeout_s:
                return TransportError(
                    f"{what}; it asks to wait {asked:.0f}s, longer than NEXUS_LLM_TIMEOUT; asked again next sync",
                    attempts=attempts,
                )
        else:
            what = f"could not connect to {url}: {_one_line(exc)}"
        if not _transient(exc):
            return TransportError(what, attempts=attempts)
        return TransportError(f"gave up after {attempts} attempts; last: {what}", attempts=attempts)


class _StopWhenAskedToWaitTooLong:
    """Stop retrying when the server asks for a wait longer than a request may take: better to ask
    again at the next sync than to hold a sync (or retry early)."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s

    def __call__(self, state) -> bool:
        asked = retry_after_s(state.outcome.exception()) if state.outcome is not None and state.outcome.failed else None
        return asked is not None and asked > self.limit_s



def parse_completion(body: bytes, *, url: str, latency_ms: int, attempts: int, mode: str) -> ChatReply:
    """A chat completion's fields, read leniently from its JSON (servers differ in what they omit)."""
    try:
        data = json.loads(body)
    except ValueError:
        raise TransportError(f"{url} gave an unusable answer: not JSON: {_one_line(body[:200])}", attempts=attempts) from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise TransportError(f"{url} returned no choices", attempts=attempts)
    choice = choices[0]
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    text = message.get("content")
    return ChatReply(
        text=text if isinstance(text, str) else None,
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else None,
        completion_tokens=usage.get("completion_tokens") if isinstance(usage.get("completion_tokens"), int) else None,
        latency_ms=latency_ms,
        attempts=attempts,
        response_format=mode,
        response_bytes=len(body),
        response_sha256=hashlib.sha256(body).hexdigest(),
    )
