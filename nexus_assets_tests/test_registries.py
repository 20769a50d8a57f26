"""The extension points are one list each (docs/extending.md): a source format registered once is
detected and read everywhere, and the extractor names every surface offers are the registered ones."""

from typing import get_args

import pytest

from nexus_assets.cli import build_parser
from nexus_assets.extract.registry import EXTRACTORS, ExtractorName, ExtractorUnavailable, extractor_kind, extractor_names
from nexus_assets.ingest.formats import FormatError
from nexus_assets.ingest.formats.registry import detect_format
from nexus_assets.ingest.formats.dispatch import parse_document
from nexus_assets.ingest.formats.nexus import nexus_run
from nexus_assets.ingest.formats.registry import FORMATS, SourceFormat, names, one_file_formats, register
from nexus_assets.ingest.formats.sessions import session_format


def test_each_registered_format_is_detected_by_its_content():
    samples = {
        "nexus": {"run_id": "r", "status": "CLOSED", "messages": []},
        "chatgpt": {"mapping": {}},
        "claude": {"chat_messages": []},
        "claude-code": {"lines": [], "session_format": "claude-code"},
        "codex": {"lines": [], "session_format": "codex"},
    }
    assert set(samples) == set(FORMATS)
    assert {name: detect_format(doc) for name, doc in samples.items()} == {name: name for name in samples}
    # A session document names its tool; an unknown one is no format at all.
    assert detect_format({"lines": [], "session_format": "notepad"}) is None
    assert detect_format(["not", "an", "object"]) is None


def test_the_containers_follow_from_the_list():
    assert names("export") == ("chatgpt", "claude")
    assert names("session") == ("codex", "claude-code")
    assert one_file_formats() == ("codex", "claude-code", "nexus")
    # The first line either tool would write decides.
    assert session_format([{"type": "session_meta", "payload": {"id": "x"}}]) == "codex"
    assert session_format([{"sessionId": "s", "type": "user", "message": {"role": "user", "content": "hi"}}]) == "claude-code"


def test_a_format_registered_once_is_read_by_the_one_dispatcher():
    toy = SourceFormat(
        "toy", "document", lambda d: "toy_turns" in d,
        lambda d, _after, _index: nexus_run({"run_id": d["id"], "status": "CLOSED",
                                             "messages": [{"role": "user", "content": t} for t in d["toy_turns"]]}),
    )
    with pytest.raises(FormatError):
        parse_document({"id": "t1", "toy_turns": ["The toy format is read."]})
    register(toy)
    try:
        run = parse_document({"id": "t1", "toy_turns": ["The toy format is read."]})
        assert detect_format({"toy_turns": []}) == "toy"
        assert run.run_id == "t1" and "toy" in one_file_formats()
    finally:
        del FORMATS["toy"]


def test_a_format_is_registered_once_and_a_session_format_says_how_to_tell_its_lines():
    with pytest.raises(ValueError, match="registered twice"):
        register(FORMATS["nexus"])
    with pytest.raises(ValueError, match="needs is_event and header"):
        register(SourceFormat("half-session", "session", lambda d: False, lambda d, a, i: None))
    assert "half-session" not in FORMATS


def test_every_surface_offers_the_registered_extractors():
    assert extractor_names() == list(EXTRACTORS) == list(get_args(ExtractorName)) == ["embedded", "openai"]
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    for command in ("sync", "discover"):
        extractor = next(a for a in commands[command]._actions if a.dest == "extractor")
        assert list(extractor.choices) == extractor_names()
    assert [k.name for k in EXTRACTORS.values() if k.calls_endpoint] == ["openai"]


def test_an_unknown_extractor_is_one_line_naming_the_choices():
    with pytest.raises(ExtractorUnavailable, match=r"^unknown extractor 'gpt'; choose one of embedded, openai$"):
        extractor_kind("gpt")
