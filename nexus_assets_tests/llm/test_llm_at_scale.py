"""The LLM path at production scale (docs/openai.md "At scale"), against a real HTTP server on 127.0.0.1:
requests run concurrently, each chunk is sent once for every topic that needs it, and nothing a
server does (rate limits, a trickle, a flood) hangs a sync or poisons the vault."""

from __future__ import annotations

import json
import re
import threading
import time

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexus_assets.core.models import Topic
from nexus_assets.extract.backends import extraction_key
from nexus_assets.llm.client import ExtractionJob, LLMConfig, PointerClient
from nexus_assets.llm.prompt import LEGACY_PROMPT_VERSIONS
from nexus_assets.vault.migrations import schema_version
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.llm_server import (
    DEFAULT_API_KEY,
    DEFAULT_MODEL,
    ErrorReply,
    FakeOpenAIServer,
    Reply,
    first_sentences,
    request_topics_and_fragment,
)
from nexus_assets_tests.project import Project, nexus_run

TOPICS = ("alpha", "beta", "gamma")
ONE_RUN_A_REQUEST = "80"


def write_runs(p: Project, count: int, *, start: int = 0) -> None:
    for i in range(start, start + count):
        p.write_run(
            f"r{i:03d}.json",
            nexus_run(
                f"run-{i:03d}",
                [("user", f"The vault {i} is append-only. Nothing is deleted."), ("assistant", f"The vault keeps history {i}. It keeps checksums.")],
            ),
        )


@pytest.fixture
def scale_project(empty_project: Project, monkeypatch) -> Project:
    p = empty_project
    for t in TOPICS:
        p.write_topic(t, keywords=["vault"])
    write_runs(p, 12)
    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
    # Room for one of these runs a request, not two: these tests count requests per run (how
    # small runs share a request is test_llm_request_packing's subject).
    monkeypatch.setenv("NEXUS_LLM_TOKEN_BUDGET", ONE_RUN_A_REQUEST)
    return p


def sync(p: Project, capsys, *extra: str, expect: int = 0):
    return run_json(capsys, *p.sync_args(), "--extractor", "openai", *extra, expect=expect)


def manifests(p: Project, capsys) -> dict[str, tuple[str, list]]:
    out = {}
    for t in TOPICS:
        m = run_json(capsys, *p.cli_args(), "manifest", t)
        out[t] = (m["manifest_hash"], run_json(capsys, *p.cli_args(), "bricks", t, "--all"))
    return out


def test_requests_run_concurrently_up_to_the_setting(scale_project, capsys, monkeypatch):
    """The contract: requests run concurrently up to NEXUS_LLM_CONCURRENCY, never more. The server
    holds the first answers until that many requests are in flight at once, so reaching the setting
    does not depend on how fast a busy machine sends them; every answer then takes a while, so a
    request over the setting would be seen in flight beside the others."""
    monkeypatch.setenv("NEXUS_LLM_CONCURRENCY", "4")
    answer = first_sentences()
    reached = threading.Event()

    def held(body: dict) -> dict:
        if server.in_flight >= 4:
            reached.set()
        if not reached.wait(timeout=20):
            reached.set()  # the setting was never reached: answer, and let the assertion say so
        return answer(body)

    with FakeOpenAIServer(handler=held, latency_s=0.2) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        (result, *_) = sync(scale_project, capsys)
        assert result["success"] and server.request_count == 12
    assert server.peak_in_flight >= 4, "it reaches the setting"
    assert server.peak_in_flight <= 4, "it never exceeds the setting"


def test_a_chunk_is_sent_once_for_every_topic_that_needs_it(scale_project, capsys, monkeypatch):
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        results = sync(scale_project, capsys)
        assert all(r["success"] for r in results)
        assert server.request_count == 12, "one request per run (one chunk each), not one per run and topic"
        assert all(request_topics_and_fragment(body)[0] == list(TOPICS) for body in server.requests)
        # Each topic compiled the same two sentences per run from the shared replies.
        assert {t: len(run_json(capsys, *scale_project.cli_args(), "bricks", t)) for t in TOPICS} == dict.fromkeys(TOPICS, 24)
        calls = run_json(capsys, *scale_project.cli_args(), "calls")
        assert len(calls) == 36 and {c["topics_in_request"] for c in calls} == {3}
        sent = server.request_count
        sync(scale_project, capsys, "--topic", "beta")  # nothing new: replayed from the vault
        assert server.request_count == sent


