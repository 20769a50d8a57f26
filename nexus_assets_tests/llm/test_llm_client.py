"""The `openai` pointer extractor against a real HTTP server, through the real `openai` SDK."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexus_assets.core.models import Node, Run, Topic
from nexus_assets.core.paths import resolve_string
from nexus_assets.gate.rules import validate_pointers
from nexus_assets.ingest.formats.nexus import nexus_run
from nexus_assets.llm.chunking import FRAGMENT_ENVELOPE_BYTES, chunk_nodes, estimate_tokens, window_bytes
from nexus_assets.llm.client import (
    CacheMiss,
    CallRecord,
    LLMConfig,
    LLMConfigError,
    LLMFatalError,
    PointerClient,
    ReplyNotJSON,
    call_key,
    parse_reply,
)
from nexus_assets.llm.planning import estimate_cost, plan_runs
from nexus_assets.llm.prompt import (
    POINTER_SCHEMA,
    PROMPT_VERSION,
    SYSTEM_PROMPT,
    build_fragment,
    render_fragment,
    render_messages,
    shown_fragment,
)
from nexus_assets.llm.requests import run_shares, share_key
from nexus_assets_tests.llm_server import (
    request_topics_and_fragment,
    DEFAULT_MODEL,
    ErrorReply,
    FakeOpenAIServer,
    Reply,
    llm_server,  # noqa: F401 (a fixture)
    pointers_reply,
)


class MemoryStore:
    """The CallStore contract in a list: append-only, `get` only ever returns successes."""

    def __init__(self) -> None:
        self.records: list[CallRecord] = []
        self.requests: list = []
        self.batches: dict = {}

    def get(self, key: str) -> CallRecord | None:
        for record in reversed(self.records):
            if record.key == key and record.status == "ok":
                return record
        return None

    def put(self, record: CallRecord) -> None:
        self.records.append(record)

    def put_request(self, record) -> None:
        self.requests.append(record)

    def open_batches(self, model):
        return [b for b in self.batches.values() if b.model == model and b.status != "applied"]

    def put_batch(self, record) -> None:
        self.batches[record.batch_id] = record


TOPIC = Topic(
    topic_id="nexus-server-sync",
    display_name="Nexus Server Sync Architecture",
    extraction_policy={
        "scope_description": "Technical constraints and data-flow rules of the sync engine.",
        "exclusion_criteria": ["General pleasantries"],
    },
    state="ACTIVE",
)

MESSAGES = [
    ("user", "Hi! How should the sync engine treat bricks?"),
    ("assistant", "Bricks are verbatim. The sync must be idempotent: re-running it changes nothing."),
    ("user", "And the vault?"),
    ("assistant", "The vault is append-only; nothing stored is ever deleted by a sync."),
]


def make_run(messages=MESSAGES, run_id="run-1"):
    return nexus_run(
        {
            "run_id": run_id,
            "status": "OPEN",
            "messages": [{"role": r, "content": c, "timestamp": f"2026-01-01T00:00:0{i}Z"} for i, (r, c) in enumerate(messages)],
        }
    )


def ptr(index: int, quote: str, topic_id: str = TOPIC.topic_id) -> dict:
    return {"topic_id": topic_id, "json_path": f"$['messages'][{index}]['content']", "verbatim_quote": quote}


@pytest.fixture
def server(llm_server):
    return llm_server


def make_client(server, **overrides):
    values = dict(base_url=server.base_url, api_key=server.api_key, model=DEFAULT_MODEL, max_retries=2, timeout_s=5)
    values.update(overrides)
    return PointerClient(LLMConfig(**values))


def retry_counts(server):
    """The SDK numbers each request's retry in a header; what the server saw, in order."""
    return [int(h.get("x-stainless-retry-count", -1)) for h in server.headers]


def extract(client, store=None, run=None, topic=TOPIC, **kwargs):
    run = run or make_run()
    return client.extract(topic, run, store=store if store is not None else MemoryStore(), **kwargs)


# Replies


