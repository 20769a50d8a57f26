"""Session files line by line (issue 51's mutation benchmark, docs/inputs.md): what `read_lines` keeps,
skips and names for each kind of bad line, the file limits, and how a JSON Lines file is told from
a JSON document, a session file as its run, and a document of no known format. Each problem is
checked by its exact line, so a changed limit or message fails here."""

from __future__ import annotations

import io
import json

import pytest

from nexus_assets.core.models import IngestionError
from nexus_assets.ingest.formats import FormatError
from nexus_assets.ingest.formats import limits as L
from nexus_assets.ingest.formats.dispatch import parse_document
from nexus_assets.ingest.formats.jsonl import (
    MAX_PROBLEMS,
    LineProblem,
    looks_like_json_lines,
    read_lines,
    session_document,
)
from nexus_assets.ingest.formats.limits import InputLimits
from nexus_assets.ingest.formats.sessions import (
    is_session_event,
    iter_session,
    session_format,
)


def _read(data: bytes, **limits):
    args = {"max_line_bytes": 100, "max_depth": 5, "max_bytes": 10_000, "max_lines": 100, **limits}
    return read_lines(io.BytesIO(data), **args)


def test_blank_lines_keep_every_later_line_at_its_number_and_end_the_file_unnamed():
    assert _read(b'{"a":1}\n\n{"b":2}\n\n\n') == ([{"a": 1}, None, {"b": 2}], [])
    assert _read(b"") == ([], [])


def test_a_long_line_is_skipped_unparsed_and_the_next_line_is_read():
    lines, problems = _read(b'{"a":1}\n{"x":"' + b"y" * 300 + b'"}\n{"c":3}\n')
    assert lines == [{"a": 1}, None, {"c": 3}]
    assert problems == [LineProblem(2, "is over the 100-byte line limit (NEXUS_MAX_JSONL_LINE_BYTES); skipped")]
    # Exactly at the limit, newline included, is not over it.
    line = b'{"x":"' + b"y" * 91 + b'"}\n'
    assert len(line) == 100 and _read(line)[0] == [{"x": "y" * 91}]


def test_each_bad_line_is_named_and_costs_that_line_only():
    data = (b'{"a":1}\n[1]\n{"a":NaN}\n{"a":1e999}\n{"a":\xff}\n{bad\n[[[[[[[1]]]]]]]\n'
            b'{"s":"\\ud800"}\n{"s":"\\ud83d\\ude00"}\n{"s":"\\uD800x"}\n{"ok":2}\n')
    lines, problems = _read(data)
    assert lines == [{"a": 1}, None, None, None, None, None, None, None, {"s": "😀"}, None, {"ok": 2}]
    assert problems == [
        LineProblem(2, "is a JSON list, not an event object; skipped"),
        LineProblem(3, "holds the constant NaN (not JSON), which no reader can keep exactly; skipped"),
        LineProblem(4, "holds the number 1e999, beyond the range of a 64-bit float, which no reader can keep exactly; skipped"),
        LineProblem(5, "is not valid UTF-8 at byte 5 of the line; skipped"),
        LineProblem(6, "is not valid JSON (Expecting property name enclosed in double quotes at column 2); skipped"),
        LineProblem(7, f"{L.depth_message(5)}; skipped"),
        LineProblem(8, "holds an unpaired UTF-16 surrogate escape, which no reader can keep exactly; skipped"),
        LineProblem(10, "holds an unpaired UTF-16 surrogate escape, which no reader can keep exactly; skipped"),
    ]


def test_a_number_beyond_a_float_is_named_by_its_first_40_characters():
    number = "1." + "0" * 50 + "e999"
    assert _read(b'{"a":' + number.encode() + b"}\n")[1] == [
        LineProblem(1, f"holds the number {number[:40]}, beyond the range of a 64-bit float, which no reader can keep exactly; skipped")
    ]


