"""A real HTTP server speaking the OpenAI Chat Completions API, for tests.

It runs `http.server.ThreadingHTTPServer` on 127.0.0.1 (a free port) in a background thread, so the
client under test goes through the real `openai` SDK, real HTTP and real error mapping. Replies
are scripted: a queue of items, then an optional function of the request body, then an empty
pointer list. It can also behave like the servers the extractor meets in the wild: a bad key
(401), an unknown model (404), llama.cpp refusing `json_schema` (400), rate limits, outages,
slow answers and chatty prose.

    with FakeOpenAIServer() as server:
        server.script(pointers_reply([...]), ErrorReply(429), "not json at all")
        client = PointerClient(LLMConfig(base_url=server.base_url, api_key=server.api_key, model="test-model"))
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator, Union

import pytest

DEFAULT_MODEL = "test-model"
DEFAULT_API_KEY = "sk-test-key"


@dataclass
class Reply:
    """A 200 chat completion whose message content is `content` (None = no content)."""

    content: str | None
    finish_reason: str = "stop"
    prompt_tokens: int | None = None  # None: estimated from the request
    completion_tokens: int | None = None
    delay_s: float = 0.0  # answer late, to trip client timeouts
    usage: bool = True  # some servers omit usage


@dataclass
class ErrorReply:
    """An OpenAI-style error: `{"error": {"message", "type", "param", "code"}}` with `status`."""

    status: int
    message: str | None = None
    type: str | None = None
    code: str | None = None
    retry_after: str | None = None
    # Like OpenAI's own 429s: tells the SDK how long to wait, so retries in tests take milliseconds.
    # None leaves the SDK to its exponential backoff (0.5 s, 1 s, ...).
    retry_after_ms: str | None = "1"


_ERROR_DEFAULTS = {
    400: ("Bad request", "invalid_request_error"),
    401: ("Incorrect API key provided", "invalid_request_error"),
    403: ("You are not allowed to sample from this model", "invalid_request_error"),
    404: ("Not found", "invalid_request_error"),
    429: ("Rate limit reached, please retry", "rate_limit_error"),
    500: ("The server had an error while processing your request", "server_error"),
    502: ("Bad gateway", "server_error"),
    503: ("The engine is currently overloaded", "server_error"),
}

Item = Union[Reply, ErrorReply, str, dict, list]
Handler = Callable[[dict], Item]


def pointers_reply(pointers: list[Any], **kwargs: Any) -> Reply:
    """A well-behaved reply: `{"extracted_pointers": pointers}` as the message content."""
    return Reply(json.dumps({"extracted_pointers": pointers}, ensure_ascii=False), **kwargs)


class FakeOpenAIServer:
    def __init__(
        self,
        *,
        api_key: str | None = DEFAULT_API_KEY,
        models: tuple[str, ...] | None = (DEFAULT_MODEL,),
        reject_formats: tuple[str, ...] = (),
        handler: Handler | None = None,
    ):
        self.api_key = api_key  # None: accept any key, like most local servers
        self.models = models  # None: accept any model name, like llama.cpp
        self.reject_formats = set(reject_formats)  # response_format types answered with 400
        self.handler = handler
        self._queue: deque[Item] = deque()
        self._lock = threading.Lock()
        self.requests: list[dict] = []  # bodies of chat completion requests, in arrival order
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []  # every request path, any endpoint
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def script(self, *items: Item) -> "FakeOpenAIServer":
        """Queue replies for the next chat completion requests (one item per request)."""
        with self._lock:
            self._queue.extend(items)
        return self

    @property
    def request_count(self) -> int:
        """Chat completion requests received, including refused ones."""
        with self._lock:
            return len(self.requests)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server is not running"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "FakeOpenAIServer":
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_item(self, body: dict) -> Item:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.handler is not None:
            return self.handler(body)
        return {"extracted_pointers": []}

    def _chat(self, body: dict, headers: dict[str, str]) -> tuple[int, dict, dict[str, str], float]:
        """(status, JSON body, extra headers, delay) for one chat completion request."""
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            serial = len(self.requests)
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(ErrorReply(401, code="invalid_api_key"))
        model = body.get("model")
        if self.models is not None and model not in self.models:
            return _error(
                ErrorReply(404, f"The model '{model}' does not exist or you do not have access to it.", code="model_not_found")
            )
        response_format = body.get("response_format")
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind in self.reject_formats:
            # What llama.cpp-style servers answer for a format they do not implement.
            return _error(ErrorReply(400, f'response_format type must be one of "text", "json_object", but got: {kind}'))

        item = self._next_item(body)
        if isinstance(item, ErrorReply):
            return _error(item)
        if isinstance(item, (dict, list)):
            item = Reply(json.dumps(item, ensure_ascii=False))
        elif isinstance(item, str):
            item = Reply(item)
        prompt_tokens = item.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = math.ceil(len(json.dumps(body.get("messages", []))) / 4)
        completion_tokens = item.completion_tokens
        if completion_tokens is None:
            completion_tokens = math.ceil(len(item.content or "") / 4)
        payload: dict[str, Any] = {
            "id": f"chatcmpl-{serial}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": item.content},
                    "logprobs": None,
                    "finish_reason": item.finish_reason,
                }
            ],
        }
        if item.usage:
            payload["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
        return 200, payload, {}, item.delay_s


def _error(item: ErrorReply) -> tuple[int, dict, dict[str, str], float]:
    message, kind = _ERROR_DEFAULTS.get(item.status, ("Error", "api_error"))
    body = {
        "error": {
            "message": item.message or message,
            "type": item.type or kind,
            "param": None,
            "code": item.code,
        }
    }
    if item.retry_after is not None:
        headers = {"retry-after": item.retry_after}
    elif item.retry_after_ms is not None:
        headers = {"retry-after-ms": item.retry_after_ms}
    else:
        headers = {}
    return item.status, body, headers, 0.0


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def _send(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test); nothing to answer

        def do_GET(self) -> None:
            with server._lock:
                server.paths.append(self.path)
            if self.path.rstrip("/") == "/v1/models":
                names = server.models or (DEFAULT_MODEL,)
                data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in names]
                self._send(200, {"object": "list", "data": data})
            else:
                self._send(404, {"error": {"message": "File Not Found", "type": "not_found_error", "code": None}})

        def do_POST(self) -> None:
            with server._lock:
                server.paths.append(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": "File Not Found", "type": "not_found_error", "code": None}})
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}})
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, payload, extra, delay = server._chat(body, headers)
            if delay:
                time.sleep(delay)
            self._send(status, payload, extra)

    return Handler


@pytest.fixture
def llm_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server