def test_scripted_pointers_come_back_raw(server):
    pointers = [ptr(1, "Bricks are verbatim."), ptr(3, "The vault is append-only")]
    server.script(pointers_reply(pointers, prompt_tokens=321, completion_tokens=45))
    store = MemoryStore()
    outcome = extract(make_client(server), store)
    assert outcome.pointers == pointers
    assert outcome.requests_sent == 1 and server.request_count == 1
    assert not outcome.failed and outcome.complete
    (call,) = outcome.calls
    assert call.status == "ok" and not call.cached and call.attempts == 1
    assert (call.prompt_tokens, call.completion_tokens) == (321, 45)
    assert call.topic_id == TOPIC.topic_id and call.run_id == "run-1"
    assert call.model == DEFAULT_MODEL and call.prompt_version == PROMPT_VERSION
    (request,) = store.requests  # what was sent and what came back, kept once per request
    assert json.loads(request.request_json) == server.requests[0]["messages"]
    assert json.loads(request.raw_response) == {"extracted_pointers": pointers}
    assert request.topic_ids == [TOPIC.topic_id] and call.request_key == request.key
    assert call.latency_ms is not None and call.latency_ms >= 0
    assert store.records == [call]


def test_malformed_pointers_are_returned_raw_for_the_gate_to_reject(server):
    junk = [{"topic_id": TOPIC.topic_id}, "just a string", {"json_path": 3, "verbatim_quote": None}, ptr(1, "invented text")]
    server.script({"extracted_pointers": junk})
    run = make_run()
    outcome = extract(make_client(server), run=run)
    assert outcome.pointers == junk
    occurrences, rejections = validate_pointers(outcome.pointers, topic_id=TOPIC.topic_id, run=run)
    assert occurrences == []
    assert [r.reason for r in rejections] == ["malformed_pointer"] * 3 + ["quote_not_found"]


@pytest.mark.parametrize(
    "content",
    [
        '```json\n{"extracted_pointers": [%s]}\n```' % json.dumps(ptr(1, "Bricks are verbatim.")),
        'Sure! Here are the pointers {as asked}:\n{"extracted_pointers": [%s]}\nLet me know {if} you need more.'
        % json.dumps(ptr(1, "Bricks are verbatim.")),
    ],
    ids=["fenced", "prose"],
)
def test_wrapped_json_is_parsed(server, content):
    server.script(content)
    outcome = extract(make_client(server))
    assert outcome.pointers == [ptr(1, "Bricks are verbatim.")]
    assert outcome.calls[0].status == "ok"


def test_non_json_reply_is_a_failed_call_not_a_crash_and_is_retried_next_time(server):
    server.script("I think the sync engine is great, but I cannot answer in JSON.", pointers_reply([ptr(1, "Bricks")]))
    store = MemoryStore()
    client = make_client(server)
    first = extract(client, store)
    assert first.pointers == [] and not first.complete
    (failed,) = first.failed
    assert failed.status == "failed" and failed.pointers == []
    assert "no pointer JSON" in failed.error
    assert store.requests[0].raw_response.startswith("I think the sync engine")
    assert failed.prompt_tokens is not None
    assert store.records == [failed] and store.get(failed.key) is None

    second = extract(client, store)
    assert second.requests_sent == 1 and second.pointers == [ptr(1, "Bricks")]
    assert [r.status for r in store.records] == ["failed", "ok"]
    assert store.get(failed.key).status == "ok"


def test_truncated_reply_names_the_output_limit(server):
    server.script(Reply('{"extracted_pointers": [{"topic_id": "nexus-ser', finish_reason="length"))
    outcome = extract(make_client(server, max_output_tokens=16))
    assert "cut off at max_output_tokens=16" in outcome.failed[0].error


def test_reply_without_content_or_usage(server):
    server.script(Reply(None, usage=False))
    outcome = extract(make_client(server))
    (failed,) = outcome.failed
    assert "empty" in failed.error
    assert failed.prompt_tokens is None and failed.completion_tokens is None


# Retries and fatal errors


def test_429_then_success_is_retried(server):
    server.script(ErrorReply(429), ErrorReply(503), pointers_reply([ptr(3, "append-only")]))
    outcome = extract(make_client(server), store=MemoryStore())
    assert outcome.pointers == [ptr(3, "append-only")]
    assert outcome.calls[0].attempts == 3 and outcome.requests_sent == 3 == server.request_count
    assert retry_counts(server) == [0, 1, 2]  # the SDK's retries, counted into the call


