"""Invariant 11 inside an export: one value no reader can keep exactly (a number past 64 bits, a
lone UTF-16 surrogate escape) costs its conversation only; the conversations after it compile.

The reader runs in a child process under a memory cap and a time limit (see test_hostile_input)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus_assets.ingest.formats.values import ValueGuard
from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.project import Project
from nexus_assets_tests.ingest.test_hostile_input import claude, read_capped

TAIL = "this conversation was skipped, the rest of the export was read; fix that value in the export and sync again"
BAD_VALUES = {
    "1e999999": "$['extra'] holds the number 1e999999, beyond the range of a 64-bit float",
    "-1.8e308": "$['extra'] holds the number -1.8e308, beyond the range of a 64-bit float",
    "9223372036854775808": "$['extra'] holds the integer 9223372036854775808, which does not fit in 64 bits",
    '"\\ud800"': "$['extra'] holds an unpaired UTF-16 surrogate escape ('\\ud800'), which is no character",
    '"a \\udfff b"': "$['extra'] holds an unpaired UTF-16 surrogate escape ('\\udfff'), which is no character",
    '{"k": ["x\\uD83Dy"]}': "$['extra']['k'][0] holds an unpaired UTF-16 surrogate escape ('\\ud83d'), which is no character",
}


def export(bad: str) -> str:
    return "[" + ", ".join([claude("good-1", "Before."), claude("bad", "x", bad), claude("good-2", "After.")]) + "]"


@pytest.mark.parametrize("bad", list(BAD_VALUES))
def test_a_bad_value_costs_its_conversation_only(tmp_path: Path, bad: str):
    path = tmp_path / "conversations.json"
    path.write_text(export(bad))
    result = read_capped(path)
    assert [i.get("run_id") or (i["conversation"], i["problem"]) for i in result["items"]] == [
        "good-1",
        ("bad", f"{BAD_VALUES[bad]}; {TAIL}"),
        "good-2",
    ]


def test_valid_values_that_look_alike_pass_unchanged():
    # Text that reads like a bad value, an escaped backslash before "ud800", valid pairs,
    # numbers near the limits, hex ids: all handed on byte for byte, nothing marked.
    raw = (
        b'[{"uuid": "c-3e456-1e999", "text": "1e999999, 99999999999999999999 and \\\\ud800 are text", '
        b'"pair": "\\ud83d\\ude00", "n": 1.5e308, "tiny": 1e-999999, "i": -9223372036854775808, '
        b'"long": 0.123456789012345678901234567890, "ok": [1e10, 2E+300]}]'
    )
    guard = ValueGuard(io.BytesIO(raw))
    out = b"".join(iter(lambda: guard.read(7), b""))
    assert out == raw and guard.problems == {}
    assert json.loads(out)[0]["pair"] == "\U0001f600"


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(["1e999999", "123456789012345678901", '"\\udc00"', '"ok \\ud83d\\ude00"', "12.5", '"\\\\ud800"']), min_size=1, max_size=6),
    st.integers(1, 40),
)
def test_the_guard_finds_every_bad_value_wherever_the_chunks_break(values: list[str], size: int):
    raw = ("[" + ", ".join(f'{{"id": {i}, "v": {v}, "t": "x"}}' for i, v in enumerate(values)) + "]").encode()
    guard = ValueGuard(io.BytesIO(raw))
    items = json.loads(b"".join(iter(lambda: guard.read(size), b"")))
    bad = [i for i, v in enumerate(values) if v in ("1e999999", "123456789012345678901", '"\\udc00"')]
    assert [item["id"] for item in items if guard.bad_value(item)] == bad
    assert all(item["t"] == "x" for item in items)
    fine = {'"ok \\ud83d\\ude00"': "ok 😀", "12.5": 12.5, '"\\\\ud800"': "\\ud800"}
    assert all(item["v"] == fine[values[item["id"]]] for item in items if item["id"] not in bad)


def test_a_two_million_digit_number_is_refused_in_bounded_memory_and_time(tmp_path: Path):
    path = tmp_path / "conversations.json"
    path.write_text(export("1" * 2_000_000))
    result = read_capped(path)
    assert [i.get("run_id") or i["conversation"] for i in result["items"]] == ["good-1", "bad", "good-2"]
    assert "(over 4096 characters), too long to read" in result["items"][1]["problem"]
    assert result["peak_kb"] < 200 * 1024 and result["seconds"] < 60, result


def test_a_sync_of_an_export_with_bad_values_compiles_the_other_conversations(empty_project: Project):
    p = empty_project
    p.write_topic("vault-notes", keywords=["vault"])
    conversations = [claude(f"c-{i}", f"The vault note {i}.") for i in range(4)]
    conversations.insert(1, claude("inf", "The vault is infinite.", "1e999999"))
    conversations.insert(3, claude("lone", "The vault \\ud800 is odd."))
    data = ("[" + ", ".join(conversations) + "]").encode()
    with zipfile.ZipFile(p.runs / "export.zip", "w") as archive:
        archive.writestr("conversations.json", data)
    done = run_nexus(*p.sync_args("vault-notes"), env={"NEXUS_NO_RECALL": "1"}, cwd=p.root)
    assert done.returncode == 0, done.stderr[-3000:]
    bricks = json.loads(run_nexus(*p.cli_args(), "bricks", "vault-notes", "--json").stdout)
    assert {s["run_id"] for b in bricks for s in b["sources"]} == {"c-0", "c-1", "c-2", "c-3"}
    listed = run_nexus(*p.cli_args(), "errors", cwd=p.root).stdout.splitlines()
    assert listed == [
        f"runs/export.zip [inf]: $['extra'] holds the number 1e999999, beyond the range of a 64-bit float; {TAIL}",
        f"runs/export.zip [lone]: $['chat_messages'][0]['text'] holds an unpaired UTF-16 surrogate escape ('\\ud800'), which is no character; {TAIL}",
    ]
