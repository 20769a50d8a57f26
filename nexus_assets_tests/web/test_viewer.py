"""The trace viewer (`nexus serve`): every brick and the exact source it came from, read-only.

Browser tests drive Debian's Chromium through Playwright against a vault synced from the shipped
sample data; the rest talk plain HTTP. Tests that change a vault or a run file build their own.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Iterator

import dagster as dg
import duckdb
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from nexus_assets.cli import build_parser, main
from nexus_assets.vault.migrations import LATEST
from nexus_assets.core.links import topic_url
from nexus_assets.web.markdown import inline_markdown
from nexus_assets.web.server import ViewerServer, make_server
from nexus_assets_tests import servers
from nexus_assets_tests.dagster_helpers import materialize_topic
from nexus_assets_tests.project import Project, sample_project

CHROMIUM = Path(os.environ.get("NEXUS_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOT_COPY = Path("/tmp/nexus-viewer-screenshot.png")

TOPIC = "nexus-server-sync"
HOSTILE = "<script>alert('brick')</script>"
FRAGMENT = "sealing freezes the manifest and the order"
KICKOFF_FILE = "nexus/2026-10-03-sync-kickoff.json"
KICKOFF_RUN = "run-2026-10-03-sync-kickoff"
KICKOFF_NODE = "$['messages'][2]['content']"
MISSING_BRICK = "0" * 64


def synced_project(root: Path, *topics: str) -> Project:
    project = sample_project(root)
    assert main(project.sync_args(*topics)) == 0
    return project


def cli_json(project: Project, *argv: str, expect_code: int = 0):
    """Run a `nexus ... --json` command in-process and return its parsed output."""
    out = io.StringIO()
    with redirect_stdout(out):
        code = main([*project.cli_args(), *argv, "--json"])
    assert code == expect_code
    return json.loads(out.getvalue())


@contextmanager
def running_viewer(db: Path, **options) -> Iterator[ViewerServer]:
    server = make_server(db, "127.0.0.1", 0, **options)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def fetch(url: str, method: str = "GET", headers: dict | None = None) -> tuple[int, dict, str]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            # The message itself: header names are case-insensitive (uvicorn sends them in lower case).
            return response.status, response.headers, response.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode("utf-8")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """Shared and never modified; tests that edit files or the vault make their own."""
    return synced_project(tmp_path_factory.mktemp("viewer") / "proj")


@pytest.fixture(scope="module")
def viewer(project: Project) -> Iterator[ViewerServer]:
    with running_viewer(project.db) as server:
        yield server


@pytest.fixture(scope="module")
def bricks(project: Project) -> list[dict]:
    return cli_json(project, "bricks", TOPIC, "--all")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"Chromium is missing at {CHROMIUM}: the viewer tests drive a real browser and are never skipped. "
            "`.ci/run` installs it (apt-get install -y chromium); never `playwright install`."
        )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def dialogs() -> list[str]:
    return []


@pytest.fixture
def page(browser: Browser, dialogs: list[str]) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    assert not errors, f"the page logged errors (script failures or CSP violations): {errors}"


def drawn_text(content: str) -> str:
    """The text a page shows for a brick: its inline Markdown drawn, its markers gone (web/markdown.py)."""
    return html.unescape(re.sub(r"<[^>]+>", "", str(inline_markdown(content))))


def brick_item(page: Page, brick_id: str):
    return page.locator(f"li.brick[data-brick-id='{brick_id}']")


def open_panel(page: Page, brick: dict):
    brick_item(page, brick["brick_id"]).locator("a.brick-text").click()
    panel = page.locator("#panel")
    expect(panel.locator("mark.quote").first).to_be_visible()
    return panel


def test_topic_list_shows_every_topic_with_state_counts_last_sync_and_checks(viewer, project, page):
    topics = {t["topic_id"]: t for t in cli_json(project, "topics")}
    page.goto(viewer.url)
    rows = page.locator("table.topics tbody tr")
    assert sorted(rows.evaluate_all("rows => rows.map(r => r.dataset.topicId)")) == sorted(topics)

    row = page.locator(f"tr[data-topic-id='{TOPIC}']")
    expect(row.get_by_role("link")).to_have_text(topics[TOPIC]["display_name"])
    expect(row).to_contain_text("ACTIVE")
    for state, n in topics[TOPIC]["bricks"].items():
        expect(row).to_contain_text(f"{state.lower()} {n}")
    expect(row.locator("td.num")).to_have_text(str(topics[TOPIC]["visible_bricks"]))
    expect(row).to_contain_text("UTC")
    expect(row).to_contain_text("✓ no drift")
    expect(row).to_contain_text("0 rejected")

    draft = page.locator("tr[data-topic-id='team-rituals']")
    expect(draft).to_contain_text("DRAFT")
    expect(draft).to_contain_text("never")


def test_topic_page_shows_visible_bricks_in_manifest_order_with_their_states(viewer, project, bricks, page):
    manifest = cli_json(project, "manifest", TOPIC)
    page.goto(viewer.url)
    page.locator(f"tr[data-topic-id='{TOPIC}']").get_by_role("link").click()
    expect(page).to_have_url(f"{viewer.url}topics/{TOPIC}")

    shown = page.locator("li.brick").evaluate_all("items => items.map(i => i.dataset.brickId)")
    assert shown == [e["brick_id"] for e in manifest["bricks"]]
    by_id = {b["brick_id"]: b for b in bricks}
    superseded = [b for b in bricks if b["state"] == "SUPERSEDED"]
    assert superseded and not set(shown) & {b["brick_id"] for b in superseded}

    improvise = next(b for b in bricks if b["state"] == "IMPROVISE")
    forming = next(b for b in bricks if b["state"] == "FORMING")
    expect(brick_item(page, improvise["brick_id"]).locator(".badge-draft")).to_have_text("draft — evolving")
    expect(brick_item(page, forming["brick_id"]).locator(".badge-draft")).to_have_count(0)
    muted = brick_item(page, improvise["brick_id"]).locator(".brick-text").evaluate("e => getComputedStyle(e).color")
    plain = brick_item(page, forming["brick_id"]).locator(".brick-text").evaluate("e => getComputedStyle(e).color")
    assert muted != plain, "IMPROVISE bricks are muted"
    for brick_id in shown:
        expect(brick_item(page, brick_id).locator("a.brick-text")).to_have_text(drawn_text(by_id[brick_id]["content"]))


def test_clicking_a_brick_opens_its_source_with_exactly_its_text_marked(viewer, bricks, page):
    # A sentence in the middle of a multi-line node, in a run with several messages around it.
    brick = next(b for b in bricks if b["content"] == "The compiler resolves the path and proves the quote is really there.")
    (source,) = brick["sources"]
    page.goto(f"{viewer.url}topics/{TOPIC}")
    panel = open_panel(page, brick)

    mark = panel.locator("mark.quote")
    expect(mark).to_have_count(1)
    assert mark.text_content() == brick["content"]
    # The page draws the brick's Markdown; the panel holds the text as stored (web/markdown.py).
    assert panel.locator(".stored-text pre.exact").text_content() == brick["content"]
    expect(brick_item(page, brick["brick_id"])).to_have_class("brick brick-forming is-selected")

    node = panel.locator("pre.json .node")
    expect(node).to_contain_text("Here is a first sketch of the data flow.")
    json_text = panel.locator("pre.json").text_content()
    assert json_text.startswith("{") and json_text.rstrip().endswith("}")
    assert f'"run_id": "{source["run_id"]}"' in json_text, "the run's raw JSON is shown pretty-printed"

    meta = panel.locator("dl.meta")
    expect(meta).to_contain_text(source["run_id"])
    expect(meta).to_contain_text(source["json_path"])
    expect(meta).to_contain_text(f"[{source['start']}, {source['end']})")
    expect(meta).to_contain_text(source["node_checksum"])
    expect(meta).to_contain_text("checksum matches the run file")
    expect(panel.locator(".panel-brick")).to_contain_text("forming")

    # The JSON view is scrolled so the marked text is inside it.
    inside = mark.evaluate(
        """m => { const a = m.getBoundingClientRect(), b = m.closest('pre').getBoundingClientRect();
                  return a.top >= b.top && a.bottom <= b.bottom; }"""
    )
    assert inside

    # The open brick is in the address, so a reload (or a shared link) shows the same source.
    expect(page).to_have_url(f"{viewer.url}topics/{TOPIC}#brick={brick['brick_id']}")
    page.reload()
    assert open_panel(page, brick).locator("mark.quote").text_content() == brick["content"]

    panel.get_by_role("button", name="Close source panel").click()
    expect(panel).to_be_hidden()
    expect(page.locator("li.brick.is-selected")).to_have_count(0)


def test_screenshot_of_the_topic_page_with_the_source_panel_open(viewer, bricks, page, tmp_path):
    # A brick near the top, so the picture has the topic header too; its source is a node deep
    # inside a ChatGPT export.
    brick = next(b for b in bricks if b["content"].startswith("Every brick keeps its source address"))
    assert "['mapping']" in brick["sources"][0]["json_path"]
    page.goto(f"{viewer.url}topics/{TOPIC}")
    panel = open_panel(page, brick)
    assert panel.locator("mark.quote").text_content() == brick["content"]
    expect(panel.locator("dl.meta")).to_contain_text(brick["sources"][0]["json_path"])

    shot = tmp_path / "topic-with-source-panel.png"
    page.screenshot(path=str(shot))
    shutil.copyfile(shot, SCREENSHOT_COPY)
    assert shot.stat().st_size > 10_000


def test_a_linked_brick_shows_every_run_it_came_from(viewer, bricks, page):
    brick = next(b for b in bricks if len({s["run_id"] for s in b["sources"]}) > 1)
    runs = list(dict.fromkeys(s["run_id"] for s in brick["sources"]))
    page.goto(f"{viewer.url}topics/{TOPIC}")
    item = brick_item(page, brick["brick_id"])
    expect(item.locator(".badge-linked")).to_have_text(f"linked · {len(brick['sources'])} sources")
    # Each conversation by the name a person reads (run ids name the sample's Nexus runs), its date beside it.
    dates = {s["run_id"]: s["run_date"] for s in brick["sources"]}
    expect(item.locator(".brick-runs .run")).to_have_text([f"{r} ({dates[r]})" for r in runs])

    panel = open_panel(page, brick)
    expect(panel.locator("section.source")).to_have_count(len(brick["sources"]))
    marks = panel.locator("mark.quote").all_text_contents()
    assert marks[0] == brick["content"], "the canonical source holds the brick's content"
    for section, source in zip(panel.locator("section.source").all(), brick["sources"]):
        expect(section.locator("dl.meta")).to_contain_text(source["run_id"])


def test_a_superseding_brick_keeps_the_older_fragment_struck_through_in_its_history(viewer, bricks, page):
    fragment = next(b for b in bricks if b["content"] == FRAGMENT)
    assert fragment["state"] == "SUPERSEDED"
    page.goto(f"{viewer.url}topics/{TOPIC}")
    # The fragment is not a brick of its own on the page: it appears only inside its superset.
    expect(page.locator("li.brick a.brick-text", has_text=FRAGMENT)).to_have_count(1)

    item = brick_item(page, fragment["superseded_by"])
    history = item.locator("details.history")
    old = history.locator("del")
    # History starts open (issue 34: a folded group hides what a person came to see); it still folds.
    expect(old).to_be_visible()
    history.locator("summary").click()
    expect(old).to_be_hidden()
    history.locator("summary").click()
    expect(old).to_be_visible()
    expect(old).to_have_text(FRAGMENT)
    expect(history).to_contain_text(fragment["sources"][0]["run_id"])
    assert old.evaluate("e => getComputedStyle(e).textDecorationLine") == "line-through"


def test_a_message_with_a_script_tag_is_shown_as_text_and_never_runs(viewer, bricks, page, dialogs):
    brick = next(b for b in bricks if HOSTILE in b["content"])
    page.goto(f"{viewer.url}topics/{TOPIC}")
    expect(brick_item(page, brick["brick_id"]).locator("a.brick-text")).to_have_text(brick["content"])
    panel = open_panel(page, brick)
    assert panel.locator("mark.quote").text_content() == brick["content"]
    expect(panel.locator("pre.json")).to_contain_text(HOSTILE)

    page.goto(f"{viewer.url}topics/{TOPIC}?q=" + urllib.request.quote("<script>alert('q')</script>"))
    expect(page.locator("input[name=q]")).to_have_value("<script>alert('q')</script>")
    page.wait_for_timeout(300)
    assert dialogs == []
    assert page.locator("script").evaluate_all("s => s.map(e => e.getAttribute('src'))") == ["/static/viewer.js"]


def test_a_recalled_passage_opens_on_its_own_page_marked_in_its_message(viewer, project, page):
    """A sentence of the record among the recall results links to `/passages/<id>` (where answers'
    viewer_url points): the sentence marked among the ones around it, its address, speaker, time
    and conversation; the sentence next to it in the message is one click on."""
    page.goto(f"{viewer.url}?recall=" + urllib.request.quote("Where should the vault live?"))
    card = page.locator("li.recalled.passage").first
    passage_id = card.get_attribute("data-passage-id")
    traced = cli_json(project, "trace", passage_id)
    card.locator(f"a[href='/passages/{passage_id}']").click()
    expect(page).to_have_url(f"{viewer.url}passages/{passage_id}")
    expect(page.locator("#passage-window mark.hit")).to_have_text(traced["content"])
    window = traced["node_text"][traced["around"][0]["start"] : traced["around"][-1]["end"]]
    # The text around it, verbatim (an ellipsis says the message goes on beyond it).
    assert page.locator("#passage-window").text_content().strip("… ") == window
    source = traced["sources"][0]
    address = page.locator("#passage-address")
    for shown in (traced["speaker"], traced["time"], traced["conversation"], source["run_id"], source["json_path"],
                  f"[{source['start']}, {source['end']})", "matches the run file"):
        expect(address).to_contain_text(shown)

    at = [a["passage_id"] for a in traced["around"]].index(passage_id)
    assert len(traced["around"]) > 1, "the sample's messages hold more than one sentence"
    neighbour, link = (traced["around"][at + 1], "next sentence →") if at + 1 < len(traced["around"]) else (
        traced["around"][at - 1], "← previous sentence")
    page.get_by_role("link", name=link).click()
    expect(page).to_have_url(f"{viewer.url}passages/{neighbour['passage_id']}")
    expect(page.locator("#passage-window mark.hit")).to_have_text(neighbour["content"])


def test_a_passage_page_shows_a_script_tag_as_text(viewer, bricks):
    brick = next(b for b in bricks if HOSTILE in b["content"])
    s = brick["sources"][0]
    # The brick is a whole sentence: the passage at its address (DESIGN §1's id) holds the same text.
    passage_id = hashlib.sha256(f"{s['run_id']}:{s['json_path']}:{s['start']}:{s['end']}".encode()).hexdigest()
    status, headers, body = fetch(f"{viewer.url}passages/{passage_id[:12]}")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "&lt;script&gt;alert(&#39;brick&#39;)&lt;/script&gt;" in body and "<script>alert" not in body
    assert body.count("<script") == 1


def test_search_ranks_the_bricks_that_match_with_the_words_marked(viewer, bricks, page):
    """The viewer's search box is `nexus search` (BM25, stemmed words) for this topic."""
    from nexus_assets.search.step import search

    visible = [b for b in bricks if b["state"] != "SUPERSEDED"]
    expected = {b["brick_id"] for b in visible if "manifest" in b["content"].lower()}
    assert 0 < len(expected) < len(visible)
    page.goto(f"{viewer.url}topics/{TOPIC}")
    page.get_by_role("searchbox").fill("MANIFEST")
    page.get_by_role("button", name="Search").click()
    expect(page).to_have_url(f"{viewer.url}topics/{TOPIC}?q=MANIFEST")

    shown = page.locator("li.brick").evaluate_all("items => items.map(i => i.dataset.brickId)")
    assert set(shown) == expected
    assert shown == [h.brick_id for h in search(viewer.db_path, "MANIFEST", [TOPIC], limit=100)], "best match first"
    for hit in page.locator("mark.hit").all_text_contents():
        assert hit.lower().startswith("manifest")
    expect(page.locator("#result-count")).to_contain_text(f"{len(expected)} of {len(visible)} bricks match")

    page.get_by_role("searchbox").fill("qwertyuiop zxcvbnm")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("li.brick")).to_have_count(0)
    expect(page.locator("main")).to_contain_text("No brick matches")


