import json
import os
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus_assets.core.sentences import sentence_spans, sentences


def case(text, expected, name):
    return pytest.param(text, expected, id=name)


PROSE = [
    case("Hello world. This is a test.", ["Hello world.", "This is a test."], "two-sentences"),
    case("Really?! Yes! No way...", ["Really?!", "Yes!", "No way..."], "terminator-runs"),
    case("Wait... what happened?", ["Wait... what happened?"], "ellipsis-then-lowercase"),
    case("Wait… What happened?", ["Wait…", "What happened?"], "ellipsis-then-uppercase"),
    case("He said \"stop.\" Then he left.", ['He said "stop."', "Then he left."], "closing-quote"),
    case("It works (mostly.) Next one.", ["It works (mostly.)", "Next one."], "closing-bracket"),
    case("It’s done.’ Then we rest.", ["It’s done.’", "Then we rest."], "curly-closing-quote"),
    case("First one. \"Second,\" she said.", ["First one.", '"Second," she said.'], "opening-quote"),
    case("First one. (Second one.)", ["First one.", "(Second one.)"], "opening-bracket"),
    case("Count up. 3 is next.", ["Count up.", "3 is next."], "digit-starts-sentence"),
    case("this is fine. and this too", ["this is fine. and this too"], "lowercase-continues"),
    case("  no terminator at all  ", ["no terminator at all"], "no-terminator"),
    case("Ends without space.Next word", ["Ends without space.Next word"], "no-space-no-split"),
    case("Done! 🎉 Let's go.", ["Done! 🎉 Let's go."], "emoji-does-not-start-a-sentence"),
    case("I love it 😍. Next one 👍!", ["I love it 😍.", "Next one 👍!"], "emoji-inside"),
    case("Family 👨‍👩‍👧. Fine.", ["Family 👨‍👩‍👧.", "Fine."], "zwj-emoji"),
    case("That is **important.** Next part.", ["That is **important.**", "Next part."], "bold-closer"),
    case("Read this. **Note:** it matters.", ["Read this.", "**Note:** it matters."], "bold-opener"),
    case("Read this. *then* relax.", ["Read this. *then* relax."], "emphasis-then-lowercase"),
    case("Run it. `make` builds it.", ["Run it.", "`make` builds it."], "inline-code-starts"),
    case("Tabs\tare. Whitespace\u00a0too.\u00a0Yes.", ["Tabs\tare.", "Whitespace\u00a0too.", "Yes."], "unicode-space"),
]

ABBREVIATIONS = [
    case("Use a tool, e.g. Python. It helps.", ["Use a tool, e.g. Python.", "It helps."], "e.g."),
    case("One thing, i.e. This one.", ["One thing, i.e. This one."], "i.e."),
    case("Apples, pears, etc. Are fine.", ["Apples, pears, etc. Are fine."], "etc."),
    case("Tabs vs. Spaces is old.", ["Tabs vs. Spaces is old."], "vs."),
    case("Mr. Smith met Mrs. Jones and Ms. Lee.", ["Mr. Smith met Mrs. Jones and Ms. Lee."], "titles"),
    case("Dr. Who and Prof. X met.", ["Dr. Who and Prof. X met."], "dr-prof"),
    case("St. Louis, Jr. And Sr. Too.", ["St. Louis, Jr. And Sr. Too."], "st-jr-sr"),
    case("Acme Inc. And Foo Ltd. And Bar Co. Merged.", ["Acme Inc. And Foo Ltd. And Bar Co. Merged."], "companies"),
    case("See No. 5 now.", ["See No. 5 now."], "no-before-number"),
    case("No. That is wrong.", ["No.", "That is wrong."], "no-as-a-word"),
    case("It is approx. 3 km. Go.", ["It is approx. 3 km.", "Go."], "approx."),
    case("See cf. Smith, Fig. 3 and Eq. 2 here.", ["See cf. Smith, Fig. 3 and Eq. 2 here."], "cf-fig-eq"),
    case("I ate a fig. Then slept.", ["I ate a fig.", "Then slept."], "lowercase-fig-is-a-word"),
    case("Born in the U.S. Army base.", ["Born in the U.S. Army base."], "u.s."),
    case("At 9 a.m. Sharp. Or 5 P.M. Later.", ["At 9 a.m. Sharp.", "Or 5 P.M. Later."], "am-pm"),
    case("Say E.G. Python.", ["Say E.G. Python."], "case-insensitive-e.g."),
    case("J. R. R. Tolkien wrote it.", ["J. R. R. Tolkien wrote it."], "initials"),
    case("Smith et al. (2020) showed it.", ["Smith et al. (2020) showed it."], "et-al"),
    case("Ask a Ph.D. Student.", ["Ask a Ph.D. Student."], "ph.d."),
    case("(e.g. This one) works.", ["(e.g. This one) works."], "abbreviation-after-bracket"),
]