def test_retry_after_header_is_honoured(server):
    server.script(ErrorReply(429, retry_after="0.3"), pointers_reply([]))
    started = time.perf_counter()
    outcome = extract(make_client(server))
    assert outcome.calls[0].status == "ok" and outcome.calls[0].attempts == 2
    assert time.perf_counter() - started >= 0.3


def test_without_retry_after_the_sdk_backs_off_exponentially(server):
    server.script(ErrorReply(500, retry_after_ms=None), ErrorReply(500, retry_after_ms=None), pointers_reply([]))
    started = time.perf_counter()
    outcome = extract(make_client(server))
    assert outcome.calls[0].attempts == 3
    assert time.perf_counter() - started >= (0.5 + 1.0) * 0.75  # 0.5 s then 1 s, less at most 25% jitter


def test_500_storm_fails_after_max_retries_and_is_recorded(server):
    server.script(*[ErrorReply(500)] * 10)
    store = MemoryStore()
    outcome = extract(make_client(server, max_retries=3), store)
    assert server.request_count == 4 == outcome.requests_sent
    (failed,) = outcome.failed
    assert failed.status == "failed" and failed.attempts == 4 and outcome.pointers == []
    assert "gave up after 4 attempts" in failed.error and "answered 500" in failed.error
    assert store.records == [failed] and store.get(failed.key) is None
    assert retry_counts(server) == [0, 1, 2, 3]


def test_a_request_over_the_timeout_fails_its_call_and_is_asked_next_time(server):
    server.script(Reply('{"extracted_pointers": []}', delay_s=1.0), pointers_reply([ptr(1, "Bricks")]))
    store, client = MemoryStore(), make_client(server, timeout_s=0.2)
    first = extract(client, store)
    (failed,) = first.failed
    assert failed.attempts == 1 and "no complete answer within 0.2s (NEXUS_LLM_TIMEOUT" in failed.error
    assert extract(client, store).pointers == [ptr(1, "Bricks")]


def test_connection_refused_fails_after_retries():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", model="m", max_retries=1)
    with PointerClient(config) as client:
        outcome = client.extract(TOPIC, make_run(), store=MemoryStore())
    (failed,) = outcome.failed
    assert failed.attempts == 2 and "could not connect" in failed.error


def test_401_is_fatal_with_a_one_line_message(server):
    store = MemoryStore()
    with pytest.raises(LLMFatalError) as caught:
        extract(make_client(server, api_key="sk-wrong"), store)
    assert str(caught.value) == f"OPENAI_API_KEY was refused by {server.base_url} (401)"
    assert server.request_count == 1  # never retried
    assert [r.status for r in store.records] == ["failed"]


def test_403_is_fatal(server):
    server.script(ErrorReply(403))
    with pytest.raises(LLMFatalError, match=r"\(403\)"):
        extract(make_client(server))
    assert server.request_count == 1


def test_unknown_model_404_is_fatal(server):
    with pytest.raises(LLMFatalError) as caught:
        extract(make_client(server, model="gpt-nonexistent"))
    assert str(caught.value) == f"model 'gpt-nonexistent' is unknown to {server.base_url} (404)"
    assert server.request_count == 1


def test_base_url_without_v1_is_explained(server):
    url = f"http://127.0.0.1:{server.port}"
    with pytest.raises(LLMFatalError) as caught:
        extract(make_client(server, base_url=url))
    assert str(caught.value) == f"{url} has no chat completions endpoint (404); OPENAI_BASE_URL usually ends in /v1"
    assert "\n" not in str(caught.value)


def test_other_4xx_fails_the_call_without_retry(server):
    server.script(ErrorReply(422, "unprocessable"))
    outcome = extract(make_client(server))
    assert server.request_count == 1
    assert outcome.failed[0].error.endswith("answered 422: unprocessable")


# Request shape and response_format fallback


def test_request_is_deterministic_and_json_constrained(server):
    extract(make_client(server, seed=11, max_output_tokens=512))
    (body,) = server.requests
    assert body["temperature"] == 0 and body["seed"] == 11 and body["stream"] is False
    assert body["model"] == DEFAULT_MODEL and body["max_tokens"] == 512
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "pointers", "schema": POINTER_SCHEMA, "strict": False},
    }
    assert server.headers[0]["authorization"] == f"Bearer {server.api_key}"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