# Dagster runs its steps on an event loop; Playwright's sync API keeps one running in this thread,
# so Dagster's loop cleanup is skipped with this warning. Harmless here.
DAGSTER_BESIDE_PLAYWRIGHT = pytest.mark.filterwarnings(
    "ignore:coroutine 'BaseEventLoop.shutdown_asyncgens' was never awaited:RuntimeWarning"
)


@DAGSTER_BESIDE_PLAYWRIGHT
def test_an_edited_source_shows_its_bricks_as_stale_after_verify(tmp_path, browser):
    project = synced_project(tmp_path / "proj", TOPIC)
    before = cli_json(project, "bricks", TOPIC)
    # Stale is decided by a brick's canonical source (invariant 14).
    edited = {b["brick_id"] for b in before if (b["sources"][0]["run_id"], b["sources"][0]["json_path"]) == (KICKOFF_RUN, KICKOFF_NODE)}
    assert edited

    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    with running_viewer(project.db) as server:
        page.goto(f"{server.url}topics/{TOPIC}")
        expect(page.locator(".badge-stale")).to_have_count(0)

        path = project.runs / KICKOFF_FILE
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["status"] == "CLOSED"
        doc["messages"][2]["content"] = doc["messages"][2]["content"].replace("deterministic", "mostly deterministic")
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        report = cli_json(project, "verify", expect_code=1)
        assert set(report["stale_bricks"]) == edited

        page.reload()
        stale = page.locator("li.brick.is-stale").evaluate_all("items => items.map(i => i.dataset.brickId)")
        assert set(stale) == edited
        for brick_id in edited:
            expect(brick_item(page, brick_id).locator(".badge-stale")).to_have_text("⚠ stale — source changed")
        expect(page.locator(".summary")).to_contain_text(f"drift: {len(edited)} stale")

        # The panel still shows the text as it was seen, and says the source no longer matches.
        brick = next(b for b in before if b["brick_id"] in edited)
        panel = open_panel(page, brick)
        assert panel.locator("mark.quote").text_content() == brick["content"]
        expect(panel.locator("dl.meta")).to_contain_text("✗ no longer matches")

        page.goto(server.url)
        expect(page.locator(f"tr[data-topic-id='{TOPIC}']")).to_contain_text(f"drift: {len(edited)} stale")
    context.close()


