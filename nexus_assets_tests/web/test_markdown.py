"""The viewer draws a brick's and a passage's inline Markdown (docs/viewer.md "Markdown",
web/markdown.py): emphasis, strong, code and a link's text, every character escaped, nothing a
browser could follow or run; the stored text, byte for byte, is one click away."""

from __future__ import annotations

import hashlib
import json
import re
import time
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markupsafe import escape

from nexus_assets.cli import main
from nexus_assets.web.markdown import MAX_MARKDOWN_CHARS, inline_markdown
from nexus_assets_tests.project import Project, nexus_run
from nexus_assets_tests.web.test_viewer import cli_json, fetch, running_viewer

TAGS = {"em", "strong", "code", "span", "mark"}


def md(text: str, hits=()) -> str:
    return str(inline_markdown(text, hits))


class _Shown(HTMLParser):
    """What a browser would build from the drawing: its tags and attributes, and its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list]] = []
        self.text: list[str] = []
        self.depth = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))
        self.depth += 1

    def handle_endtag(self, tag):
        self.depth -= 1
        assert self.depth >= 0, "a tag closed that was not open"

    def handle_data(self, data):
        self.text.append(data)


def shown(html: str) -> _Shown:
    parser = _Shown()
    parser.feed(html)
    parser.close()
    assert parser.depth == 0, f"unbalanced tags in {html!r}"
    return parser


# The constructs


@pytest.mark.parametrize(
    ("text", "drawn"),
    [
        ("**Green Curry** is hot", "<strong>Green Curry</strong> is hot"),
        ("__Green Curry__ is hot", "<strong>Green Curry</strong> is hot"),
        ("a *mild* one", "a <em>mild</em> one"),
        ("a _mild_ one", "a <em>mild</em> one"),
        ("run `nexus sync` first", "run <code>nexus sync</code> first"),
        ("``a ` b``", "<code>a ` b</code>"),
        ("see [the docs](https://example.com/x) now", 'see <span class="md-link">the docs</span> now'),
        ("![a cat](https://example.com/cat.png)", '<span class="md-image">a cat</span>'),
        ("***both***", "<em><strong>both</strong></em>"),
        ("*a **b** c*", "<em>a <strong>b</strong> c</em>"),
        ("**a *b* c**", "<strong>a <em>b</em> c</strong>"),
        ("**[bold link](https://e.com)**", '<strong><span class="md-link">bold link</span></strong>'),
        ("[**in a link**](u)", '<span class="md-link"><strong>in a link</strong></span>'),
        ("x**y**z", "x<strong>y</strong>z"),
    ],
)
def test_emphasis_strong_code_and_a_links_text_are_drawn(text, drawn):
    assert md(text) == drawn


@pytest.mark.parametrize(
    "text",
    [
        "snake_case_name stays", "2 * 3 * 4", "**unbalanced", "*unbalanced", "unbalanced**", "`unclosed code",
        "a ** b ** c", "[no destination]", "[text] (space first)", "* a list item", "_", "**", "```",
    ],
)
def test_what_is_not_a_construct_is_shown_as_typed(text):
    assert md(text) == str(escape(text))


def test_a_backslash_shows_the_character_it_escapes_literally():
    assert md(r"\*not em\*") == "*not em*"
    assert md(r"\`not code\`") == "`not code`"
    assert md(r"a \\ b") == "a \\ b"  # an escaped backslash
    assert md(r"\a stays") == r"\a stays"  # not ASCII punctuation: no escape


def test_code_content_is_literal():
    assert md("`**not strong** <b>`") == "<code>**not strong** &lt;b&gt;</code>"
    assert md("`[a](b)`") == "<code>[a](b)</code>"


# Hostile text


@pytest.mark.parametrize(
    "text",
    [
        "<script>alert(1)</script>",
        "**<script>alert(1)</script>**",
        "<img src=x onerror=alert(1)>",
        "`<script>`",
        "[<script>x</script>](javascript:alert(1))",
        '[click](javascript:alert(1) "title") me',
        "[click](data:text/html;base64,PHNjcmlwdD4=)",
        "[x](https://e.com/\"onmouseover=\"alert(1))",
        '<a href="javascript:alert(1)">a</a>',
        "*<b>*</b>",
        "\"'><svg/onload=alert(1)>",
    ],
)
def test_hostile_text_is_shown_as_text_and_nothing_can_be_followed_or_run(text):
    drawn = md(text)
    parsed = shown(drawn)
    # Only our tags, each with no attribute but a fixed class: no href, src or handler to follow or run.
    assert {tag for tag, _ in parsed.tags} <= TAGS
    assert all(attrs in ([], [("class", "md-link")], [("class", "md-image")]) for _, attrs in parsed.tags)
    assert "<script" not in drawn and "<img" not in drawn and "<a " not in drawn and "<svg" not in drawn


def test_entities_are_shown_as_typed_never_decoded():
    assert md("&lt;script&gt; &amp; &#60;b&#62;") == "&amp;lt;script&amp;gt; &amp;amp; &amp;#60;b&amp;#62;"
    assert "".join(shown(md("**&lt;b&gt;**")).text) == "&lt;b&gt;"


def test_hits_mark_the_words_inside_whatever_construct_holds_them():
    assert md("**Green Curry** ok", [(2, 7)]) == '<strong><mark class="hit">Green</mark> Curry</strong> ok'
    # A hit across a construct's edge is marked piece by piece, so every tag stays nested.
    drawn = md("one **two three** four", [(0, 9)])
    assert drawn == '<mark class="hit">one </mark><strong><mark class="hit">two</mark> three</strong> four'
    shown(drawn)
    # A passage marked in its window: the whole text.
    assert md("say `x`", [(0, 7)]) == '<mark class="hit">say </mark><code><mark class="hit">x</mark></code>'


def test_a_text_over_the_limit_is_shown_escaped_as_typed():
    text = "**a**" + "x" * MAX_MARKDOWN_CHARS
    assert md(text) == text


@pytest.mark.parametrize(
    "text",
    ["[" * 150_000, "*a " * 60_000, "_a " * 30_000 + "a_ " * 30_000, "".join("`" * k + "x" for k in range(1, 550)),
     "***a**" * 30_000, "[a](" * 45_000, "![[" * 60_000],
)
def test_drawing_is_fast_on_pathological_text(text):
    started = time.perf_counter()
    shown(md(text))
    assert time.perf_counter() - started < 5.0


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="*_`[]()!\\<>&\"' ab\n", max_size=60))
def test_any_text_draws_balanced_tags_and_shows_its_characters_in_order(text):
    """Whatever the markers, the drawing is well-formed, only our tags, and its text is the stored
    text's characters in order, some markers left out and none added; without a link (whose
    destination is not shown) every character that is no marker is shown."""
    parsed = shown(md(text))
    assert {tag for tag, _ in parsed.tags} <= TAGS
    drawn = "".join(parsed.text)
    rest = iter(text)
    assert all(ch in rest for ch in drawn), "the drawn text is a subsequence of the stored text"
    if "](" not in text:
        markers = re.compile(r"[*_`\[\]()!\\]")
        assert markers.sub("", drawn) == markers.sub("", text)


# On the viewer's pages


RUN = nexus_run(
    "run-curry",
    [
        ("user", "What should we cook on Friday?"),
        ("assistant", "Make the **Green Curry** with `jasmine rice` and <script>alert('x')</script> lime; "
                      "the recipe is [here](javascript:alert(1))."),
    ],
)
CURRY = "Make the **Green Curry** with `jasmine rice` and <script>alert('x')</script> lime; the recipe is [here](javascript:alert(1))."


@pytest.fixture(scope="module")
def curry(tmp_path_factory) -> Project:
    project = Project(tmp_path_factory.mktemp("markdown") / "proj")
    project.write_run("curry.json", RUN)
    project.write_topic("dinner", keywords=["curry"])
    assert main([*project.sync_args(), "--no-recall"]) == 0
    return project


def test_the_topic_page_draws_a_bricks_markdown_and_the_trace_keeps_its_exact_text(curry):
    with running_viewer(curry.db) as viewer:
        status, _, body = fetch(f"{viewer.url}topics/dinner")
        assert status == 200
        assert "<strong>Green Curry</strong> with <code>jasmine rice</code>" in body
        assert '<span class="md-link">here</span>' in body and "**Green Curry**" not in body
        assert "javascript:" not in body and "href=\"javascript" not in body
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in body and body.count("<script") == 1
        # Search hits are marked inside the drawn Markdown.
        status, _, body = fetch(f"{viewer.url}topics/dinner?q=green")
        assert '<strong><mark class="hit">Green</mark> Curry</strong>' in body

        # The source panel's data (what viewer.js draws as text under "Stored text") is the stored text.
        (brick,) = [b for b in cli_json(curry, "bricks", "dinner") if b["content"] == CURRY]
        status, _, body = fetch(f"{viewer.url}api/bricks/{brick['brick_id'][:12]}/trace")
        traced = json.loads(body)
        assert traced["content"] == CURRY and traced["traces"][0]["quote"] == CURRY


def test_a_passage_page_draws_its_markdown_with_the_exact_text_a_click_away(curry):
    with running_viewer(curry.db) as viewer:
        (brick,) = [b for b in cli_json(curry, "bricks", "dinner") if b["content"] == CURRY]
        s = brick["sources"][0]
        passage_id = hashlib.sha256(f"{s['run_id']}:{s['json_path']}:{s['start']}:{s['end']}".encode()).hexdigest()
        status, _, body = fetch(f"{viewer.url}passages/{passage_id[:12]}")
        assert status == 200
        window = body.split('id="passage-window">', 1)[1].split("</blockquote>", 1)[0]
        assert '<strong><mark class="hit">Green Curry</mark></strong>' in window and "**" not in window
        exact = body.split('<pre class="exact">', 1)[1].split("</pre>", 1)[0]
        assert exact == str(escape(CURRY))  # as stored, every character escaped and nothing drawn
        assert "href" not in window and "javascript:" not in window
