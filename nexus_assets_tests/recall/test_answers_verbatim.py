"""Invariant 16 (issue 59): every answer sentence is its cited texts verbatim, joined by separators
only: not a full stop added, not one dropped, whatever the texts end with (punctuation or not,
emoji, CJK, a list item's text) and whoever chose them (the offline answer or an endpoint)."""

from __future__ import annotations

import hashlib
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from nexus_assets.recall.citations import CitedSentence, extractive_answer, split_answer
from nexus_assets.services.answers import _extractive, join_sentences, verbatim_sentences

TEXTS = st.one_of(
    st.sampled_from([
        "Thai yellow curry—comforting, fragrant, and true,", "…despite being the spiciest", "The sync writes one manifest per topic and chains its hash",
        "这是最辣的。", "Green curry 🍛", "Keep the retry count at three, not five.", "**Price:** 12 EUR", "It works!", "Use `Result<T, E>` instead of raising exceptions",
    ]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="[]"), min_size=1, max_size=60).filter(lambda t: t.strip()),
)


def _item(i: int, text: str) -> dict:
    return {"id": hashlib.sha256(str(i).encode()).hexdigest(), "kind": "brick" if i % 2 else "passage", "content": text, "message": f"m{i // 2}",
            "authority": 3, "sources": [{"start": i}]}


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXTS, min_size=1, max_size=6, unique=True))
def test_every_sentence_is_its_cited_texts_joined_by_a_space(texts):
    items = [_item(i, t) for i, t in enumerate(texts)]
    parts = [CitedSentence("whatever the model wrote", (it["id"],)) for it in items]
    sentences = verbatim_sentences(parts, {it["id"]: it["content"] for it in items})
    for s in sentences:
        assert s["text"] == " ".join(next(it["content"] for it in items if it["id"] == i) for i in s["ids"])
    answer = join_sentences(sentences)
    # Take the citations out and what is left is the texts and single spaces, nothing else.
    stripped = re.sub(r" \[[0-9a-f]{12}\]", "", answer)
    assert stripped == " ".join(s["text"] for s in sentences)


@settings(max_examples=100, deadline=None)
@given(st.lists(TEXTS, min_size=1, max_size=6, unique=True))
def test_the_offline_answer_adds_nothing_to_what_it_quotes(texts):
    items = [_item(i, t) for i, t in enumerate(texts)]
    parts, _ = _extractive(items)
    by_id = {it["id"]: it["content"] for it in items}
    for p in parts:
        assert p.text == by_id[p.brick_ids[0]]
    assert extractive_answer([(it["id"], it["content"]) for it in items[:1]]) == f"{items[0]['content']} [{items[0]['id'][:12]}]"


def test_a_model_that_paraphrases_is_shown_as_the_texts_it_cites_in_its_order():
    a, b = _item(1, "The vault is one DuckDB file"), _item(2, "它只追加。")
    reply = f"Your notes live in DuckDB [{a['id'][:12]}]. And it only ever appends, never rewrites [{b['id'][:12]}][{a['id'][:12]}]. Uncited."
    parts = split_answer(reply, [a["id"], b["id"]])
    sentences = verbatim_sentences(parts, {a["id"]: a["content"], b["id"]: b["content"]})
    assert [s["text"] for s in sentences] == ["The vault is one DuckDB file", "它只追加。"]
    assert join_sentences(sentences) == f"The vault is one DuckDB file [{a['id'][:12]}] 它只追加。 [{b['id'][:12]}]"