def test_json_schema_rejected_falls_back_and_is_remembered():
    with FakeOpenAIServer(reject_formats=("json_schema",)) as server:
        server.script(pointers_reply([ptr(1, "Bricks")]), pointers_reply([ptr(3, "vault")]))
        client = make_client(server)
        first = extract(client)
        assert first.pointers == [ptr(1, "Bricks")]
        assert first.calls[0].attempts == 2 and first.calls[0].response_format == "json_object"
        kinds = [(r.get("response_format") or {}).get("type") for r in server.requests]
        assert kinds == ["json_schema", "json_object"]
        assert server.requests[1]["response_format"]["schema"] == POINTER_SCHEMA

        second = extract(client, run=make_run(run_id="run-2"))
        assert second.requests_sent == 1 and second.pointers == [ptr(3, "vault")]
        assert server.requests[2]["response_format"]["type"] == "json_object"


def test_no_response_format_when_both_are_rejected():
    with FakeOpenAIServer(reject_formats=("json_schema", "json_object")) as server:
        server.script("```json\n" + json.dumps({"extracted_pointers": [ptr(1, "Bricks")]}) + "\n```")
        client = make_client(server)
        outcome = extract(client)
        assert outcome.pointers == [ptr(1, "Bricks")]
        assert "response_format" not in server.requests[-1]
        assert client.response_format_mode == "none"


def test_a_400_for_another_reason_fails_the_call_and_is_not_remembered(server):
    server.script(*[ErrorReply(400, "This model's maximum context length is 8192 tokens")] * 3)
    client = make_client(server)
    outcome = extract(client)
    assert server.request_count == 3
    assert "rejected the request (400): This model's maximum context length" in outcome.failed[0].error
    assert client.response_format_mode == "json_schema"


