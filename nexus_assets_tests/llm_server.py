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
    drip_s: float = 0.0  # send the body one byte every drip_s seconds (a hung, trickling endpoint)


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
        latency_s: float = 0.0,
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
        self.latency_s = latency_s  # every chat completion answers this late (a real model's think time)
        self.in_flight = 0
        self.peak_in_flight = 0
        # The Batch API: uploaded files (id -> bytes) and batches (id -> dict); `hold_batches` keeps
        # new batches in_progress until released, like a provider that takes its time.
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.hold_batches = False

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
        if item.drip_s:
            payload["_drip_s"] = item.drip_s
        return 200, payload, {}, item.delay_s


    # The Batch API (files + batches), answering each request line through `_chat`.

    def _upload(self, content_type: str, raw: bytes) -> dict:
        import email.parser
        import email.policy

        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + raw
        )
        data = b""
        for part in message.iter_parts():
            if part.get_param("name", header="content-disposition") == "file":
                data = part.get_payload(decode=True) or b""
        with self._lock:
            file_id = f"file-{len(self.files) + 1}"
            self.files[file_id] = data
        return {"id": file_id, "object": "file", "bytes": len(data), "created_at": 1_700_000_000, "filename": "batch.jsonl", "purpose": "batch", "status": "processed"}

    def _create_batch(self, body: dict) -> dict:
        with self._lock:
            batch_id = f"batch-{len(self.batches) + 1}"
            self.batches[batch_id] = {
                "id": batch_id,
                "object": "batch",
                "endpoint": body.get("endpoint"),
                "input_file_id": body.get("input_file_id"),
                "completion_window": body.get("completion_window", "24h"),
                "status": "in_progress",
                "created_at": 1_700_000_000,
                "output_file_id": None,
                "error_file_id": None,
            }
            return dict(self.batches[batch_id])

    def release_batches(self) -> None:
        self.hold_batches = False

    def _batch_status(self, batch_id: str) -> dict | None:
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return None
            if batch["status"] != "in_progress" or self.hold_batches:
                return dict(batch)
            lines = self.files.get(batch["input_file_id"], b"").decode("utf-8").splitlines()
        out = []
        for line in lines:
            if not line.strip():
                continue
            request = json.loads(line)
            status, payload, _, _ = self._chat(request["body"], {"authorization": f"Bearer {self.api_key}"})
            out.append({"id": f"resp-{len(out)}", "custom_id": request["custom_id"], "response": {"status_code": status, "body": payload}, "error": None})
        with self._lock:
            file_id = f"file-{len(self.files) + 1}"
            self.files[file_id] = "\n".join(json.dumps(o) for o in out).encode("utf-8")
            batch.update(status="completed", output_file_id=file_id)
            return dict(batch)


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

        def _drip(self, status: int, body: dict, every_s: float) -> None:
            data = json.dumps(body).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(every_s)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _send_bytes(self, status: int, data: bytes, content_type: str = "application/octet-stream") -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_GET(self) -> None:
            with server._lock:
                server.paths.append(self.path)
            route = self.path.split("?", 1)[0].rstrip("/")
            if route.startswith("/v1/batches/"):
                batch = server._batch_status(route.rsplit("/", 1)[1])
                if batch is None:
                    self._send(404, {"error": {"message": "No such batch", "type": "invalid_request_error", "code": None}})
                else:
                    self._send(200, batch)
                return
            if route.startswith("/v1/files/") and route.endswith("/content"):
                data = server.files.get(route.split("/")[3])
                if data is None:
                    self._send(404, {"error": {"message": "No such file", "type": "invalid_request_error", "code": None}})
                else:
                    self._send_bytes(200, data)
                return
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
            route = self.path.split("?", 1)[0].rstrip("/")
            if route == "/v1/files":
                self._send(200, server._upload(self.headers.get("Content-Type", ""), raw))
                return
            if route == "/v1/batches":
                self._send(200, server._create_batch(json.loads(raw or b"{}")))
                return
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": "File Not Found", "type": "not_found_error", "code": None}})
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}})
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            with server._lock:
                server.in_flight += 1
                server.peak_in_flight = max(server.peak_in_flight, server.in_flight)
            try:
                status, payload, extra, delay = server._chat(body, headers)
                if delay or server.latency_s:
                    time.sleep(delay + server.latency_s)
                drip = payload.pop("_drip_s", 0.0) if isinstance(payload, dict) else 0.0
                if drip:
                    self._drip(status, payload, drip)
                else:
                    self._send(status, payload, extra)
            finally:
                with server._lock:
                    server.in_flight -= 1

    return Handler


@pytest.fixture
def llm_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def request_topics_and_fragment(body: dict) -> tuple[list[str], dict]:
    """The topic ids a pointer request asks, and its fragment flattened: {"nodes": [{"node",
    "json_path", "type", "text"[, "topics"]}]}, every run's nodes in order. Prompt v3 shows
    handles, so "json_path" is the handle too (a reply may name the node by either key); a v2
    request (an earlier checkout, for the benchmarks) shows paths, and its nodes have no "node"."""
    from nexus_assets.llm.prompt import ASKED_PREFIX, FRAGMENT_PREFIX

    user = body["messages"][-1]["content"].splitlines()
    asked = [line[len(ASKED_PREFIX):] for line in user if line.startswith(ASKED_PREFIX)]
    if not asked:  # prompt v2
        topics = [line.split(": ", 1)[1] for line in user if line.startswith("- Topic id: ")]
        marker = next(i for i, line in enumerate(user) if line.startswith("Source JSON fragment"))
        return topics, json.loads(user[marker + 1])
    topics = json.loads(f"[{asked[0]}]")
    fragment = json.loads(user[user.index(FRAGMENT_PREFIX) + 1])
    nodes = [{**node, "json_path": node["node"]} for run in fragment["runs"] for node in run]
    return topics, {"nodes": nodes}


def first_sentences(lies: Callable[[str, str, str], list] | None = None) -> Handler:
    """A model that answers every node it is shown with its first sentence, for every topic the
    node may be quoted for, plus `lies(topic_id, path, first)` (other pointers, true or not)."""
    from nexus_assets.core.sentences import sentences

    def model(body: dict) -> dict:
        topics, fragment = request_topics_and_fragment(body)
        pointers = []
        for node in fragment["nodes"]:
            key = "node" if "node" in node else "json_path"  # a v2 request shows paths
            path, first = node[key], sentences(node["text"])[0]
            for topic_id in node.get("topics", topics):
                pointers.append({"topic_id": topic_id, key: path, "verbatim_quote": first})
                pointers += lies(topic_id, path, first) if lies else []
        return {"extracted_pointers": pointers}

    return model