NUMBERS_AND_NAMES = [
    case("Pi is 3.14 roughly. Next.", ["Pi is 3.14 roughly.", "Next."], "decimal"),
    case("Use v1.2.3 or 2.0. Both work.", ["Use v1.2.3 or 2.0.", "Both work."], "version"),
    case("It was 2023. Then 2024 came.", ["It was 2023.", "Then 2024 came."], "year-ends-sentence"),
    case("Visit example.com today. Thanks.", ["Visit example.com today.", "Thanks."], "domain"),
    case("Open data/runs/a.json now. Done.", ["Open data/runs/a.json now.", "Done."], "file-path"),
    case(
        "See https://x.y/z?a=b&c=d.e for it. Then stop.",
        ["See https://x.y/z?a=b&c=d.e for it.", "Then stop."],
        "url-with-query",
    ),
    case("Go to https://example.com. It is up.", ["Go to https://example.com.", "It is up."], "url-ends-sentence"),
    case("Is it http://a.b/c? Yes it is.", ["Is it http://a.b/c?", "Yes it is."], "url-then-question"),
    case("Call `obj.method()` first. Then wait.", ["Call `obj.method()` first.", "Then wait."], "inline-code"),
    case("Run `a. B? C!` then. Ok.", ["Run `a. B? C!` then.", "Ok."], "terminators-inside-inline-code"),
    case("Use ``a. `B` c`` here. Next.", ["Use ``a. `B` c`` here.", "Next."], "double-backtick-code"),
    case("A lone ` tick. Then more.", ["A lone ` tick.", "Then more."], "unmatched-backtick"),
]

MARKDOWN = [
    case("Para one.\n\nPara two.", ["Para one.", "Para two."], "blank-line"),
    case("line one\nline two", ["line one", "line two"], "single-newline"),
    case("crlf one\r\ncrlf two\r\n", ["crlf one", "crlf two"], "crlf"),
    case("- first\n- second item. More.", ["first", "second item.", "More."], "dash-list"),
    case("* star\n+ plus", ["star", "plus"], "star-plus-list"),
    case("1. one\n2) two\n10. ten", ["one", "two", "ten"], "ordered-list"),
    case("- outer\n  - inner\n    1. deep", ["outer", "inner", "deep"], "nested-list"),
    case("- [ ] todo\n- [x] done\n* [X] also", ["todo", "done", "also"], "task-list"),
    case("# Title\n## Sub title ##\n###### Six", ["Title", "Sub title", "Six"], "headings"),
    case("# Step 1. Install. Then run", ["Step 1. Install. Then run"], "heading-is-one-sentence"),
    case("# C#", ["C#"], "heading-keeps-inner-hash"),
    case("#hashtag talk. Next.", ["#hashtag talk.", "Next."], "hashtag-is-not-heading"),
    case("#\n- \n>", [], "empty-markers"),
    case("> Quoted. Two.\n>> nested", ["Quoted.", "Two.", "nested"], "blockquote"),
    case("> - quoted item\n> # quoted heading", ["quoted item", "quoted heading"], "blockquote-containers"),
    case(
        "| a | b. C |\n|---|:-:|\n| 1 | 2 |",
        ["| a | b. C |", "| 1 | 2 |"],
        "table",
    ),
    case("  | indented | row |  ", ["| indented | row |"], "table-stripped"),
    case("Above.\n\n---\n***\n___\n- - -\n\nBelow.", ["Above.", "Below."], "horizontal-rules"),
    case("Title\n=====\nText", ["Title", "Text"], "setext-underline"),
    case("**bold** start\n-5 degrees\n3.14 is pi", ["**bold** start", "-5 degrees", "3.14 is pi"], "not-markers"),
]

CODE = [
    case(
        "Try this:\n```python\nx = 1. Y = 2\n\nprint(x)\n```\nAfter.",
        ["Try this:", "x = 1. Y = 2\n\nprint(x)", "After."],
        "fenced-python",
    ),
    case("~~~\n# not a heading\n- not a list\n~~~", ["# not a heading\n- not a list"], "tilde-fence"),
    case("```\n  indented\n```", ["indented"], "code-stripped"),
    case("```\n```\n\n```js\n\n```", [], "empty-fences"),
    case("````\n```\ninner\n```\n````\nout", ["```\ninner\n```", "out"], "longer-fence"),
    case("```\ncode\n~~~\nmore\n```", ["code\n~~~\nmore"], "other-fence-char-inside"),
    case("Text.\n```bash\nrun it. Now\n", ["Text.", "run it. Now"], "unterminated-fence"),
    case("- item\n  ```\n  code. X\n  ```\n- next", ["item", "code. X", "next"], "fence-in-list"),
    case("```inline``` is not a fence. Ok.", ["```inline``` is not a fence.", "Ok."], "one-line-backticks"),
]