def test_a_final_brick_is_locked_and_bold(project, bricks, tmp_path, page):
    # Sealing is its own command; here one brick of a copy of the vault is set FINAL directly.
    db = tmp_path / "sealed.duckdb"
    shutil.copyfile(project.db, db)
    brick = next(b for b in bricks if b["state"] == "FORMING")
    conn = duckdb.connect(str(db))
    conn.execute("UPDATE bricks SET state = 'FINAL' WHERE brick_id = ?", [brick["brick_id"]])
    conn.close()
    with running_viewer(db) as server:
        page.goto(f"{server.url}topics/{TOPIC}")
        item = brick_item(page, brick["brick_id"])
        expect(item.locator(".badge-final")).to_have_text("🔒 final")
        weight = item.locator(".brick-text").evaluate("e => Number(getComputedStyle(e).fontWeight)")
        assert weight >= 600


def test_conversation_text_is_escaped_in_the_html(viewer):
    status, _, body = fetch(f"{viewer.url}topics/{TOPIC}")
    assert status == 200
    assert "&lt;script&gt;alert(&#39;brick&#39;)&lt;/script&gt;" in body
    assert "<script>alert" not in body
    assert body.count("<script") == 1 and '<script src="/static/viewer.js" defer></script>' in body

    status, _, body = fetch(f"{viewer.url}topics/{TOPIC}?q=" + urllib.request.quote('"><script>alert(1)</script>'))
    assert status == 200
    assert "<script>alert(1)" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_every_response_forbids_inline_script(viewer):
    for path in ("", f"topics/{TOPIC}", "topics/nope", f"api/bricks/{MISSING_BRICK}/trace", f"passages/{MISSING_BRICK}", "static/viewer.js"):
        _, headers, _ = fetch(viewer.url + path)
        csp = headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
        assert headers["X-Content-Type-Options"] == "nosniff"


