"""Invariant 5: identity fingerprint.

`fingerprint = sha256(normalize(text))`, normalize = Unicode NFKC, casefold, every whitespace
run collapsed to one space, stripped. It is used for dedup only: stored content is never
normalised.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

import pytest
from hypothesis import given, settings

from nexus_assets.core.fingerprint import brick_id, fingerprint, normalize
from nexus_assets.resolve.rules import resolve_topic
from nexus_assets_tests.strategies import TOPIC, make_run, occ, statuses, unicode_text


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.mark.parametrize(
    "text, expected",
    [
        pytest.param("Ｆｕｌｌｗｉｄｔｈ ＳＹＮＣ", "fullwidth sync", id="fullwidth-letters"),
        pytest.param("ﬁle ﬂow", "file flow", id="fi-fl-ligatures"),
        pytest.param("Straße", "strasse", id="sharp-s"),
        pytest.param("STRASSE", "strasse", id="upper-SS"),
        pytest.param("ẞ", "ss", id="capital-sharp-s"),
        pytest.param("a\tb\nc\r\nd", "a b c d", id="tabs-newlines"),
        pytest.param("a\u00a0b\u2003c\u3000d", "a b c d", id="nbsp-em-ideographic-space"),
        pytest.param("  \t lead and trail \n ", "lead and trail", id="stripped"),
        pytest.param("many     spaces", "many spaces", id="space-run"),
        pytest.param("e\u0301", "é", id="combining-composed"),
        pytest.param("x²", "x2", id="superscript"),
        pytest.param("①", "1", id="circled-digit"),
        pytest.param("ΣΊΣΥΦΟΣ", "σίσυφοσ", id="greek-final-sigma-casefold"),
        pytest.param("日本語", "日本語", id="cjk-unchanged"),
        pytest.param("🧱 bricks", "🧱 bricks", id="emoji-unchanged"),
    ],
)
def test_normalize_examples(text, expected):
    assert normalize(text) == expected


@pytest.mark.parametrize(
    "a, b",
    [
        ("Straße", "STRASSE"),
        ("Ｓｙｎｃ", "sync"),
        ("ﬁne", "FINE"),
        ("sync\tis\nnightly", "sync is nightly"),
        ("sync\u00a0is nightly", "SYNC IS NIGHTLY"),
        ("  sync  ", "sync"),
        ("café", "cafe\u0301"),
    ],
)
def test_equivalent_texts_share_a_fingerprint(a, b):
    assert fingerprint(a) == fingerprint(b)


@pytest.mark.parametrize(
    "a, b",
    [("sync", "async"), ("sync is nightly", "sync is hourly"), ("cafe", "café"), ("a b", "ab"), ("1", "one")],
)
def test_different_texts_have_different_fingerprints(a, b):
    assert fingerprint(a) != fingerprint(b)


@settings(max_examples=300, deadline=None)
@given(text=unicode_text)
def test_normalize_is_nfkc_casefold_whitespace_collapsed_stripped(text):
    expected = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    assert normalize(text) == expected
    assert normalize(text) == re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()
    assert fingerprint(text) == sha(expected)
    out = normalize(text)
    assert out == out.strip()
    assert "  " not in out
    assert not any(ch.isspace() and ch != " " for ch in out)


@settings(max_examples=100, deadline=None)
@given(text=unicode_text)
def test_fingerprint_ignores_compatibility_forms_and_whitespace_layout(text):
    assert fingerprint(text) == fingerprint("  \u00a0" + text + "\t\n")
    assert fingerprint(text) == fingerprint(unicodedata.normalize("NFKD", text))


def test_brick_id_is_sha256_of_topic_and_fingerprint():
    fp = fingerprint("Sync is nightly.")
    assert fp == sha("sync is nightly.")
    assert brick_id(TOPIC, fp) == sha(f"{TOPIC}:{fp}")


def test_stored_content_is_never_normalised():
    node = "Ｔｈｅ  ﬁrst\tSTRASSE\u00a0rule."
    run = make_run("r1", node)
    o = occ(run, node)
    assert o.content == node
    assert o.fingerprint == fingerprint(node) == sha(normalize(node))
    [brick] = resolve_topic(TOPIC, [o], run_status=statuses(run))
    assert brick.content == node
    assert brick.fingerprint == o.fingerprint
    assert brick.content != normalize(node)


def test_linked_occurrences_keep_their_own_verbatim_text():
    first = make_run("r1", "Sync\tis NIGHTLY.", started_at="2024-01-01T00:00:00Z")
    second = make_run("r2", "ｓｙｎｃ is nightly.", started_at="2024-02-01T00:00:00Z")
    a, b = occ(first, "Sync\tis NIGHTLY."), occ(second, "ｓｙｎｃ is nightly.")
    assert a.fingerprint == b.fingerprint
    [brick] = resolve_topic(TOPIC, [b, a], run_status=statuses(first, second))
    assert brick.content == "Sync\tis NIGHTLY."
    runs = {"r1": first, "r2": second}
    texts = []
    for source in brick.sources:
        node = runs[source.run_id].document["messages"][0]["content"]
        texts.append(node[source.start : source.end])
    assert texts == ["Sync\tis NIGHTLY.", "ｓｙｎｃ is nightly."]
    assert {fingerprint(t) for t in texts} == {brick.fingerprint}
