"""What an LLM sync costs (issue 45): requests sized to the model, small runs sharing a request,
nodes shown by handle and mapped back to their own run's exact path, a prefix that is the same bytes
in every request of a sync, and `nexus plan` saying all of it before anything is sent."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nexus_assets.core.models import Topic
from nexus_assets.gate.rules import validate_pointers
from nexus_assets.ingest.formats.nexus import nexus_run
from nexus_assets.llm.chunking import (
    DEFAULT_TOKEN_BUDGET,
    FRAGMENT_ENVELOPE_BYTES,
    MAX_FRAGMENT_TOKENS,
    budget_for_context,
    pack_windows,
    token_budget_from_env,
    window_bytes,
)
from nexus_assets.llm.client import LLMConfig, PointerClient
from nexus_assets.llm.handles import resolve_handles
from nexus_assets.llm.requests import plan_jobs, windows
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.llm_server import (
    DEFAULT_API_KEY,
    DEFAULT_MODEL,
    FakeOpenAIServer,
    first_sentences,
    llm_server,  # noqa: F401 (a fixture)
    pointers_reply,
    request_topics_and_fragment,
)
from nexus_assets_tests.project import Project
from nexus_assets_tests.project import nexus_run as run_document
from nexus_assets_tests.llm.test_llm_client import TOPIC, MemoryStore


def make_run(run_id: str, texts: list[str]):
    roles = ("user", "assistant")
    return nexus_run(
        {"run_id": run_id, "status": "OPEN", "messages": [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]}
    )


def topic(topic_id: str, keywords=None) -> Topic:
    policy = TOPIC.extraction_policy.model_dump() | {"required_keywords": keywords}
    return Topic.model_validate(TOPIC.model_dump() | {"topic_id": topic_id, "extraction_policy": policy})


def plan(jobs, budget, answered=lambda key: False):
    return plan_jobs(jobs, model=DEFAULT_MODEL, token_budget=budget, max_output_tokens=2048, answered=answered)


# The budget follows the model


def test_the_budget_follows_the_models_context():
    # 128k context: a reply of 2048 tokens can quote a quarter of 8192.
    assert token_budget_from_env({}) == DEFAULT_TOKEN_BUDGET == 4 * 2048
    assert token_budget_from_env({"NEXUS_LLM_MAX_OUTPUT_TOKENS": "16384"}) == MAX_FRAGMENT_TOKENS  # the ceiling
    # A small local model: what its context leaves once the prefix and the reply are reserved.
    assert token_budget_from_env({"NEXUS_LLM_CONTEXT_TOKENS": "8192"}) == budget_for_context(8192) == 8192 - 2048 - 2000
    assert token_budget_from_env({"NEXUS_LLM_CONTEXT_TOKENS": "8192", "NEXUS_LLM_TOKEN_BUDGET": "3000"}) == 3000
    assert budget_for_context(1000) == 256  # a floor, never nothing
    for bad in ("0", "lots", "-5"):
        for name in ("NEXUS_LLM_CONTEXT_TOKENS", "NEXUS_LLM_MAX_OUTPUT_TOKENS"):
            with pytest.raises(ValueError, match=f"{name}={bad!r}"):
                token_budget_from_env({name: bad})


# Packing is a pure function of the runs and the settings


texts = st.lists(st.text(alphabet="ab \n\"é", min_size=1, max_size=300), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(texts, min_size=1, max_size=8), budget=st.integers(min_value=20, max_value=600), seed=st.randoms())
def test_requests_are_a_pure_function_of_the_runs_and_settings(runs, budget, seed):
    made = [make_run(f"run-{i}", t) for i, t in enumerate(runs)]
    topics = [topic("alpha"), topic("beta", ["a"])]
    _, requests = plan([(r, topics) for r in made], budget)
    shuffled = list(made)
    seed.shuffle(shuffled)
    _, again = plan([(r, topics) for r in shuffled], budget)
    assert [(r.key, r.messages) for r in again] == [(r.key, r.messages) for r in requests]
    # Every window of every run is asked exactly once, and no request is over the budget unless
    # it is one window that is over it alone.
    asked = [(s.run_id, s.window_index) for r in requests for s in r.shares]
    expected = [(run.run_id, i) for run in made for i, _ in enumerate(windows(run, budget))]
    assert sorted(set(asked)) == sorted(expected)
    assert len({s.key for r in requests for s in r.shares}) == len([s for r in requests for s in r.shares])
    run_of = {run.run_id: run for run in made}
    asked_topics = {s.topic.topic_id for r in requests for s in r.shares}  # the sync's prefix
    for r in requests:
        parts: dict = {}
        for s in r.shares:
            for n in s.nodes:
                parts.setdefault((s.run_id, s.window_index), {}).setdefault(n.path, []).append(s.topic.topic_id)
        counted = FRAGMENT_ENVELOPE_BYTES + sum(
            window_bytes(
                run_of[run_id],
                [n for n in run_of[run_id].nodes if n.path in admitted],
                {p: ids for p, ids in admitted.items() if len(ids) < len(asked_topics)},
            )
            for (run_id, _), admitted in parts.items()
        )
        assert len(parts) == 1 or counted <= budget * 4
        fragment = r.messages[-1]["content"].split("\n", 2)[2]
        assert len(fragment.encode()) <= counted


def test_pack_windows_is_greedy_and_keeps_order():
    assert pack_windows([10, 10, 10], token_budget=(30 + FRAGMENT_ENVELOPE_BYTES + 3) // 4) == [[0, 1, 2]]
    assert pack_windows([10, 10, 10], token_budget=(20 + FRAGMENT_ENVELOPE_BYTES) // 4 + 1) == [[0, 1], [2]]
    assert pack_windows([500, 1, 1], token_budget=10) == [[0], [1, 2]]
    assert pack_windows([], token_budget=10) == []


# Several small runs, one request; each pointer back in its own run


def test_small_runs_share_one_request_and_each_pointer_lands_in_its_own_run(llm_server):
    runs = [make_run(f"run-{i}", [f"Question {i} about the vault?", f"The vault {i} is append-only. It keeps history."]) for i in range(5)]

    def answer(body):
        _, fragment = request_topics_and_fragment(body)
        # Every assistant node, quoted by its handle: the same quote text in five runs.
        return pointers_reply(
            [{"topic_id": TOPIC.topic_id, "node": n["node"], "verbatim_quote": "is append-only."} for n in fragment["nodes"] if n["type"] == "assistant_message"]
        )

    llm_server.handler = answer
    client = PointerClient(LLMConfig(base_url=llm_server.base_url, api_key=llm_server.api_key, model=DEFAULT_MODEL))
    from nexus_assets.llm.client import ExtractionJob

    store = MemoryStore()
    batch = client.extract_runs([ExtractionJob(r, TOPIC) for r in runs], store=store, token_budget=DEFAULT_TOKEN_BUDGET)
    assert llm_server.request_count == 1 == batch.requests
    user = llm_server.requests[0]["messages"][-1]["content"]
    assert "$[" not in user and "run-0" not in user  # handles, not paths or run ids
    for run in runs:
        outcome = batch.outcomes[(TOPIC.topic_id, run.run_id)]
        assert [p["json_path"] for p in outcome.pointers] == ["$['messages'][1]['content']"]
        occurrences, rejections = validate_pointers(outcome.pointers, topic_id=TOPIC.topic_id, run=run)
        assert len(occurrences) == 1 and not rejections and occurrences[0].address.run_id == run.run_id
        # Each answer is stored under its own run's key, so it replays whatever it was packed with.
        assert [c.run_id for c in outcome.calls] == [run.run_id]
    # A second extraction of any one of them replays: nothing is sent.
    again = client.extract(TOPIC, runs[3], store=store)
    assert llm_server.request_count == 1 and again.pointers == batch.outcomes[(TOPIC.topic_id, "run-3")].pointers
    client.close()


def test_an_unknown_handle_is_rejected_as_path_not_found(llm_server):
    run = make_run("run-1", ["Does the vault keep history?", "The vault is append-only."])
    llm_server.script(
        pointers_reply(
            [
                {"topic_id": TOPIC.topic_id, "node": "r1n2", "verbatim_quote": "The vault is append-only."},
                {"topic_id": TOPIC.topic_id, "node": "r1n9", "verbatim_quote": "The vault is append-only."},
                {"topic_id": TOPIC.topic_id, "node": "r7n1", "verbatim_quote": "The vault is append-only."},
            ]
        )
    )
    client = PointerClient(LLMConfig(base_url=llm_server.base_url, api_key=llm_server.api_key, model=DEFAULT_MODEL))
    outcome = client.extract(TOPIC, run, store=MemoryStore())
    client.close()
    occurrences, rejections = validate_pointers(outcome.pointers, topic_id=TOPIC.topic_id, run=run)
    assert [o.address.json_path for o in occurrences] == ["$['messages'][1]['content']"]
    assert [(r.reason, r.json_path) for r in rejections] == [("path_not_found", "r1n9"), ("path_not_found", "r7n1")]


def test_resolve_handles_sends_each_item_to_the_run_its_handle_names():
    handles = {"r1n1": ("a", "$['x']"), "r2n1": ("b", "$['y']")}
    items = [
        {"topic_id": "t", "node": "r2n1", "verbatim_quote": "q"},
        {"topic_id": "t", "node": "nope", "verbatim_quote": "q"},
        {"topic_id": "t", "json_path": "r1n1", "verbatim_quote": "q"},  # the key a model may write instead
        "not a pointer",
    ]
    assert resolve_handles(items, handles, "a") == {
        "b": [{"topic_id": "t", "json_path": "$['y']", "verbatim_quote": "q"}],
        "a": [
            {"topic_id": "t", "json_path": "nope", "verbatim_quote": "q"},
            {"topic_id": "t", "json_path": "$['x']", "verbatim_quote": "q"},
            "not a pointer",
        ],
    }


# One stable prefix, and a plan that says what it costs


@pytest.fixture
def project(empty_project: Project, monkeypatch) -> Project:
    p = empty_project
    p.write_topic("alpha", keywords=["vault"])
    p.write_topic("beta", keywords=["checksum"])  # in scope in some runs only: requests ask different topics
    for i in range(30):
        extra = " Each brick has a checksum." if i % 3 == 0 else ""
        long = " ".join(f"The vault {i} keeps line {j}." for j in range(40 if i % 7 == 0 else 2))
        p.write_run(f"r{i:03d}.json", run_document(f"run-{i:03d}", [("user", f"How does vault {i} work?{extra}"), ("assistant", long)]))
    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
    monkeypatch.setenv("NEXUS_LLM_TOKEN_BUDGET", "400")  # a few runs a request, so a sync sends several
    return p


def test_the_prefix_is_the_same_bytes_in_every_request_and_plan_says_what_is_read(project, capsys, monkeypatch):
    args = [*project.cli_args(), "plan", "--runs-dir", str(project.runs), "--topics-dir", str(project.topics)]
    planned = run_json(capsys, *args)["requests"]
    code, text, _ = run_cli(capsys, *args)
    assert code == 0 and "characters per character of text" in text and "prefix" in text
    assert {"requests_to_send", "requests_per_run", "chars_read", "text_chars", "chars_read_per_text_char", "cacheable_prefix_chars"} <= set(planned)
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run_json(capsys, *project.sync_args(), "--extractor", "openai")
        bodies = list(server.requests)
    assert 1 < len(bodies) == planned["requests_to_send"] < 30  # fewer requests than runs
    systems = {b["messages"][0]["content"] for b in bodies}
    assert len(systems) == 1  # byte-identical: a provider's prompt cache bills it once
    (system,) = systems
    assert "- Topic id: alpha" in system and "- Topic id: beta" in system
    assert len(system) == planned["cacheable_prefix_chars"]
    asked = {tuple(request_topics_and_fragment(b)[0]) for b in bodies}
    assert ("alpha",) in asked and ("alpha", "beta") in asked  # the requests differ; their prefix does not
    chars = sum(len(m["content"]) for b in bodies for m in b["messages"])
    assert chars == planned["chars_read"]
    assert planned["chars_read_per_text_char"] == round(chars / planned["text_chars"], 3)


# A vault synced with an earlier prompt


@pytest.mark.parametrize("version, budget", [("pointer-v3", 8192), ("pointer-v2", 3000), ("pointer-v1", 3000)])
def test_a_vault_synced_with_an_earlier_prompt_resyncs_without_a_request(project, capsys, monkeypatch, version, budget):
    """What the earlier releases stored, with their default budget (3000 tokens before v3, the
    model's context since), replays: the upgrade sends nothing and changes no brick (the new
    defaults chunk differently, and v4's rules and examples are other bytes)."""
    import duckdb

    from nexus_assets.extract.backends import extraction_key

    monkeypatch.delenv("NEXUS_LLM_TOKEN_BUDGET")  # the defaults, as an upgraded user has them
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run_json(capsys, *project.sync_args(), "--extractor", "openai")
        before = {t: run_json(capsys, *project.cli_args(), "manifest", t)["manifest_hash"] for t in ("alpha", "beta")}
        legacy = f"openai:{DEFAULT_MODEL}:{version}:{budget}"
        with duckdb.connect(str(project.db)) as con:
            topics = {t: Topic.model_validate_json(d) for t, d in con.execute("SELECT topic_id, definition_json FROM topics").fetchall()}
            rows = con.execute("SELECT extraction_key, topic_id, version_id, extractor FROM extractions").fetchall()
            assert {r[3] for r in rows} == {f"openai:{DEFAULT_MODEL}:pointer-v4:8192"}
            for key, topic_id, version_id, _ in rows:
                con.execute(
                    "UPDATE extractions SET extraction_key = ?, extractor = ? WHERE extraction_key = ?",
                    [extraction_key(legacy, topics[topic_id], version_id), legacy, key],
                )
            # Nothing of this release's answers is left to replay: only the earlier extractions.
            con.execute("DELETE FROM llm_calls")
            con.execute("DELETE FROM llm_requests")
        sent = server.request_count
        # A new run (nothing in any topic's scope) makes the sync look at every topic again.
        project.write_run("touch.json", run_document("run-new", [("user", "Small talk only.")]))
        run_json(capsys, *project.sync_args(), "--extractor", "openai")
        assert server.request_count == sent
    assert {t: run_json(capsys, *project.cli_args(), "manifest", t)["manifest_hash"] for t in ("alpha", "beta")} == before


def test_two_windows_of_one_run_in_one_request_keep_their_own_answers(llm_server):
    """A topic that admits one node in each of a run's two windows: both small shares ride in one
    request, and each window's stored answer holds only the pointers into that window."""
    filler = " ".join(["Filler words about nothing in particular."] * 12)
    run = make_run("run-1", ["The vault keeps history.", filler, filler, "The vault is append-only."])
    keyword_topic = topic("vaulted", ["vault"])
    budget = 200
    assert len(windows(run, budget)) == 2
    _, planned = plan([(run, [keyword_topic])], budget)
    assert len(planned) == 1 and [s.window_index for s in planned[0].shares] == [0, 1]

    def answer(body):
        _, fragment = request_topics_and_fragment(body)
        return pointers_reply([{"topic_id": "vaulted", "node": n["node"], "verbatim_quote": "The vault"} for n in fragment["nodes"]])

    llm_server.handler = answer
    client = PointerClient(LLMConfig(base_url=llm_server.base_url, api_key=llm_server.api_key, model=DEFAULT_MODEL))
    store = MemoryStore()
    outcome = client.extract(keyword_topic, run, store=store, token_budget=budget)
    client.close()
    assert llm_server.request_count == 1
    assert [(c.chunk_index, [p["json_path"] for p in c.pointers]) for c in outcome.calls] == [
        (0, ["$['messages'][0]['content']"]),
        (1, ["$['messages'][3]['content']"]),
    ]


# pointer-v4: the rules say what a note is, and each topic shows a person's examples


def test_the_prefix_says_what_a_note_is_and_shows_each_topics_examples(empty_project: Project, capsys, monkeypatch):
    import yaml

    p = empty_project
    p.write_topic("alpha", keywords=["vault"])
    path = p.write_topic("beta", keywords=["checksum"], node_types=["user_message", "tool_message"])
    beta = yaml.safe_load(path.read_text(encoding="utf-8"))
    beta["examples"] = {"keep": ["Every brick keeps its checksum."], "drop": ["File created successfully at: src/checksum.py"]}
    path.write_text(yaml.safe_dump(beta), encoding="utf-8")
    p.write_run("r.json", run_document("run-1", [("user", "The vault keeps each checksum."), ("assistant", "I'll update the vault.")]))
    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
    with FakeOpenAIServer(handler=first_sentences()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run_json(capsys, *p.sync_args(), "--extractor", "openai")
        bodies = list(server.requests)
        assert bodies
        systems = {b["messages"][0]["content"] for b in bodies}
        assert len(systems) == 1
        (system,) = systems
        # What a note is, as the labelling rules say it.
        assert "Point only at notes" in system and "Never point at: tool output" in system
        assert '"I\'ll create ..."' in system and "<ide_opened_file>" in system
        # Each topic as before, with its examples (JSON strings, so quotes and newlines stay exact) and
        # the node types it reads; a topic without them shows neither.
        alpha = system[system.index("- Topic id: alpha"):system.index("- Topic id: beta")]
        assert "examples" not in alpha and "Reads only" not in alpha
        assert (
            "  Reads only nodes of type: user_message, tool_message\n"
            "  Kept as notes for this topic (examples a person chose):\n  - \"Every brick keeps its checksum.\"\n"
            "  Not notes for this topic (examples a person chose):\n  - \"File created successfully at: src/checksum.py\"\n"
        ) in system
        sent = server.request_count
        # The examples are part of the topic's key: a sync after they change asks that topic again.
        beta["examples"] = {"keep": ["Every brick keeps its checksum.", "Checksums are sha256."], "drop": []}
        path.write_text(yaml.safe_dump(beta), encoding="utf-8")
        run_json(capsys, *p.sync_args(), "--extractor", "openai")
        asked = [request_topics_and_fragment(b)[0] for b in list(server.requests)[sent:]]
        assert asked and all(topics == ["beta"] for topics in asked)
        assert "Checksums are sha256." in list(server.requests)[-1]["messages"][0]["content"]