def test_nesting_is_checked_only_past_the_limit():
    five = b'{"a":{"b":{"c":{"d":{"e":1}}}}}\n'
    assert _read(five) == ([{"a": {"b": {"c": {"d": {"e": 1}}}}}], [])
    assert _read(b'{"a":"[[[[[[[[[["}\n') == ([{"a": "[[[[[[[[[["}], [])  # brackets in a string nest nothing
    lines, problems = _read(b'{"a":1}\n{"a":{"b":{"c":{"d":{"e":{"f":1}}}}}}\n')
    assert lines == [{"a": 1}, None] and problems == [LineProblem(2, f"{L.depth_message(5)}; skipped")]


def test_the_line_being_written_waits_for_the_next_sync_but_a_whole_last_line_is_read():
    assert _read(b'{"a":1}\n{"partial') == ([{"a": 1}], [])
    assert _read(b'{"a":1}\n{"b":2}') == ([{"a": 1}, {"b": 2}], [])
    assert _read(b'{"a":1}\n[1]') == ([{"a": 1}], [])  # whatever it is, it is not finished


def test_the_file_limits_refuse_the_whole_file():
    with pytest.raises(L.LimitError, match=r"^session file has more than 4 lines \(NEXUS_MAX_SESSION_LINES\); none of it"):
        _read(b"{}\n" * 5, max_lines=4)
    assert _read(b"{}\n" * 4, max_lines=4)[0] == [{}] * 4
    with pytest.raises(L.LimitError, match=r"^session file is over the 30-byte limit \(NEXUS_MAX_SESSION_FILE_BYTES\); the lines before line 4 "):
        _read(b'{"a":1}\n' * 5, max_bytes=30)
    assert len(_read(b'{"a":1}\n' * 4, max_bytes=32)[0]) == 4
    # A long line's skipped rest counts towards the file's bytes.
    with pytest.raises(L.LimitError, match="over the 150-byte limit"):
        _read(b'{"x":"' + b"y" * 300 + b'"}\n{"a":1}\n', max_bytes=150)


def test_past_a_thousand_bad_lines_the_rest_are_counted_not_named():
    lines, problems = _read(b"[1]\n" * (MAX_PROBLEMS + 2) + b"{}\n", max_lines=5000, max_bytes=100_000)
    assert lines == [None] * (MAX_PROBLEMS + 2) + [{}] and len(problems) == MAX_PROBLEMS + 1
    assert problems[-2] == LineProblem(MAX_PROBLEMS, "is a JSON list, not an event object; skipped")
    assert problems[-1] == LineProblem(
        MAX_PROBLEMS + 3, f"and 2 more bad lines after line {MAX_PROBLEMS} were skipped without being named"
    )


@pytest.mark.parametrize("head, is_event, expected", [
    (b'\xef\xbb\xbf \r\n{"a":1}\n{"b":2}\n', False, True),  # a BOM and blank space first
    (b'{"a":1}\n', False, False),  # one line that is no event: a one-line JSON document
    (b'{"a":1}\n  \n', False, False),
    (b'{"a":1}', True, True),  # the one line of a session
    (b'{"a":1}', False, False),
    (b"[1]\n[2]\n", True, False),
    (b'{\n "a":1}\n', True, False),  # pretty-printed JSON
    (b'"x"', True, False),
    (b'{"a":[1]}\n{"b":2}', False, True),
    (b'X{"a":1}\n{"b":2}\n', False, False),  # only blank space and a BOM may come first
    (b'{"a":1}\nx', False, True),  # anything after the first line

])
def test_json_lines_are_told_from_a_json_document_by_their_first_line(head, is_event, expected):
    assert looks_like_json_lines(head, lambda value: is_event) is expected


def test_a_one_line_value_that_is_no_object_is_no_json_lines():
    assert looks_like_json_lines(b"[1]", lambda value: True) is False
    assert looks_like_json_lines(b"[" * 3000 + b"]" * 3000 + b"\n{}\n", lambda value: True) is False