SCRIPTS = [
    case("你好。我很好！你呢？", ["你好。", "我很好！", "你呢？"], "chinese"),
    case("他说：「好。」然后走了。", ["他说：「好。」", "然后走了。"], "chinese-closing-bracket"),
    case("これはペンです。あれは本ですか？", ["これはペンです。", "あれは本ですか？"], "japanese"),
    case("数据．结果．值是３．１４", ["数据．", "结果．", "值是３．１４"], "fullwidth-stop"),
    case("OK。Next", ["OK。", "Next"], "cjk-stop-without-space"),
    case("यह एक वाक्य है। यह दूसरा है॥ ठीक", ["यह एक वाक्य है।", "यह दूसरा है॥", "ठीक"], "hindi-danda"),
    case("Hello. नमस्ते दुनिया.", ["Hello.", "नमस्ते दुनिया."], "hindi-after-latin-stop"),
    case("هل أنت بخير؟ نعم۔ شكرا", ["هل أنت بخير؟", "نعم۔", "شكرا"], "arabic"),
    case("Done. مرحبا بك.", ["Done.", "مرحبا بك."], "arabic-after-latin-stop"),
    case("Привет. Как дела? Хорошо!", ["Привет.", "Как дела?", "Хорошо!"], "russian"),
    case("Это т.е. пример. и всё", ["Это т.е. пример. и всё"], "russian-lowercase-continues"),
    case("А. С. Пушкин писал.", ["А. С. Пушкин писал."], "cyrillic-initials"),
    case("Բարև։ Ինչպես ես։", ["Բարև։", "Ինչպես ես։"], "armenian"),
    case("ሰላም ነው። እንዴት ነህ።", ["ሰላም ነው።", "እንዴት ነህ።"], "ethiopic"),
    case("Γεια σου. Τι κάνεις;", ["Γεια σου.", "Τι κάνεις;"], "greek"),
]

EMPTY = [
    case("", [], "empty"),
    case("   \n\t\r\n\u3000 ", [], "whitespace-only"),
]


@pytest.mark.parametrize(
    "text,expected", PROSE + ABBREVIATIONS + NUMBERS_AND_NAMES + MARKDOWN + CODE + SCRIPTS + EMPTY
)
def test_examples(text, expected):
    assert sentences(text) == expected
    check_spans(text, sentence_spans(text))


def test_spans_index_the_original_text():
    text = "# Head\n\n- Item one. Item two.\n```\ncode\n```"
    spans = sentence_spans(text)
    assert spans == [(2, 6), (10, 19), (20, 29), (34, 38)]
    assert [text[s:e] for s, e in spans] == sentences(text)


def test_chat_message():
    text = (
        "Sure! Here's how to set it up.\n\n"
        "## Steps\n\n"
        "1. Install it with `pip install nexus-sync`. It takes approx. 10 s.\n"
        "2. Edit `config.yaml`, e.g. set `timeout: 3.5`.\n\n"
        "```yaml\ntimeout: 3.5\nretries: 2\n```\n\n"
        "> **Note:** Dr. Lee wrote this. See https://example.com/docs?page=2.\n\n"
        "That's it! Let me know if you have questions 🙂"
    )
    assert sentences(text) == [
        "Sure!",
        "Here's how to set it up.",
        "Steps",
        "Install it with `pip install nexus-sync`.",
        "It takes approx. 10 s.",
        "Edit `config.yaml`, e.g. set `timeout: 3.5`.",
        "timeout: 3.5\nretries: 2",
        "**Note:** Dr. Lee wrote this.",
        "See https://example.com/docs?page=2.",
        "That's it!",
        "Let me know if you have questions 🙂",
    ]


def check_spans(text, spans):
    previous_end = 0
    for start, end in spans:
        assert previous_end <= start < end <= len(text)
        piece = text[start:end]
        assert piece == piece.strip()
        previous_end = end
    assert sentences(text) == [text[s:e] for s, e in spans]


