"""The LLM path's pure arithmetic and mapping (issue 51's mutation benchmark, docs/openai.md): node
handles, the token budget from the settings, the byte counts windows are packed by, and the keys
answers are stored by. Exact values, so a changed constant or boundary fails here."""

from __future__ import annotations

import hashlib

import pytest

from nexus_assets.core.fingerprint import canonical_json
from nexus_assets.core.models import Node, Run
from nexus_assets.llm.chunking import (
    FRAGMENT_ENVELOPE_BYTES,
    HANDLE_BYTES,
    RUN_ENVELOPE_BYTES,
    budget_for_context,
    chunk_nodes,
    entry_bytes,
    estimate_tokens,
    pack,
    token_budget_from_env,
    window_bytes,
)
from nexus_assets.llm.handles import handle, resolve_handles
from nexus_assets.llm.requests import (
    call_key,
    output_estimate,
    packing_budget,
    prompt_hash,
)


def test_a_handle_names_the_run_and_node_by_their_places():
    assert handle(3, 12) == "r3n12"


def test_reply_items_go_to_the_run_their_handle_names():
    handles = {"r1n1": ("a", "$['x']"), "r2n1": ("b", "$['y']"), "7": ("b", "$['z']")}
    items = [
        {"node": 7, "verbatim_quote": "q"},  # a number a model wrote for a handle
        {"node": True, "verbatim_quote": "q"},  # not a handle
        {"json_path": "$['w']", "verbatim_quote": "q"},  # a path, not a handle: as it came
        {"node": None, "json_path": "r2n1", "verbatim_quote": "q"},
        ["not", "a", "pointer"],
    ]
    assert resolve_handles(items, handles, "a") == {
        "b": [{"verbatim_quote": "q", "json_path": "$['z']"}],
        "a": [
            {"verbatim_quote": "q", "json_path": True},
            {"json_path": "$['w']", "verbatim_quote": "q"},
            {"json_path": None, "verbatim_quote": "q"},
            ["not", "a", "pointer"],
        ],
    }
    assert resolve_handles([], handles, "a") == {}


def test_the_budget_is_what_the_context_leaves_within_its_bounds():
    assert budget_for_context(128_000) == 8192  # a quarter of a 2048-token reply's worth, x4
    assert budget_for_context(5000) == 5000 - 2048 - 2000
    assert budget_for_context(3000) == 256  # the floor
    assert budget_for_context(200_000, 8000) == 16_000  # the ceiling
    assert budget_for_context(4048 + 257) == 257 and budget_for_context(4048 + 255) == 256


def test_the_budget_settings_are_whole_numbers_of_at_least_one():
    assert token_budget_from_env({"NEXUS_LLM_TOKEN_BUDGET": " 500 "}) == 500
    assert token_budget_from_env({"NEXUS_LLM_TOKEN_BUDGET": "1"}) == 1
    assert token_budget_from_env({"NEXUS_LLM_TOKEN_BUDGET": "  "}) == 8192  # blank: unset
    assert token_budget_from_env({"NEXUS_LLM_CONTEXT_TOKENS": "12000"}) == 12000 - 2048 - 2000
    assert token_budget_from_env({"NEXUS_LLM_MAX_OUTPUT_TOKENS": "1000"}) == 4000
    for bad in ("0", "abc", "-3", "2.5"):
        with pytest.raises(ValueError, match=rf"^NEXUS_LLM_TOKEN_BUDGET={bad!r} is not a whole number of at least 1$"):
            token_budget_from_env({"NEXUS_LLM_TOKEN_BUDGET": bad})
    with pytest.raises(ValueError, match="NEXUS_LLM_CONTEXT_TOKENS='x'"):  # checked even when a budget is given
        token_budget_from_env({"NEXUS_LLM_TOKEN_BUDGET": "500", "NEXUS_LLM_CONTEXT_TOKENS": "x"})


def test_tokens_are_estimated_from_utf8_bytes():
    assert [estimate_tokens(t) for t in ("", "abcd", "abcde", "é", "日本", "\ud800")] == [0, 1, 2, 1, 2, 1]


def test_sizes_count_each_entry_with_its_handle_and_separator():
    assert entry_bytes("user_message", "hi") == len('{"node":"","text":"hi","type":"user_message"}') + HANDLE_BYTES + 1
    assert (RUN_ENVELOPE_BYTES, FRAGMENT_ENVELOPE_BYTES) == (3, 11)


def _run() -> Run:
    document = {"m": ["one", "two two", {"x": 1}, "three"]}
    nodes = tuple(Node(("m", i), "user_message", None) for i in range(4))
    return Run("r", "CLOSED", None, "nexus", document, nodes)


def test_windows_are_counted_and_cut_by_those_sizes():
    run = _run()
    sizes = [entry_bytes("user_message", t) for t in ("one", "two two", "three")]
    assert window_bytes(run, run.nodes) == RUN_ENVELOPE_BYTES + sum(sizes)  # the dict node is not text
    topics = {run.nodes[0].path: ["alpha", "beta"]}
    assert window_bytes(run, run.nodes, topics) == RUN_ENVELOPE_BYTES + sum(sizes) + len(',"topics":["alpha","beta"]')
    tokens_for = lambda total: -(-(total + FRAGMENT_ENVELOPE_BYTES + RUN_ENVELOPE_BYTES) // 4)
    whole = chunk_nodes(run, list(run.nodes), token_budget=tokens_for(sum(sizes)))
    assert whole == [[run.nodes[0], run.nodes[1], run.nodes[3]]]
    cut = chunk_nodes(run, list(run.nodes), token_budget=tokens_for(sizes[0] + sizes[1]))
    assert cut == [[run.nodes[0], run.nodes[1]], [run.nodes[3]]]
    with pytest.raises(ValueError, match="^token_budget must be at least 1, got 0$"):
        chunk_nodes(run, list(run.nodes), token_budget=0)


def test_packing_fills_each_group_up_to_the_capacity_exactly():
    assert pack([3, 3, 3], 6) == [[0, 1], [2]]
    assert pack([3, 3, 3], 5) == [[0], [1], [2]]
    assert pack([7, 1, 1], 6) == [[0], [1, 2]]
    assert pack([], 6) == []


def test_a_reply_is_estimated_at_a_quarter_of_what_it_reads():
    assert [output_estimate(n, 2048) for n in (0, 1, 4, 5, 100)] == [16, 17, 17, 18, 41]
    assert output_estimate(100_000, 2048) == 2048
    assert packing_budget(8192, 2048, 3) == 4 * 2048 // 3 == 2730  # a quarter of one reply per topic asked
    assert packing_budget(8192, 2048, 0) == 8192 and packing_budget(100, 2048, 1) == 100
    assert packing_budget(0, 2048, 1) == 1 and packing_budget(8192, 1, 10) == 1


def test_request_keys_are_sha256_over_canonical_json():
    messages = [{"role": "user", "content": "x\ud800"}]
    digest = hashlib.sha256(canonical_json(messages).encode("utf-8", "surrogatepass")).hexdigest()
    assert prompt_hash(messages) == digest
    assert call_key("m", "v3", messages) == hashlib.sha256(canonical_json(["m", "v3", digest]).encode()).hexdigest()