def test_max_completion_tokens_is_used_when_the_server_asks_for_it(server):
    server.script(
        ErrorReply(400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."),
        pointers_reply([]),
        pointers_reply([]),
    )
    client = make_client(server)
    extract(client)
    extract(client, run=make_run(run_id="run-2"))
    assert "max_tokens" in server.requests[0]
    for body in server.requests[1:]:
        assert "max_tokens" not in body and body["max_completion_tokens"] == 2048
        assert body["response_format"]["type"] == "json_schema"


# Replay and keys


def test_replay_sends_nothing_and_returns_identical_pointers(server):
    run = make_run()
    server.handler = lambda body: pointers_reply([ptr(1, "Bricks are verbatim.")])
    store = MemoryStore()
    client = make_client(server)
    first = client.extract(TOPIC, run, store=store, token_budget=60)
    assert len(first.calls) > 1  # several chunks, so replay covers each of them
    sent = server.request_count

    second = client.extract(TOPIC, run, store=store, token_budget=60)
    assert second.requests_sent == 0 and server.request_count == sent
    assert second.pointers == first.pointers
    assert [c.cached for c in second.calls] == [True] * len(first.calls)
    assert [c.key for c in second.calls] == [c.key for c in first.calls]
    assert all(not r.cached for r in store.records)  # the flag is never stored

    third = make_client(server).extract(TOPIC, run, store=store, token_budget=60, replay_only=True)
    assert third.pointers == first.pointers and server.request_count == sent


def test_replay_only_on_a_miss_raises_cache_miss(server):
    run = make_run()
    with pytest.raises(CacheMiss) as caught:
        make_client(server).extract(TOPIC, run, store=MemoryStore(), replay_only=True)
    assert server.request_count == 0
    assert caught.value.topic_id == TOPIC.topic_id and caught.value.run_id == "run-1"
    assert caught.value.key == run_shares(run, [TOPIC], model=DEFAULT_MODEL, token_budget=3000)[0].key


def test_replay_only_does_not_replay_failed_calls(server):
    server.script("no json here")
    store = MemoryStore()
    client = make_client(server)
    extract(client, store)
    with pytest.raises(CacheMiss):
        extract(client, store, replay_only=True)


def _key(topic=TOPIC, run=None, model=DEFAULT_MODEL):
    """The key a topic's answer for a run is stored and replayed by."""
    run = run or make_run()
    (share,) = run_shares(run, [topic], model=model, token_budget=3000)
    return share.key


def test_key_is_stable():
    """A stored answer is found again by its key in a later process: the key depends on neither
    the string-hash seed nor the order of keys in the run's JSON, nor on an earlier call."""
    key = _key()
    script = (
        "from nexus_assets_tests.llm.test_llm_client import _key\n"
        "print(_key())\n"
    )
    for seed in ("1", "4242"):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == key, seed
    document = make_run().document
    reordered = {**{k: document[k] for k in reversed(list(document))},
                 "messages": [{k: m[k] for k in reversed(list(m))} for m in document["messages"]]}
    assert list(reordered["messages"][0])[0] != list(document["messages"][0])[0]
    assert _key(run=nexus_run(reordered)) == key
    assert _key(run=make_run(run_id="run-2")) != key and _key() == key
    run = make_run()
    messages = render_messages(TOPIC, run, run.nodes)
    assert call_key("m", PROMPT_VERSION, messages) == call_key("m", PROMPT_VERSION, json.loads(json.dumps(messages)))
    # The fragment is rendered canonically: the caller's dict order does not matter.
    fragment, _ = shown_fragment([(run, run.nodes)])
    shuffled = {"runs": [[dict(reversed(list(n.items()))) for n in nodes] for nodes in fragment["runs"]]}
    assert render_fragment(shuffled) == render_fragment(fragment)


@pytest.mark.parametrize(
    "change",
    [
        "model",
        "prompt_version",
        "scope_description",
        "exclusion_criteria",
        "display_name",
        "topic_id",
        "examples",
        "run_content",
        "run_id",
    ],
)
def test_key_changes_with_every_input(change):
    base = _key()
    policy = TOPIC.extraction_policy
    if change == "model":
        changed = _key(model="other-model")
    elif change == "prompt_version":
        run = make_run()
        assert share_key(DEFAULT_MODEL, TOPIC, run, run.nodes) == base
        changed = share_key(DEFAULT_MODEL, TOPIC, run, run.nodes, prompt_version="pointer-v5")
    elif change in ("scope_description", "exclusion_criteria"):
        value = "Only the vault." if change == "scope_description" else ("Jokes",)
        topic = TOPIC.model_copy(update={"extraction_policy": policy.model_copy(update={change: value})})
        changed = _key(topic=topic)
    elif change == "display_name":
        changed = _key(topic=TOPIC.model_copy(update={"display_name": "Sync"}))
    elif change == "topic_id":
        changed = _key(topic=TOPIC.model_copy(update={"topic_id": "other-topic"}))
    elif change == "examples":  # pointer-v4 shows a topic's examples
        changed = _key(topic=TOPIC.model_validate(TOPIC.model_dump() | {"examples": {"keep": ["The vault keeps history."]}}))
    elif change == "run_content":
        edited = list(MESSAGES)
        edited[2] = ("user", "And the vault??")
        changed = _key(run=make_run(edited))
    else:
        changed = _key(run=make_run(run_id="run-2"))
    assert changed != base


def test_changed_model_with_the_same_store_calls_again(server):
    store = MemoryStore()
    extract(make_client(server), store)
    with FakeOpenAIServer(models=("other-model",)) as other:
        outcome = extract(make_client(other, model="other-model"), store)
        assert outcome.requests_sent == 1 and not outcome.calls[0].cached


# Prompt


def test_prompt_carries_the_topic_and_the_fragment():
    run = make_run()
    system, user = render_messages(TOPIC, run, run.nodes[1:3])
    assert system["content"].startswith(SYSTEM_PROMPT)
    for needle in (TOPIC.topic_id, TOPIC.display_name, TOPIC.extraction_policy.scope_description, "- General pleasantries"):
        assert needle in system["content"]
    text = user["content"]
    # Prompt v3: the node is shown by a handle, never by its JSON path; the run id is not shown.
    assert "$[" not in text and "run-1" not in text
    (line,) = [line for line in text.splitlines() if line.startswith('{"runs"')]
    assert json.loads(line) == {
        "runs": [
            [
                {"node": "r1n1", "type": "assistant_message", "text": MESSAGES[1][1]},
                {"node": "r1n2", "type": "user_message", "text": MESSAGES[2][1]},
            ]
        ],
    }
    assert '{"extracted_pointers": []}' in SYSTEM_PROMPT
    for rule in ("verbatim", "paraphrase", "join", "inference", "smallest", "offsets"):
        assert rule in SYSTEM_PROMPT


def test_the_prompt_example_passes_the_gate():
    # The worked example must itself obey the rules it teaches.
    start = SYSTEM_PROMPT.index("Example, ")
    fragment = json.loads(next(l for l in SYSTEM_PROMPT[start:].splitlines() if l.startswith('{"runs"')))
    reply = parse_reply(SYSTEM_PROMPT[SYSTEM_PROMPT.index("Reply:\n") :])
    nodes = {n["node"]: n["text"] for run in fragment["runs"] for n in run}
    for pointer in reply:
        assert pointer["verbatim_quote"] in nodes[pointer["node"]]


# parse_reply


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"extracted_pointers": []}', []),
        ('{"extracted_pointers": null}', []),
        ('  {"extracted_pointers": [{"a": 1}]}\n', [{"a": 1}]),
        ('```\n{"extracted_pointers": [{"a": 1}]}\n```', [{"a": 1}]),
        ('Here you go:\n```json\n[{"json_path": "$.x", "verbatim_quote": "q"}]\n```', [{"json_path": "$.x", "verbatim_quote": "q"}]),
        ('[{"topic_id": "t", "json_path": "$.x", "verbatim_quote": "q"}]', [{"topic_id": "t", "json_path": "$.x", "verbatim_quote": "q"}]),
        ("[]", []),
        ('{"topic_id": "t", "json_path": "$.x", "verbatim_quote": "q"}', [{"topic_id": "t", "json_path": "$.x", "verbatim_quote": "q"}]),
        ('Note {this}. Result: {"extracted_pointers": [{"verbatim_quote": "a } b {"}]} done', [{"verbatim_quote": "a } b {"}]),
        ('<think>maybe {"extracted_pointers": [1]}</think>{"extracted_pointers": [2]}', [2]),
        ('I found: [{"json_path": "$.x", "verbatim_quote": "q"}] in the text.', [{"json_path": "$.x", "verbatim_quote": "q"}]),
    ],
)
def test_parse_reply_accepts(text, expected):
    assert parse_reply(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "   ",
        "Sorry, I cannot help with that.",
        '{"answer": "no"}',
        '{"extracted_pointers": "none"}',
        "[1, 2, 3]",
        '{"extracted_pointers": [',
        "42",
    ],
)
def test_parse_reply_rejects(text):
    with pytest.raises(ReplyNotJSON):
        parse_reply(text)