def test_the_trace_api_returns_the_exact_slices(viewer, bricks):
    brick = next(b for b in bricks if HOSTILE in b["content"])
    status, headers, body = fetch(f"{viewer.url}api/bricks/{brick['brick_id']}/trace")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    (trace,) = json.loads(body)["traces"]
    assert trace["quote"] == brick["content"]
    assert trace["before"] + trace["quote"] + trace["after"] == trace["node_text"]
    assert json.loads(trace["json_before"] + json.dumps(trace["node_text"]) + trace["json_after"])["run_id"] == trace["run_id"]


def test_the_trace_api_accepts_a_unique_prefix_like_the_cli(viewer, bricks):
    brick = bricks[0]
    status, _, body = fetch(f"{viewer.url}api/bricks/{brick['brick_id'][:12]}/trace")
    assert status == 200 and json.loads(body)["brick_id"] == brick["brick_id"]
    status, _, body = fetch(f"{viewer.url}api/bricks/{'0' * 12}/trace")
    assert status == 404 and "no brick" in json.loads(body)["error"]
    ids = [b["brick_id"] for b in bricks]
    shared = next((a[:n] for a in ids for b in ids if a != b for n in (1, 2) if a[:n] == b[:n]), None)
    assert shared is not None, "more than 16 bricks share some first hex digit"
    status, _, body = fetch(f"{viewer.url}api/bricks/{shared}/trace")
    assert status == 400 and "ambiguous" in json.loads(body)["error"]