TOKENS = [
    "Hello", "world", "the", "a", "e.g.", "i.e.", "Mr.", "U.S.", "etc.", "No.", "J.", "3.14",
    "v1.2.3", "example.com", "https://x.y/z?a=b", "data/a.json", "`x. Y`", "``", "`",
    "**", "*", "_", "(", ")", '"', "'", "”", "’", ".", "...", "…", "?", "!", "?!", ",", ":",
    "你好", "。", "！", "？", "．", "नमस्ते", "।", "॥", "مرحبا", "؟", "۔", "Привет", "как", "։", "።",
    "🎉", "👨‍👩‍👧", "# ", "## ", "- ", "* ", "+ ", "1. ", "2) ", "> ", "- [ ] ", "| a | b |", "|---|",
    "---", "===", "```", "```py", "~~~", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000",
    "\u2028", "\x0c", "\x1c",
]
token_text = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)
any_text = st.one_of(token_text, st.text(max_size=200))

# Characters that may be dropped as markup (list markers and numbers, headings, quotes, task
# boxes, rules, table delimiter rows); everything else that is not whitespace must be kept.
MARKUP = set("#>-*+_=|:.)[]xX0123456789")


@settings(max_examples=400)
@given(any_text)
def test_spans_are_well_formed(text):
    spans = sentence_spans(text)
    check_spans(text, spans)
    kept = "".join(text[s:e] for s, e in spans)
    visible = iter(c for c in text if not c.isspace())
    # The spans' visible characters are the text's, in order: nothing added, nothing reordered.
    assert all(c in visible for c in kept if not c.isspace())


@settings(max_examples=400)
@given(any_text, any_text)
def test_is_deterministic(text, other):
    """No state carries from one call to the next: splitting another text in between (or the same
    text inside a longer one) does not change a text's spans."""
    first = sentence_spans(text)
    sentence_spans(other)
    sentence_spans(other + text)
    assert sentence_spans(text) == first


def test_is_the_same_in_another_process_with_another_hash_seed():
    """Spans are stored as offsets: a fresh interpreter with a different string-hash seed splits a
    corpus exactly as this one does (no set or dict iteration order leaks into a span)."""
    rng = random.Random(44)
    corpus = ["".join(rng.choice(TOKENS) for _ in range(rng.randrange(1, 60))) for _ in range(300)]
    here = [[list(span) for span in sentence_spans(text)] for text in corpus]
    script = (
        "import json, sys\n"
        "from nexus_assets.core.sentences import sentence_spans\n"
        "corpus = json.load(sys.stdin)\n"
        "json.dump([[list(s) for s in sentence_spans(t)] for t in corpus], sys.stdout)\n"
    )
    for seed in ("1", "4242"):
        done = subprocess.run([sys.executable, "-c", script], input=json.dumps(corpus), capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}, timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == here, seed


@settings(max_examples=400)
@given(any_text.filter(lambda t: "`" not in t and "~" not in t))
def test_only_markup_is_dropped_and_lines_are_boundaries(text):
    spans = sentence_spans(text)
    covered = bytearray(len(text))
    for start, end in spans:
        covered[start:end] = b"\x01" * (end - start)
        assert len(text[start:end].splitlines()) == 1
    dropped = {c for i, c in enumerate(text) if not covered[i] and not c.isspace()}
    assert dropped <= MARKUP


@settings(max_examples=200)
@given(st.lists(st.sampled_from(TOKENS), max_size=30).map("".join), st.sampled_from(["```", "~~~"]))
def test_fenced_code_is_one_verbatim_unit(code, fence):
    body = code.replace(fence[0] * 3, "")
    text = f"Intro.\n{fence}lang\n{body}\n{fence}\nOutro."
    expected = ["Intro."] + ([body.strip()] if body.strip() else []) + ["Outro."]
    assert sentences(text) == expected


def test_throughput_sanity():
    """1 MB of mixed chat text goes through, with well-formed spans; deliberately untimed."""
    rng = random.Random(7)
    blocks = [
        "Sure! Here's how to do it. First, install it, e.g. with pip. It takes approx. 3.5 s on v1.2.3.",
        "## Step 2\n\n- Open `settings.json`. Set `timeout` to 30.\n  1. Nested item.\n- [ ] Task",
        "```python\nfor i in range(10):\n    print(i. real)  # Not. A. Split.\n```",
        "> Quoted. Another?\n\n| a | b |\n|---|---|\n| 1.5 | x. Y |\n\n---",
        "这是一个句子。这是另一个！\nयह एक वाक्य है। दूसरा॥\nمرحبا بك؟ شكرا۔\nПривет. Как дела?",
        "Mr. Smith met Dr. Jones at 10 a.m. in the U.S. They talked... A lot. 🎉 See https://x.y/z?a=b.",
        "." * 500 + " " + "`" * 7 + " a. B" * 50,
    ]
    parts, size = [], 0
    while size < 1_000_000:
        block = rng.choice(blocks) + "\n\n"
        parts.append(block)
        size += len(block)
    text = "".join(parts)
    spans = sentence_spans(text)
    assert len(spans) > 10_000
    check_spans(text, spans)