# Chunking


def _long_run(lengths: list[int]):
    return make_run([("user" if i % 2 == 0 else "assistant", ("w%d " % i) * n) for i, n in enumerate(lengths)])


def test_estimate_tokens():
    assert [estimate_tokens(t) for t in ("", "abcd", "abcde", "\u540c\u6b65")] == [0, 1, 2, 2]


def counted_tokens(run, nodes):
    """The tokens chunking counts for some nodes of a run: never fewer than the request shows."""
    return -(-(FRAGMENT_ENVELOPE_BYTES + window_bytes(run, nodes)) // 4)


def shown_tokens(run, nodes):
    return estimate_tokens(render_fragment(shown_fragment([(run, nodes)])[0]))


def test_chunks_respect_the_budget_and_keep_whole_run_paths():
    run = _long_run([5, 40, 12, 60, 3, 25, 25, 8, 70, 2])
    budget = 120
    chunks = chunk_nodes(run, list(run.nodes), token_budget=budget)
    assert len(chunks) > 2
    assert [n for chunk in chunks for n in chunk] == list(run.nodes)  # order kept, nothing lost
    for chunk in chunks:
        assert shown_tokens(run, chunk) <= counted_tokens(run, chunk) <= budget or len(chunk) == 1
        for node in build_fragment(run, chunk)["nodes"]:
            _, text = resolve_string(run.document, node["json_path"])
            assert text == node["text"]
    later = build_fragment(run, chunks[-1])["nodes"][0]["json_path"]
    assert later == run.nodes[len(run.nodes) - len(chunks[-1])].path != "$['messages'][0]['content']"


def test_an_oversized_node_is_its_own_chunk():
    run = _long_run([3, 2000, 3])
    chunks = chunk_nodes(run, list(run.nodes), token_budget=100)
    assert [len(c) for c in chunks] == [1, 1, 1]
    assert chunks[1][0].path == "$['messages'][1]['content']"


def test_chunking_is_greedy_and_exact_at_the_boundary():
    run = _long_run([10, 10, 10])
    whole = counted_tokens(run, run.nodes)
    assert chunk_nodes(run, list(run.nodes), token_budget=whole) == [list(run.nodes)]
    assert len(chunk_nodes(run, list(run.nodes), token_budget=whole - 1)) == 2
    assert chunk_nodes(run, [], token_budget=10) == []
    with pytest.raises(ValueError):
        chunk_nodes(run, list(run.nodes), token_budget=0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=120), min_size=0, max_size=12),
    budget=st.integers(min_value=1, max_value=400),
    text=st.text(min_size=0, max_size=3),
)
def test_chunking_properties(lengths, budget, text):
    run = make_run([("user", (text + " w") * n) for n in lengths])
    chunks = chunk_nodes(run, list(run.nodes), token_budget=budget)
    assert [n for c in chunks for n in c] == list(run.nodes)
    for chunk in chunks:
        assert chunk
        assert shown_tokens(run, chunk) <= counted_tokens(run, chunk)
        assert len(chunk) == 1 or counted_tokens(run, chunk) <= budget
    # Greedy: merging a chunk with the next node would have broken the budget.
    for chunk, following in zip(chunks, chunks[1:]):
        assert counted_tokens(run, chunk + following[:1]) > budget