def test_unknown_topics_bricks_and_files_are_404(viewer):
    for path in ("topics/no-such-topic", "topics/Not_A_Slug", "topics/", "nope", "static/../vault.duckdb", "static/secret.txt",
                 f"passages/{MISSING_BRICK}", "passages/abc", "passages/NOT-HEX"):
        status, headers, body = fetch(viewer.url + path)
        assert status == 404, path
        assert headers["Content-Type"].startswith("text/html")
    for path in (f"api/bricks/{MISSING_BRICK}/trace", "api/bricks/abc/trace", "api/nothing"):
        status, headers, body = fetch(viewer.url + path)
        assert status == 404, path
        assert "error" in json.loads(body)


def test_only_get_and_head_are_allowed(viewer):
    status, headers, body = fetch(viewer.url, method="HEAD")
    assert status == 200 and body == ""
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"):
        status, headers, _ = fetch(f"{viewer.url}topics/{TOPIC}", method=method)
        assert status == 405, method
        assert headers["Allow"] == "GET, HEAD"


def test_binds_loopback_by_default_and_refuses_foreign_host_names(viewer, project):
    assert viewer.server_address[0] == "127.0.0.1"
    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port) == ("127.0.0.1", 8766), "not `nexus api`'s 8765: both can run at once"
    assert build_parser().parse_args(["api"]).port == 8765
    server = make_server(project.db, port=0)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.server_close()
    # A page on another site that rebinds its DNS name to 127.0.0.1 must not read the vault.
    status, _, _ = fetch(viewer.url, headers={"Host": "attacker.example"})
    assert status == 400
    assert fetch(viewer.url.replace("127.0.0.1", "localhost"))[0] == 200


