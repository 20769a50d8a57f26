"""The viewer's Conflict View and brick view (docs/conflicts.md, seed 000): related bricks that state
different values side by side with their sources, a brick's related bricks, and the shadow stack of
fragments it superseded. Headless Chromium; a screenshot of the Conflict View is kept."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from nexus_assets.cli import main
from nexus_assets_tests.project import Project, nexus_run
from nexus_assets_tests.relate.test_relations import (
    DOWN,
    SAID_FIRST,
    SAID_LATER,
    TOPIC,
    write_topic,
)
from nexus_assets_tests.web.test_viewer import (
    CHROMIUM,
    CHROMIUM_ARGS,
    cli_json,
    running_viewer,
)

SCREENSHOT_COPY = Path("/tmp/nexus-conflict-view-screenshot.png")
FRAGMENT = "The API gateway restarts nightly."
WHOLE = "Since March the API gateway restarts nightly."


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    p = Project(tmp_path_factory.mktemp("conflicts") / "proj")
    write_topic(p)
    p.write_run("a.json", nexus_run("run-a", [("user", SAID_FIRST), ("user", DOWN[0])], start="2026-01-01T00:00:00Z"))
    p.write_run("b.json", nexus_run("run-b", [("user", SAID_LATER), ("user", DOWN[1])], start="2026-02-01T00:00:00Z"))
    # An open run's fragment, superseded by the whole sentence: the stack under it.
    p.write_run("c.json", nexus_run("run-c", [("user", FRAGMENT), ("user", WHOLE)], status="OPEN", start="2026-03-01T00:00:00Z"))
    assert main(p.sync_args()) == 0
    return p


@pytest.fixture(scope="module")
def viewer(project: Project):
    with running_viewer(project.db) as server:
        yield server


@pytest.fixture(scope="module")
def bricks(project: Project) -> dict[str, dict]:
    return {b["content"]: b for b in cli_json(project, "bricks", TOPIC, "--all")}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM}: the viewer tests drive a real browser and are never skipped.")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    assert not errors, f"the page logged errors (script failures or CSP violations): {errors}"


def test_the_conflict_view_shows_the_seed_contradiction_side_by_side(viewer, bricks, page, tmp_path):
    page.goto(f"{viewer.url}topics/{TOPIC}")
    link = page.locator("#conflict-link")
    expect(link).to_have_text("⚠ 1 conflict · Conflict View")
    link.click()
    page.wait_for_url(f"**/topics/{TOPIC}/conflicts")
    (conflict,) = page.locator("li.conflict").all()
    expect(conflict.locator(".badge-conflict")).to_have_text("identifier: xyz ≠ abc")
    first, later = conflict.locator("section.side").all()
    expect(first.locator(".side-text")).to_have_text(SAID_FIRST)
    expect(later.locator(".side-text")).to_have_text(SAID_LATER)
    expect(first).to_contain_text("run-a")
    expect(later).to_contain_text("run-b")
    expect(first.locator(".side-when")).to_contain_text("said first · 2026-01-01")
    expect(later.locator(".side-when")).to_contain_text("said later · 2026-02-01")
    # Side by side, not one under the other.
    a, b = first.bounding_box(), later.bounding_box()
    assert a["x"] + a["width"] <= b["x"] and abs(a["y"] - b["y"]) < 2
    expect(page.locator("#conflict-count")).to_contain_text("Nexus never picks")

    shot = tmp_path / "conflict-view.png"
    page.screenshot(path=str(shot), full_page=True)
    shutil.copyfile(shot, SCREENSHOT_COPY)
    assert shot.stat().st_size > 10_000


def test_the_brick_view_lists_related_bricks_and_opens_them(viewer, bricks, page):
    first, later = bricks[SAID_FIRST], bricks[SAID_LATER]
    page.goto(f"{viewer.url}topics/{TOPIC}")
    item = page.locator(f"li.brick[data-brick-id='{first['brick_id']}']")
    expect(item.locator(".badge-related")).to_have_text("related · 1")
    expect(item.locator(".badge-conflict")).to_have_text("⚠ conflict · 1")
    item.locator("a.brick-text").click()
    panel = page.locator("#panel")
    related = panel.locator("section.related-bricks")
    expect(related.locator("h3")).to_have_text("Related bricks · 1")
    expect(related.locator("li.related")).to_contain_text(SAID_LATER)
    expect(related.locator(".badge-conflict")).to_have_text("⚠ identifier: xyz ≠ abc")
    related.locator("button.brick-link").click()
    expect(page.locator(f"li.brick[data-brick-id='{later['brick_id']}']")).to_have_class(__import__("re").compile("is-selected"))
    expect(panel.locator("mark.quote").first).to_have_text(SAID_LATER)
    # An overlap without another value is related, not a conflict.
    down = bricks[DOWN[0]]
    page.locator(f"li.brick[data-brick-id='{down['brick_id']}'] a.brick-text").click()
    expect(panel.locator("section.related-bricks li.related")).to_contain_text(DOWN[1])
    expect(panel.locator("section.related-bricks .badge-conflict")).to_have_count(0)


def test_a_superseding_brick_is_a_stack_that_opens_to_its_history(viewer, bricks, page, tmp_path):
    fragment, whole = bricks[FRAGMENT], bricks[WHOLE]
    assert fragment["state"] == "SUPERSEDED" and fragment["superseded_by"] == whole["brick_id"]
    page.goto(f"{viewer.url}topics/{TOPIC}")
    item = page.locator(f"li.brick[data-brick-id='{whole['brick_id']}']")
    expect(item).to_have_class(__import__("re").compile("has-history"))
    expect(item.locator(".badge-stack")).to_have_text("▤ 1 earlier")
    assert "rgb" in item.evaluate("e => getComputedStyle(e).boxShadow"), "the stacked-paper edge"
    item.locator("a.brick-text").click()
    stack = page.locator("#panel section.history-stack")
    expect(stack.locator("h3")).to_have_text("History · 1 superseded fragment")
    expect(stack.locator("del")).to_have_text(FRAGMENT)
    expect(stack).to_contain_text("run-c")
    page.screenshot(path=str(tmp_path / "brick-view-history.png"))


def test_the_trace_api_carries_related_bricks_and_history(viewer, bricks):
    import json
    import urllib.request

    with urllib.request.urlopen(f"{viewer.url}api/bricks/{bricks[WHOLE]['brick_id']}/trace", timeout=10) as r:
        traced = json.loads(r.read())
    assert [h["content"] for h in traced["history"]] == [FRAGMENT]
    with urllib.request.urlopen(f"{viewer.url}api/bricks/{bricks[SAID_FIRST]['brick_id']}/trace", timeout=10) as r:
        traced = json.loads(r.read())
    (related,) = traced["related"]
    assert related["content"] == SAID_LATER and related["conflict"] == "identifier: xyz ≠ abc"
    assert os.path.exists(CHROMIUM)