def test_extract_sends_one_request_per_chunk_and_keeps_chunk_order(server):
    run = _long_run([5, 40, 12, 60, 3, 25])

    def first_node_of_fragment(body):
        _, fragment = request_topics_and_fragment(body)
        node = fragment["nodes"][0]
        return pointers_reply([{"topic_id": TOPIC.topic_id, "node": node["node"], "verbatim_quote": node["text"][:2]}])

    server.handler = first_node_of_fragment
    outcome = make_client(server).extract(TOPIC, run, store=MemoryStore(), token_budget=80)
    chunks = chunk_nodes(run, list(run.nodes), token_budget=80)
    assert len(outcome.calls) == len(chunks) == server.request_count > 1
    assert [p["json_path"] for p in outcome.pointers] == [c[0].path for c in chunks]
    assert [(c.chunk_index, c.chunk_count) for c in outcome.calls] == [(i, len(chunks)) for i in range(len(chunks))]
    occurrences, rejections = validate_pointers(outcome.pointers, topic_id=TOPIC.topic_id, run=run)
    assert len(occurrences) == len(chunks) and not rejections


def test_lone_surrogate_in_source_fails_the_call_without_crashing(server):
    document = json.loads('{"run_id": "r", "status": "OPEN", "messages": [{"role": "user", "content": "sync \\ud800 rules"}]}')
    run = Run(
        run_id="r",
        status="OPEN",
        started_at=None,
        format="nexus",
        document=document,
        nodes=(Node(steps=("messages", 0, "content"), node_type="user_message", timestamp=None),),
    )
    outcome = make_client(server).extract(TOPIC, run, store=MemoryStore())
    assert "invalid Unicode" in outcome.failed[0].error
    assert server.request_count == 0 == outcome.requests_sent


def test_no_nodes_in_scope_no_calls(server):
    keyword_topic = Topic.model_validate(
        TOPIC.model_dump() | {"extraction_policy": TOPIC.extraction_policy.model_dump() | {"required_keywords": ["kubernetes"]}}
    )
    outcome = make_client(server).extract(keyword_topic, make_run(), store=MemoryStore())
    assert outcome.calls == [] and outcome.requests_sent == 0 and server.request_count == 0


# Plan and cost