def test_concurrency_1_and_16_give_byte_identical_bricks_and_manifests(empty_project, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
    monkeypatch.setenv("NEXUS_LLM_TOKEN_BUDGET", ONE_RUN_A_REQUEST)
    seen = []
    for concurrency in ("1", "16"):
        p = Project(tmp_path / f"c{concurrency}")
        p.runs.mkdir(parents=True)
        p.topics.mkdir(parents=True)
        for t in TOPICS:
            p.write_topic(t, keywords=["vault"])
        write_runs(p, 20)
        monkeypatch.setenv("NEXUS_LLM_CONCURRENCY", concurrency)
        # Replies arrive out of order: later requests answer sooner.
        with FakeOpenAIServer(handler=_shuffled_latency(first_sentences())) as server:
            monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
            sync(p, capsys)
        seen.append((manifests(p, capsys), server.peak_in_flight))
    (sequential, one), (concurrent, many) = seen
    assert one == 1 and many > 1
    assert concurrent == sequential


def _shuffled_latency(model):
    def answer(body):
        _, fragment = request_topics_and_fragment(body)
        index = int(re.search(r"\d+", fragment["nodes"][0]["text"]).group())  # "The vault {i} is ..."
        time.sleep(0.02 * (20 - index % 20))
        return model(body)

    return answer


def test_a_second_sync_replays_and_sends_nothing(scale_project, capsys, monkeypatch):
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        sync(scale_project, capsys)
        before = manifests(scale_project, capsys)
        sent = server.request_count
        scale_project.write_run("touch.json", nexus_run("run-new", [("user", "Small talk only.")]))  # forces a real sync
        sync(scale_project, capsys)
        assert server.request_count == sent
    assert manifests(scale_project, capsys) == before


def test_adding_a_topic_asks_only_for_it_and_editing_one_keeps_the_others_answers(scale_project, capsys, monkeypatch):
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        sync(scale_project, capsys)
        sent = server.request_count
        scale_project.write_topic("delta", keywords=["vault"])
        sync(scale_project, capsys)
        added = server.requests[sent:]
        assert len(added) == 12 and all(request_topics_and_fragment(b)[0] == ["delta"] for b in added)

        sent = server.request_count
        topic_file = scale_project.topics / "beta.yaml"
        topic_file.write_text(topic_file.read_text(encoding="utf-8").replace("Everything about", "All that concerns"), encoding="utf-8")
        sync(scale_project, capsys)
        edited = server.requests[sent:]
        assert len(edited) == 12 and all(request_topics_and_fragment(b)[0] == ["beta"] for b in edited)


def test_a_429_storm_completes_with_every_brick_and_waits_out_retry_after(scale_project, capsys, monkeypatch):
    refused: set[str] = set()
    arrivals: dict[str, list[float]] = {}
    model = first_sentences()

    def rate_limited(body):
        key = json.dumps(body["messages"], sort_keys=True)
        arrivals.setdefault(key, []).append(time.monotonic())
        if key not in refused:
            refused.add(key)
            return ErrorReply(429, retry_after="0.4", retry_after_ms=None)
        return model(body)

    with FakeOpenAIServer(handler=rate_limited) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        results = sync(scale_project, capsys)
        assert server.request_count == 24
    assert all(r["success"] for r in results)
    assert {t: len(run_json(capsys, *scale_project.cli_args(), "bricks", t)) for t in TOPICS} == dict.fromkeys(TOPICS, 24)
    assert all(len(times) == 2 and times[1] - times[0] >= 0.4 for times in arrivals.values()), "never retried early"


def test_a_trickling_endpoint_ends_within_the_timeout_with_a_clear_error(scale_project, capsys, monkeypatch):
    monkeypatch.setenv("NEXUS_LLM_TIMEOUT", "1")
    scale_project.write_topic("beta", keywords=["vault"], state="DRAFT")
    scale_project.write_topic("gamma", keywords=["vault"], state="DRAFT")
    for path in list(scale_project.runs.iterdir())[1:]:
        path.unlink()
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        server.script(Reply('{"extracted_pointers": []}', drip_s=0.5))
        started = time.monotonic()
        code, out, err = run_cli(capsys, *scale_project.sync_args(), "--extractor", "openai")
        assert time.monotonic() - started < 30
    assert code == 0
    assert "1 runs not extracted (failed LLM calls, asked again next sync)" in out
    (call,) = run_json(capsys, *scale_project.cli_args(), "calls")
    assert call["status"] == "failed"
    assert call["error"] == "no complete answer within 1s (NEXUS_LLM_TIMEOUT bounds each request as a whole)"


def test_an_oversized_reply_is_refused_and_never_stored_whole(scale_project, capsys, monkeypatch):
    monkeypatch.setenv("NEXUS_LLM_MAX_REPLY_BYTES", "20000")
    monkeypatch.setenv("NEXUS_LLM_CONCURRENCY", "1")
    huge = json.dumps({"extracted_pointers": [{"topic_id": "alpha", "json_path": "$", "verbatim_quote": "x" * 100_000}]})
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        server.script(Reply(huge))
        sync(scale_project, capsys)
        calls = run_json(capsys, *scale_project.cli_args(), "calls")
        failed = [c for c in calls if c["status"] == "failed"]
        assert len(failed) == 3  # the one request, for each of its three topics
        assert failed[0]["error"].startswith("the reply was over 20,000 bytes (NEXUS_LLM_MAX_REPLY_BYTES; ")
        assert failed[0]["response_bytes"] > 20_000
        assert len(failed[0]["raw_response"] or "") <= 4096
        with duckdb.connect(str(scale_project.db), read_only=True) as con:
            longest = con.execute("SELECT max(strlen(coalesce(raw_response, ''))) FROM llm_requests").fetchone()[0]
        assert longest < 20_000
        sync(scale_project, capsys)  # the failed run is asked again, and answered
    assert {t: len(run_json(capsys, *scale_project.cli_args(), "bricks", t)) for t in TOPICS} == dict.fromkeys(TOPICS, 24)


def _back_to_schema_15(db) -> None:
    """The vault as the previous release left it: no request, batch or reply-size records."""
    with duckdb.connect(str(db)) as con:
        con.execute("DROP TABLE llm_requests")
        con.execute("DROP TABLE llm_batches")
        for column in ("request_key", "response_bytes", "response_sha256"):
            con.execute(f"ALTER TABLE llm_calls DROP COLUMN {column}")
        con.execute("DELETE FROM schema_version WHERE version >= 16")
        assert schema_version(con) == 15


def test_a_vault_holding_an_oversized_reply_opens_lists_it_trimmed_and_syncs(scale_project, capsys, monkeypatch):
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        sync(scale_project, capsys)
        before = manifests(scale_project, capsys)
        _back_to_schema_15(scale_project.db)
        reply = "{" + " " * 3_000_000 + '"extracted_pointers": []}'
        with duckdb.connect(str(scale_project.db)) as con:
            con.execute(
                """INSERT INTO llm_calls SELECT 'old-key', topic_id, run_id, model, 'pointer-v1', prompt_hash, '[]', ?, '[]',
                       1, 1, 1, 'ok', NULL, 1, 0, 1, 'json_schema', now() FROM llm_calls LIMIT 1""",
                [reply],
            )
            expected_sha = con.execute("SELECT sha256(?)", [reply]).fetchone()[0]
        calls = run_json(capsys, *scale_project.cli_args(), "calls")
        (old,) = [c for c in calls if c["call_key"] == "old-key"]
        assert old["status"] == "failed" and old["response_bytes"] == len(reply) and old["response_sha256"] == expected_sha
        assert old["raw_response"].endswith(" [trimmed]") and len(old["raw_response"]) < 5000
        scale_project.write_run("touch.json", nexus_run("run-new", [("user", "The vault is new here.")]))
        sent = server.request_count
        sync(scale_project, capsys)
        assert server.request_count == sent + 1  # only the new run is asked
    after = manifests(scale_project, capsys)
    assert all(after[t][0] != before[t][0] for t in TOPICS)  # the new run's brick is in every topic


def test_extractions_by_the_previous_prompt_are_replayed_without_calling(scale_project, capsys, monkeypatch):
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        sync(scale_project, capsys)
        before = manifests(scale_project, capsys)
        # As the previous release stored them: extractions made by the single-topic prompt v1.
        legacy = f"openai:{DEFAULT_MODEL}:{LEGACY_PROMPT_VERSIONS[0]}:3000"
        with duckdb.connect(str(scale_project.db)) as con:
            topics = {t: Topic.model_validate_json(d) for t, d in con.execute("SELECT topic_id, definition_json FROM topics").fetchall()}
            for key, topic_id, version in con.execute("SELECT extraction_key, topic_id, version_id FROM extractions").fetchall():
                con.execute(
                    "UPDATE extractions SET extraction_key = ?, extractor = ? WHERE extraction_key = ?",
                    [extraction_key(legacy, topics[topic_id], version), legacy, key],
                )
            con.execute("DELETE FROM llm_calls")
        _back_to_schema_15(scale_project.db)
        sent = server.request_count
        scale_project.write_run("touch.json", nexus_run("run-new", [("user", "Small talk only.")]))
        sync(scale_project, capsys)
        assert server.request_count == sent
    assert manifests(scale_project, capsys) == before


def test_max_cost_stops_before_the_estimate_passes_it_and_a_rerun_resumes(scale_project, capsys, monkeypatch):
    monkeypatch.setenv("NEXUS_PRICE_IN_PER_MTOK", "1000")
    monkeypatch.setenv("NEXUS_PRICE_OUT_PER_MTOK", "1000")
    monkeypatch.setenv("NEXUS_LLM_CONCURRENCY", "1")
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        # One request here is ~1,000 tokens, ~$1 at these prices: $5 pays for a few, not twelve.
        code, out, err = run_cli(capsys, *scale_project.sync_args(), "--extractor", "openai", "--max-cost", "5")
        assert code == 0
        assert "stopped sending at the cost ceiling" in out
        first = server.request_count
        assert 1 <= first < 12
        spent = sum(b["prompt_tokens"] + b["completion_tokens"] for b in run_json(capsys, *scale_project.cli_args(), "calls")) / 3
        assert spent * 1000 / 1e6 <= 5
        sync(scale_project, capsys)  # no ceiling: the rest is asked, nothing twice
        assert server.request_count == 12
    assert {t: len(run_json(capsys, *scale_project.cli_args(), "bricks", t)) for t in TOPICS} == dict.fromkeys(TOPICS, 24)


def test_max_cost_without_prices_is_a_usage_error(scale_project, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    code, out, err = run_cli(capsys, *scale_project.sync_args(), "--extractor", "openai", "--max-cost", "1")
    assert code == 2
    assert "needs the model's prices to estimate spend: set NEXUS_PRICE_IN_PER_MTOK and NEXUS_PRICE_OUT_PER_MTOK" in err
    code, out, err = run_cli(capsys, *scale_project.sync_args(), "--batch")
    assert code == 2 and "--batch applies to the openai extractor; add --extractor openai" in err


def test_progress_shows_chunks_in_flight_tokens_and_spend(scale_project, capsys, monkeypatch):
    monkeypatch.setenv("NEXUS_PRICE_IN_PER_MTOK", "0.15")
    monkeypatch.setenv("NEXUS_PRICE_OUT_PER_MTOK", "0.6")
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        code, out, err = run_cli(capsys, *scale_project.sync_args(), "--extractor", "openai")
    assert code == 0
    (line,) = [l for l in err.splitlines() if "LLM: 12/12 chunks" in l]
    assert line.startswith("  alpha: LLM: 12/12 chunks, 0 in flight, ") and " tokens, ~$0.00" in line


def test_plan_shows_the_shared_requests_and_their_cost(scale_project, capsys, monkeypatch):
    monkeypatch.setenv("NEXUS_PRICE_IN_PER_MTOK", "0.15")
    monkeypatch.setenv("NEXUS_PRICE_OUT_PER_MTOK", "0.6")
    args = [*scale_project.cli_args(), "plan", "--runs-dir", str(scale_project.runs), "--topics-dir", str(scale_project.topics)]
    plan = run_json(capsys, *args)
    assert plan["requests"]["requests_to_send"] == 12 and plan["requests"]["topic_answers_to_ask"] == 36
    assert plan["requests"]["batch_cost_usd"] == pytest.approx(plan["requests"]["cost_usd"] / 2)
    per_topic = sum(t["input_tokens_to_send"] for t in plan["topics"])
    assert per_topic == plan["requests"]["input_tokens_to_send"]
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        sync(scale_project, capsys)
        assert server.request_count == 12
        sent_tokens = sum(len(json.dumps(b["messages"])) for b in server.requests)
    assert run_json(capsys, *args)["requests"]["requests_to_send"] == 0
    assert 0.5 < plan["requests"]["input_tokens_to_send"] * 4 / sent_tokens < 2


def test_an_interrupted_batch_is_resumed_not_paid_twice(scale_project, capsys, monkeypatch):
    monkeypatch.setenv("NEXUS_LLM_BATCH_POLL", "0.1")
    monkeypatch.setenv("NEXUS_LLM_BATCH_WAIT", "0.5")
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        server.hold_batches = True
        code, out, err = run_cli(capsys, *scale_project.sync_args(), "--extractor", "openai", "--batch")
        assert code == 0 and "12 runs not extracted" in out
        assert len(server.batches) == 1 and server.request_count == 0
        server.release_batches()
        results = sync(scale_project, capsys, "--batch")
        assert all(r["success"] for r in results)
        assert len(server.batches) == 1, "the recorded batch was resumed, not submitted again"
        assert server.paths.count("/v1/batches") == 1
        assert server.request_count == 12  # each request answered once, inside the batch
    assert {t: len(run_json(capsys, *scale_project.cli_args(), "bricks", t)) for t in TOPICS} == dict.fromkeys(TOPICS, 24)
    calls = run_json(capsys, *scale_project.cli_args(), "calls")
    assert {c["batch_id"] for c in calls} == {"batch-1"}


# Concurrent equals sequential, as a property of the client: whatever the reply latencies, each
# (topic, run) gets the same pointers in the same order, and the same records are stored.


class _Store:
    def __init__(self):
        self.records, self.requests = [], []

    def get(self, key):
        return next((r for r in reversed(self.records) if r.key == key and r.status == "ok"), None)

    def put(self, record):
        self.records.append(record)

    def put_request(self, record):
        self.requests.append(record)

    def open_batches(self, model):
        return []

    def put_batch(self, record):
        pass


@pytest.fixture(scope="module")
def property_server():
    delays: dict[str, float] = {}
    model = first_sentences()

    def answer(body):
        _, fragment = request_topics_and_fragment(body)
        time.sleep(delays.get(fragment["run_id"], 0.0))
        return model(body)

    with FakeOpenAIServer(handler=answer) as server:
        yield server, delays


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    latencies=st.lists(st.sampled_from([0.0, 0.005, 0.02, 0.05]), min_size=6, max_size=6),
    concurrency=st.integers(min_value=2, max_value=16),
)
def test_concurrent_extraction_equals_sequential(property_server, latencies, concurrency):
    from nexus_assets.ingest.formats.nexus import nexus_run as parse_nexus_run

    server, delays = property_server
    topics = [
        Topic(topic_id=t, display_name=t, extraction_policy={"scope_description": t, "required_keywords": kw}, state="ACTIVE")
        for t, kw in (("alpha", ["vault"]), ("beta", ["history"]), ("gamma", None))
    ]
    runs = []
    for i, latency in enumerate(latencies):
        document = nexus_run(f"run-{i}", [("user", f"The vault {i} is small. It grows."), ("assistant", f"History {i} is kept.")])
        runs.append(parse_nexus_run(document))
        delays[f"run-{i}"] = latency
    outcomes = []
    for n in (1, concurrency):
        config = LLMConfig(base_url=server.base_url, api_key=server.api_key, model=DEFAULT_MODEL, concurrency=n)
        with PointerClient(config) as client:
            store = _Store()
            batch = client.extract_runs([ExtractionJob(r, topics[0], tuple(topics[1:])) for r in runs], store=store)
        outcomes.append(
            (
                {k: o.pointers for k, o in batch.outcomes.items()},
                sorted((r.key, r.topic_id, r.status, json.dumps(r.pointers)) for r in store.records),
            )
        )
    assert outcomes[0] == outcomes[1]
