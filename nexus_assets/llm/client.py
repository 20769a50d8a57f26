"""The `openai` pointer extractor (DESIGN §5): any OpenAI-compatible Chat Completions endpoint.

The model only points; its reply is parsed here but never trusted (the gate upstream checks
every pointer). Each request is keyed by (model, prompt version, rendered-prompt hash) and stored
through a `CallStore`, so a re-run replays from the store, sends nothing and costs nothing.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Protocol

from pydantic import BaseModel, ConfigDict, Field

from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.core.models import Node, Run, Topic
from nexus_assets.llm.chunking import DEFAULT_TOKEN_BUDGET, chunk_nodes
from nexus_assets.llm.prompt import POINTER_SCHEMA, PROMPT_VERSION, build_fragment, render_messages

if TYPE_CHECKING:
    import openai


class LLMError(Exception):
    """Base of the errors this module raises."""


class LLMConfigError(LLMError, ValueError):
    """The environment does not describe a usable endpoint."""


class LLMFatalError(LLMError):
    """The endpoint refuses every request (bad key, unknown model, wrong URL): retrying is pointless."""

    attempts: int = 1  # requests sent for the call that hit it


class ReplyNotJSON(LLMError, ValueError):
    """The model's reply holds no pointer JSON. Makes the call fail; never a crash."""


class CacheMiss(LLMError):
    """replay_only was asked, but a chunk has no stored successful call."""

    def __init__(self, key: str, topic: Topic | str, run: Run | str):
        self.key = key
        self.topic_id = topic.topic_id if isinstance(topic, Topic) else topic
        self.run_id = run.run_id if isinstance(run, Run) else run
        super().__init__(
            f"no stored LLM reply for topic {self.topic_id!r}, run {self.run_id!r} (call key {key[:12]}…); "
            "run without replay-only to call the model"
        )


class LLMConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    api_key: str = Field(repr=False)  # kept out of reprs and logs
    model: str
    timeout_s: float = 60.0
    max_retries: int = Field(default=4, ge=0)  # the SDK's: 408/409/429/5xx and timeouts, with backoff
    seed: int = 7
    max_output_tokens: int = Field(default=2048, ge=1)
    price_in_per_mtok: float | None = None
    price_out_per_mtok: float | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> "LLMConfig":
        """Read OPENAI_BASE_URL, OPENAI_API_KEY, NEXUS_LLM_MODEL (required) and
        NEXUS_PRICE_IN_PER_MTOK / NEXUS_PRICE_OUT_PER_MTOK (optional, USD per million tokens)."""
        env = os.environ if env is None else env
        required = {"base_url": "OPENAI_BASE_URL", "api_key": "OPENAI_API_KEY", "model": "NEXUS_LLM_MODEL"}
        missing = [var for var in required.values() if not (env.get(var) or "").strip()]
        if missing:
            raise LLMConfigError(
                f"the openai extractor needs {', '.join(missing)} to be set "
                "(OPENAI_BASE_URL is the OpenAI-compatible endpoint, e.g. https://api.openai.com/v1 "
                "or http://127.0.0.1:8080/v1; NEXUS_LLM_MODEL the model name it serves)"
            )
        values: dict[str, Any] = {field: env[var].strip() for field, var in required.items()}
        for field_name, var in (
            ("price_in_per_mtok", "NEXUS_PRICE_IN_PER_MTOK"),
            ("price_out_per_mtok", "NEXUS_PRICE_OUT_PER_MTOK"),
        ):
            raw = (env.get(var) or "").strip()
            if raw:
                try:
                    price = float(raw)
                except ValueError:
                    raise LLMConfigError(f"{var}={raw!r} is not a number (USD per million tokens)") from None
                if not math.isfinite(price) or price < 0:
                    raise LLMConfigError(f"{var}={raw!r} must be a non-negative number (USD per million tokens)")
                values[field_name] = price
        values.update(overrides)
        return cls(**values)