def test_nexus_serve_prints_its_url_and_serves(project):
    # Stopped (SIGTERM, then SIGKILL) even when an assert fails: no server outlives the test.
    with servers.running(
        servers.nexus("--db", str(project.db), "serve", "--port", "0"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        line = servers.read_line(proc.stdout, timeout_s=60)
        assert "http://127.0.0.1:" in line, proc.stderr.read() if proc.poll() is not None else line
        url = line.split("on ", 1)[1].split()[0]
        status, _, body = fetch(url)
        assert status == 200 and TOPIC in body


def test_a_vault_locked_by_a_sync_shows_a_sync_in_progress_page(project, tmp_path):
    db = tmp_path / "busy.duckdb"
    shutil.copyfile(project.db, db)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('locked', flush=True); time.sleep(60)", str(db)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with running_viewer(db, busy_wait_s=0.3) as server:
            status, headers, body = fetch(f"{server.url}topics/{TOPIC}")
            assert status == 503 and "Sync in progress" in body and headers["Retry-After"]
            status, _, body = fetch(f"{server.url}api/bricks/{MISSING_BRICK}/trace")
            assert status == 503 and "sync in progress" in json.loads(body)["error"]
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_a_missing_vault_says_how_to_create_one(tmp_path):
    with running_viewer(tmp_path / "none.duckdb") as server:
        status, _, body = fetch(server.url)
    assert status == 503 and "nexus sync" in body


@DAGSTER_BESIDE_PLAYWRIGHT
def test_topic_manifest_metadata_links_to_the_viewer_page(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_VIEWER_URL", "http://viewer.example:9000/")
    project = sample_project(tmp_path / "proj")
    with dg.instance_for_test() as instance:
        result = materialize_topic(project, TOPIC, instance)
    meta = result.asset_materializations_for_node("topic_manifest")[0].metadata
    assert meta["viewer"] == dg.MetadataValue.url(f"http://viewer.example:9000/topics/{TOPIC}")
    monkeypatch.delenv("NEXUS_VIEWER_URL")
    assert topic_url(TOPIC) == f"http://127.0.0.1:8765/topics/{TOPIC}"  # no address given: the default


@pytest.mark.parametrize("kind", ["not-duckdb", "newer-release"])
def test_nexus_serve_refuses_a_file_that_is_no_vault_it_can_read(project, tmp_path, kind):
    db = tmp_path / "odd.duckdb"
    if kind == "not-duckdb":
        db.write_text("these are my notes, not a vault\n")
        expected = "is not a vault: the file exists, but it is not a DuckDB database"
    else:
        shutil.copyfile(project.db, db)
        with duckdb.connect(str(db)) as con:
            con.execute("INSERT INTO schema_version VALUES (?, 'from the future', now())", [LATEST + 1])
        expected = "newer than this Nexus Sync knows"
    before = db.read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "nexus_assets.cli", "--db", str(db), "serve", "--port", "0"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2 and expected in done.stderr and done.stdout == ""
    assert db.read_bytes() == before