def test_a_session_document_is_its_lines_then_its_header():
    doc = session_document([{"a": 1}], "claude-code", {"session_id": "s", "title": "t"})
    assert doc == {"lines": [{"a": 1}], "session_format": "claude-code", "session_id": "s", "title": "t"}
    assert next(iter(doc)) == "lines"
    with pytest.raises(FormatError, match="^unknown session format 'chatgpt'$"):
        session_document([], "chatgpt", {})


# A session file as a run ------------------------------------------------------------------------


def _user_line(session: str, text: str, uuid: str = "u1") -> bytes:
    line = {"type": "user", "message": {"role": "user", "content": text}, "sessionId": session, "uuid": uuid,
            "timestamp": "2025-01-01T00:00:00Z"}
    return json.dumps(line).encode() + b"\n"


def _session(data: bytes) -> list:
    return list(iter_session(io.BytesIO(data), "s.jsonl", "sha", InputLimits()))


def test_a_session_is_its_run_then_one_error_per_bad_line():
    run, error = _session(_user_line("s1", "hi") + b"[1]\n" + _user_line("s1", "again", "u2"))
    assert (run.run_id, run.format, run.document["lines"][1]) == ("s1", "claude-code", None)
    assert error == IngestionError("s.jsonl", "line 2 is a JSON list, not an event object; skipped; the rest of the session was read",
                                   conversation="s1", file_sha256="sha")
    assert len(_session(_user_line("s" * 256, "hi"))) == 1  # the longest usable id
    assert len(_session(_user_line("XID", "hi"))) == 1


def test_a_session_without_its_id_yet_yields_its_bad_lines_only():
    summary = json.dumps({"type": "summary", "summary": "x", "leafUuid": "l"}).encode() + b"\n"
    assert _session(summary + b"[1]\n") == [
        IngestionError("s.jsonl", "line 2 is a JSON list, not an event object; skipped", file_sha256="sha")
    ]


@pytest.mark.parametrize("data, message", [
    (b"[1]\n{bad\n", "^JSON Lines of which no line could be read; first problem: line 1 is a JSON list, not an event object; skipped$"),
    (b'{"a":1}\n', "^JSON Lines, but not a Claude Code session .* nor a Codex CLI rollout .*; move it out of the runs folder$"),
    (b'{"a":1}\n[2]\n', "^JSON Lines, but not a Claude Code session"),
    (_user_line("s" * 257, "hi"), r"^session id 's{60}'… is not a usable run id \(over 256 characters or control characters\)$"),
    (_user_line("a\tb", "hi"), r"^session id 'a\\tb'… is not a usable run id"),
    (_user_line("a\nb", "hi"), r"^session id 'a\\nb'… is not a usable run id"),
    (_user_line("a\rb", "hi"), r"^session id 'a\\rb'… is not a usable run id"),
    (_user_line("a\x00b", "hi"), r"^session id 'a\\x00b'… is not a usable run id"),
])
def test_a_file_that_is_no_usable_session_is_refused_whole(data, message):
    with pytest.raises(FormatError, match=message):
        _session(data)


def test_the_tool_is_told_by_the_first_line_any_tool_would_write():
    assert session_format([None, {"a": 1}, json.loads(_user_line("s", "x"))]) == "claude-code"
    assert session_format([{}]) is None and not is_session_event({"a": 1})
    assert is_session_event(json.loads(_user_line("s", "x")))


@pytest.mark.parametrize("document, found", [({"b": 2, "a": 1}, "['a', 'b']"), ([1], "list"), ("x", "str"),
                                             ({k: 0 for k in "jihgfedcba"}, str(sorted("abcdefgh")))])
def test_a_document_of_no_known_format_names_what_it_holds(document, found):
    with pytest.raises(FormatError) as caught:
        parse_document(document)
    assert str(caught.value) == (
        f"valid JSON but not a known run format (found {found}); expected a Nexus run "
        '{"run_id", "status", "messages"} or a ChatGPT/Claude conversations.json export'
    )