def prompt_hash(messages: list[dict[str, Any]]) -> str:
    # surrogatepass: JSON input may carry lone surrogates ("\\ud800"); hash them rather than crash.
    return sha256_hex(canonical_json(messages).encode("utf-8", "surrogatepass"))


def call_key(model: str, prompt_version: str, messages: list[dict[str, Any]]) -> str:
    """The materialization key of one call: same model + prompt version + rendered prompt = same reply."""
    return sha256_hex(canonical_json([model, prompt_version, prompt_hash(messages)]))


class CallRecord(BaseModel):
    """One chunk's LLM call, as kept in the audit trail. `pointers` are raw and untrusted."""

    model_config = ConfigDict(frozen=True)

    key: str
    topic_id: str
    run_id: str
    model: str
    prompt_version: str
    prompt_hash: str
    request_json: str  # canonical JSON of the rendered messages
    raw_response: str | None = None
    pointers: list[Any] = Field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: int | None = None
    status: Literal["ok", "failed"]
    error: str | None = None
    attempts: int = 0
    chunk_index: int = 0
    chunk_count: int = 1
    response_format: str | None = None  # json_schema | json_object | none: what the server accepted
    cached: bool = False  # set on records replayed from the store, never stored as True

    @property
    def messages(self) -> list[dict[str, Any]]:
        return json.loads(self.request_json)