def test_plan_sends_nothing_and_sees_the_store(server):
    run = _long_run([5, 40, 12, 60, 3, 25])
    store = MemoryStore()
    config = LLMConfig(base_url=server.base_url, api_key="k", model=DEFAULT_MODEL)
    answered = lambda key: store.get(key) is not None  # noqa: E731
    planned = plan_runs([run], [TOPIC], config=config, token_budget=80, answered=answered)
    assert server.request_count == 0 and len(planned.requests) > 1 and planned.cached_shares == 0
    assert all(r.input_tokens_est > estimate_tokens(SYSTEM_PROMPT) and r.output_tokens_est > 0 for r in planned.requests)

    outcome = make_client(server).extract(TOPIC, run, store=store, token_budget=80)
    assert [s.key for r in planned.requests for s in r.shares] == [c.key for c in outcome.calls]
    # The very requests a sync sends (stored as they are answered, so in any order).
    assert sorted(r.key for r in planned.requests) == sorted(r.key for r in store.requests)
    replanned = plan_runs([run], [TOPIC], config=config, token_budget=80, answered=answered)
    assert replanned.requests == [] and replanned.cached_shares == len(planned.requests)
    other = config.model_copy(update={"model": "other"})
    assert len(plan_runs([run], [TOPIC], config=other, token_budget=80, answered=answered).requests) == len(planned.requests)


def test_estimate_cost():
    config = LLMConfig(base_url="http://x/v1", api_key="k", model="m")
    assert estimate_cost(1000, 100, config) is None  # unknown, not free
    priced = config.model_copy(update={"price_in_per_mtok": 2.0, "price_out_per_mtok": 8.0})
    assert estimate_cost(1000, 100, priced) == pytest.approx((1000 * 2.0 + 100 * 8.0) / 1e6)


# Configuration


def test_config_from_env():
    env = {
        "OPENAI_BASE_URL": "http://127.0.0.1:8080/v1",
        "OPENAI_API_KEY": "sk-secret",
        "NEXUS_LLM_MODEL": "gemma",
        "NEXUS_PRICE_IN_PER_MTOK": "0.15",
    }
    config = LLMConfig.from_env(env, max_retries=2)
    assert (config.base_url, config.model, config.price_in_per_mtok, config.price_out_per_mtok) == (
        "http://127.0.0.1:8080/v1",
        "gemma",
        0.15,
        None,
    )
    assert (config.timeout_s, config.max_retries, config.seed, config.max_output_tokens) == (120, 2, 7, 2048)
    assert (config.concurrency, config.max_reply_bytes, config.rpm, config.tpm, config.max_cost_usd) == (8, 1_000_000, None, None, None)
    assert "sk-secret" not in repr(config)


def test_config_names_the_missing_variable():
    with pytest.raises(LLMConfigError, match="NEXUS_LLM_MODEL") as caught:
        LLMConfig.from_env({"OPENAI_BASE_URL": "http://x/v1", "OPENAI_API_KEY": "k"})
    assert "OPENAI_API_KEY" not in str(caught.value).split("(")[0]
    with pytest.raises(LLMConfigError, match="OPENAI_BASE_URL, OPENAI_API_KEY, NEXUS_LLM_MODEL"):
        LLMConfig.from_env({"OPENAI_API_KEY": " "})
    with pytest.raises(LLMConfigError, match="NEXUS_PRICE_OUT_PER_MTOK='cheap' is not a number"):
        LLMConfig.from_env(
            {"OPENAI_BASE_URL": "u", "OPENAI_API_KEY": "k", "NEXUS_LLM_MODEL": "m", "NEXUS_PRICE_OUT_PER_MTOK": "cheap"}
        )


def test_the_fake_server_lists_models(server):
    client = openai.OpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0)
    assert [m.id for m in client.models.list()] == [DEFAULT_MODEL]


def test_reply_schemas_are_derived_from_the_reply_models():
    from pydantic import BaseModel

    from nexus_assets.discovery.prompt import TOPICS_SCHEMA
    from nexus_assets.llm.schema import reply_schema

    items = POINTER_SCHEMA["properties"]["extracted_pointers"]["items"]
    assert items["required"] == ["topic_id", "node", "verbatim_quote"] and items["additionalProperties"] is False
    assert "$defs" not in json.dumps(POINTER_SCHEMA) and "title" not in json.dumps(POINTER_SCHEMA)
    topic = TOPICS_SCHEMA["properties"]["topics"]["items"]
    assert topic["required"] == ["topic_id", "display_name", "scope_description", "required_keywords"]

    class Inner(BaseModel):
        title: str  # a field called "title" is a field, not pydantic's generated title

    class Outer(BaseModel):
        inner: Inner

    assert reply_schema(Outer) == {
        "type": "object",
        "properties": {"inner": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}},
        "required": ["inner"],
    }