class CallStore(Protocol):
    def get(self, key: str) -> CallRecord | None:
        """The stored *successful* call for `key`; failed calls are never returned."""

    def put(self, record: CallRecord) -> None:
        """Keep a record (ok or failed); append-only."""


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\r?\n?(.*?)```", re.DOTALL)


def _pointer_list(value: Any) -> list[Any] | None:
    """The pointer list a decoded JSON value carries, or None when it is not a pointer reply."""
    if isinstance(value, dict):
        if "extracted_pointers" in value:
            pointers = value["extracted_pointers"]
            if pointers is None:
                return []
            if isinstance(pointers, list):
                return pointers
            raise ReplyNotJSON(f"'extracted_pointers' is a {type(pointers).__name__}, not a list")
        # Small models often answer one pointer without the envelope.
        if "json_path" in value and "verbatim_quote" in value:
            return [value]
        return None
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return value
    return None


def parse_json_reply(
    text: str | None, *, extract: Callable[[Any], list[Any] | None], embedded: Callable[[Any], bool], what: str
) -> list[Any]:
    """The items a model reply carries, read tolerantly: plain JSON, JSON in ``` fences (after any
    <think> block), or the first JSON value in prose that `embedded` accepts. `extract` maps a
    decoded value to its items (None: not this kind of reply). Items come back unchecked; anything
    else raises ReplyNotJSON. Used for pointer replies and topic-discovery replies alike."""
    if text is None or not text.strip():
        raise ReplyNotJSON("the reply is empty")
    body = _THINK.sub("", text).strip()  # reasoning models prepend their thoughts
    for candidate in [body] + [m.group(1).strip() for m in _FENCE.finditer(body)]:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        found = extract(value)
        if found is not None:
            return found
    # JSON embedded in prose: raw_decode from each "{" or "[" copes with brackets inside strings.
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[{\[]", body):
        try:
            value, _ = decoder.raw_decode(body, match.start())
        except ValueError:
            continue
        if embedded(value):
            found = extract(value)
            if found is not None:
                return found
    snippet = " ".join(body.split())[:120]
    raise ReplyNotJSON(f"the reply holds no {what} JSON: {snippet!r}")


def _embedded_pointers(value: Any) -> bool:
    if isinstance(value, dict):
        return "extracted_pointers" in value
    return isinstance(value, list) and bool(value) and all(isinstance(i, dict) and "json_path" in i for i in value)


def parse_reply(text: str | None) -> list[Any]:
    """The raw pointers in a model reply: a JSON object, JSON in ``` fences, the first JSON object
    with `extracted_pointers` embedded in prose, or a bare list of pointer objects. Items are
    returned as they came (the gate judges them); anything else raises ReplyNotJSON."""
    return parse_json_reply(text, extract=_pointer_list, embedded=_embedded_pointers, what="pointer")


def response_formats(schema: dict[str, Any], name: str) -> tuple[tuple[str, dict[str, Any] | None], ...]:
    """Ladder of output constraints for `schema`, strictest first; servers that refuse one get the next."""
    return (
        ("json_schema", {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": False}}),
        # llama.cpp takes a schema this way (FACTS.md); other servers ignore the extra key.
        ("json_object", {"type": "json_object", "schema": schema}),
        ("none", None),
    )


_RESPONSE_FORMATS = response_formats(POINTER_SCHEMA, "pointers")


def _requests_sent(exc: openai.APIError) -> int:
    """How many requests the SDK sent before raising `exc`: it numbers its retries in a header."""
    request = getattr(exc, "request", None)
    try:
        return int(request.headers.get("x-stainless-retry-count", 0)) + 1 if request is not None else 1
    except (TypeError, ValueError):
        return 1


class CallFailed(LLMError):
    """One call got no usable answer (retries exhausted, refused request); other calls may still work."""

    def __init__(self, message: str, *, attempts: int):
        super().__init__(message)
        self.attempts = attempts


@dataclass(frozen=True)
class ChatReply:
    """What one successful request returned; `latency_ms` is that request's round trip."""

    text: str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_ms: int
    attempts: int
    response_format: str

    def record_fields(self) -> dict[str, Any]:
        """The reply's part of a CallRecord."""
        return dict(
            raw_response=self.text,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            latency_ms=self.latency_ms,
            attempts=self.attempts,
            response_format=self.response_format,
        )


def _one_line(text: object, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict) and body.get("message"):
        return _one_line(body["message"])
    return _one_line(exc.message)


@dataclass(frozen=True)
class PreparedCall:
    """One chunk rendered and keyed, before anything is sent."""

    chunk_index: int
    chunk_count: int
    nodes: tuple[Node, ...]
    messages: list[dict[str, Any]]
    key: str
    prompt_hash: str


def prepare_calls(
    topic: Topic,
    run: Run,
    nodes: list[Node],
    *,
    model: str,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    prompt_version: str = PROMPT_VERSION,
) -> list[PreparedCall]:
    """Chunk, render and key the calls one (topic, run) needs. Pure: sends nothing."""
    chunks = chunk_nodes(run, list(nodes), token_budget=token_budget)
    prepared = []
    for i, chunk in enumerate(chunks):
        messages = render_messages(topic, run.run_id, build_fragment(run, chunk))
        prepared.append(
            PreparedCall(
                chunk_index=i,
                chunk_count=len(chunks),
                nodes=tuple(chunk),
                messages=messages,
                key=call_key(model, prompt_version, messages),
                prompt_hash=prompt_hash(messages),
            )
        )
    return prepared


@dataclass
class ExtractionOutcome:
    pointers: list[Any] = field(default_factory=list)  # raw, from every successful chunk, in chunk order
    calls: list[CallRecord] = field(default_factory=list)  # one per chunk; replayed ones have cached=True
    failed: list[CallRecord] = field(default_factory=list)
    requests_sent: int = 0

    @property
    def complete(self) -> bool:
        """Every chunk has an answer; otherwise some of the run was not looked at."""
        return not self.failed


class PointerClient:
    """Sends pointer requests to one OpenAI-compatible endpoint. What it adds to the SDK: the
    response_format ladder, the max_completion_tokens switch, fatal statuses named, and a count of
    the requests each call took."""

    def __init__(self, config: LLMConfig, *, http_client: Any | None = None):
        """`http_client`: an `openai.DefaultHttpxClient` for proxies or custom CAs (or to share one)."""
        self.config = config
        self._http_client = http_client
        self._sdk: openai.OpenAI | None = None
        self._format_index = 0  # first response_format the server accepted; kept across calls
        self._token_param = "max_tokens"  # newer OpenAI models insist on max_completion_tokens

    @property
    def _client(self) -> openai.OpenAI:
        # Built on first use: a pure replay never needs it (building one loads the CA bundle), and
        # importing the SDK (a third of an embedded no-change sync's start-up) waits until then.
        if self._sdk is None:
            import openai

            # The SDK retries 408/409/429/5xx, timeouts and refused connections with exponential
            # backoff and honours retry-after; this class adds only what it does not do.
            self._sdk = openai.OpenAI(
                base_url=self.config.base_url,
                api_key=self.config.api_key,
                timeout=self.config.timeout_s,
                max_retries=self.config.max_retries,
                http_client=self._http_client,
            )
        return self._sdk

    def close(self) -> None:
        """Close the connections this client opened (a caller's `http_client` stays open)."""
        if self._sdk is not None and self._http_client is None:
            self._sdk.close()
        self._sdk = None

    def __enter__(self) -> "PointerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def response_format_mode(self) -> str:
        return _RESPONSE_FORMATS[self._format_index][0]

    def _fatal(self, exc: openai.APIStatusError) -> LLMFatalError:
        url = self.config.base_url
        status = exc.status_code
        if status == 401:
            return LLMFatalError(f"OPENAI_API_KEY was refused by {url} (401)")
        if status == 403:
            return LLMFatalError(
                f"OPENAI_API_KEY may not use model {self.config.model!r} at {url} (403): {_server_message(exc)}"
            )
        body = exc.body if isinstance(exc.body, dict) else {}
        message = _server_message(exc)
        if body.get("code") == "model_not_found" or "model" in message.lower():
            return LLMFatalError(f"model {self.config.model!r} is unknown to {url} (404)")
        return LLMFatalError(
            f"{url} has no chat completions endpoint (404); OPENAI_BASE_URL usually ends in /v1"
        )

    def complete(
        self, messages: list[dict[str, Any]], *, formats: tuple[tuple[str, dict[str, Any] | None], ...] = _RESPONSE_FORMATS
    ) -> ChatReply:
        """One chat completion (the SDK retries transient failures) with response_format fallback.
        `formats`: another reply schema's ladder (see `response_formats`); pointers by default.
        Raises LLMFatalError (stop everything) or CallFailed (this call only)."""
        import openai

        cfg = self.config
        url = cfg.base_url
        format_index = self._format_index
        token_param = self._token_param
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
            try:
                raw = self._client.chat.completions.with_raw_response.create(**kwargs)
                attempts += raw.retries_taken + 1
                completion = raw.parse()
            except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
                fatal = self._fatal(exc)
                fatal.attempts = attempts + _requests_sent(exc)
                raise fatal from None
            except openai.BadRequestError as exc:
                attempts += _requests_sent(exc)
                message = _server_message(exc)
                if token_param == "max_tokens" and "max_completion_tokens" in message:
                    token_param = "max_completion_tokens"
                    continue
                # Which 400 means "unsupported response_format" differs per server: try the
                # next rung and only remember a rung once a request through it succeeded.
                if format_index + 1 < len(formats):
                    format_index += 1
                    continue
                raise CallFailed(f"{url} rejected the request (400): {message}", attempts=attempts) from None
            except (openai.APIStatusError, openai.APIConnectionError) as exc:
                attempts += _requests_sent(exc)
                status = getattr(exc, "status_code", None)
                if isinstance(exc, openai.APITimeoutError):
                    what = f"no answer within {cfg.timeout_s:g}s"
                elif isinstance(exc, openai.APIStatusError):
                    what = f"{url} answered {status}: {_server_message(exc)}"
                else:
                    what = f"could not connect to {url}: {_one_line(exc)}"
                if isinstance(exc, openai.APIStatusError) and status < 500 and status not in (408, 409, 429):
                    raise CallFailed(what, attempts=attempts) from None  # the SDK does not retry these
                raise CallFailed(f"gave up after {attempts} attempts; last: {what}", attempts=attempts) from None
            except openai.OpenAIError as exc:
                attempts += 1
                raise CallFailed(f"{url} gave an unusable answer: {_one_line(exc)}", attempts=attempts) from None
            except UnicodeEncodeError:
                # Nothing was sent: the SDK cannot encode a lone surrogate that JSON input may carry.
                raise CallFailed(
                    "the source text holds invalid Unicode (a lone surrogate) and cannot be sent", attempts=attempts
                ) from None
            latency_ms = round(raw.elapsed.total_seconds() * 1000)  # the last request's, not the retries'
            self._format_index, self._token_param = format_index, token_param
            choices = getattr(completion, "choices", None) or []
            if not choices:
                raise CallFailed(f"{url} returned no choices", attempts=attempts)
            choice = choices[0]
            usage = getattr(completion, "usage", None)
            return ChatReply(
                text=getattr(choice.message, "content", None),
                finish_reason=getattr(choice, "finish_reason", None),
                prompt_tokens=getattr(usage, "prompt_tokens", None),
                completion_tokens=getattr(usage, "completion_tokens", None),
                latency_ms=latency_ms,
                attempts=attempts,
                response_format=mode,
            )

    def extract(
        self,
        topic: Topic,
        run: Run,
        nodes: list[Node],
        *,
        store: CallStore,
        replay_only: bool = False,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
    ) -> ExtractionOutcome:
        """Pointers for one topic in one run: replayed from `store` where possible, else asked for.

        A failed chunk (server errors after every retry, a reply with no pointer JSON) is stored
        as failed and reported in `failed`; it is asked again next time. LLMFatalError and
        CacheMiss stop the extraction."""
        cfg = self.config
        outcome = ExtractionOutcome()
        prepared = prepare_calls(topic, run, nodes, model=cfg.model, token_budget=token_budget)
        for call in prepared:
            stored = store.get(call.key)
            if stored is not None and stored.status == "ok":
                replayed = stored.model_copy(update={"cached": True})
                outcome.calls.append(replayed)
                outcome.pointers.extend(replayed.pointers)
                continue
            if replay_only:
                raise CacheMiss(call.key, topic, run)
            base = dict(
                key=call.key,
                topic_id=topic.topic_id,
                run_id=run.run_id,
                model=cfg.model,
                prompt_version=PROMPT_VERSION,
                prompt_hash=call.prompt_hash,
                request_json=canonical_json(call.messages),
                chunk_index=call.chunk_index,
                chunk_count=call.chunk_count,
            )
            try:
                reply = self.complete(call.messages)
            except CallFailed as exc:
                record = CallRecord(**base, status="failed", error=str(exc), attempts=exc.attempts)
                outcome.requests_sent += exc.attempts
            except LLMFatalError as exc:
                # Kept for the audit trail, then stop: every other chunk would be refused too.
                store.put(CallRecord(**base, status="failed", error=str(exc), attempts=exc.attempts))
                raise
            else:
                outcome.requests_sent += reply.attempts
                reply_fields = reply.record_fields()
                try:
                    pointers = parse_reply(reply.text)
                except ReplyNotJSON as exc:
                    error = str(exc)
                    if reply.finish_reason == "length":
                        error += f" (the reply was cut off at max_output_tokens={cfg.max_output_tokens})"
                    record = CallRecord(**base, **reply_fields, status="failed", error=error)
                else:
                    record = CallRecord(**base, **reply_fields, status="ok", pointers=pointers)
            store.put(record)
            outcome.calls.append(record)
            if record.status == "ok":
                outcome.pointers.extend(record.pointers)
            else:
                outcome.failed.append(record)
        return outcome
