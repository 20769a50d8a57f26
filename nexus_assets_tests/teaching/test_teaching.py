"""A person teaches a topic what to keep (issue 53; docs/inputs.md `examples`, §5, §7 `nexus keep` /
`nexus drop`, §10, §10.1): the brick's text joins its topic file's examples (comments and order
kept), the judgement is audited, the next sync selects with it: a dropped brick leaves the manifest
(history and reason kept), and the same topic files give the same manifest in a fresh vault. A new
release's selector never moves a topic by itself (issue 49 item 4): `nexus sync --reselect` does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nexus_assets.core.models import ExtractionPolicy, Examples, Topic
from nexus_assets.extract import backends
from nexus_assets.extract.backends import EmbeddedExtractor, newest_selector
from nexus_assets.extract.examples import EXAMPLE_BAR, example_verdicts
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json

TOPIC_FILE = """\
# The garden topic: what I decided about the vegetable beds.
topic_id: garden
display_name: Vegetable garden
extraction_policy:
  scope_description: Decisions about the vegetable beds, watering and soil.   # why it exists
  required_keywords: [garden, beds, watering, soil]
min_relevance: 0.2
ordering_rule: chronological
state: ACTIVE   # a person activated it
"""

RUN = {
    "run_id": "r1",
    "status": "CLOSED",
    "messages": [
        {"role": "user", "content": "The raised beds get drip watering every morning at six. "
         "The soil in the north beds needs more compost before spring. "
         "I read a novel about a garden gnome last week and it was funny."},
        {"role": "assistant", "content": "The garden hose is green and quite long. "
         "Watering deeply twice a week is better than daily shallow watering for the beds."},
    ],
}
NOVEL = "I read a novel about a garden gnome last week and it was funny."
COMPOST = "The soil in the north beds needs more compost before spring."


@pytest.fixture
def garden(tmp_path: Path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "topics").mkdir()
    (tmp_path / "runs" / "r1.json").write_text(json.dumps(RUN), encoding="utf-8")
    (tmp_path / "topics" / "garden.yaml").write_text(TOPIC_FILE, encoding="utf-8")
    return tmp_path


def sync(capsys, root: Path, db: Path | str | None = None, *extra: str) -> tuple[int, str, str]:
    db = db or root / "v.duckdb"
    return run_cli(capsys, "--db", str(db), "sync", "--runs-dir", str(root / "runs"), "--topics-dir", str(root / "topics"),
                   "--no-recall", *extra)


def bricks(capsys, db: Path, *extra: str) -> list[dict]:
    return run_json(capsys, "--db", str(db), "bricks", "garden", *extra)


def brick_of(listing: list[dict], text: str) -> dict:
    (found,) = [b for b in listing if b["content"] == text]
    return found


def manifest_entries(capsys, db: Path) -> list[dict]:
    return run_json(capsys, "--db", str(db), "manifest", "garden")["bricks"]


def manifest_hash(capsys, db: Path) -> str:
    return run_json(capsys, "--db", str(db), "manifest", "garden")["manifest_hash"]


# The examples rule (pure)


class FakeVectors:
    """Texts → unit vectors by a fixed table (the rule is pure given vectors)."""

    def __init__(self, table: dict[str, list[float]]):
        self.table = table

    def __call__(self, texts):
        import numpy as np

        rows = np.asarray([self.table[t] for t in texts], dtype="float32")
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_an_example_decides_by_its_normalised_text_or_a_cosine_at_or_above_the_bar():
    examples = Examples(keep=["Store the start time, not a countdown."], drop=["File created successfully at: a.ts"])
    vectors = FakeVectors({
        "Store the start time, not a countdown.": [1, 0, 0],
        "File created successfully at: a.ts": [0, 1, 0],
        "Keep the start time instead of a countdown.": [0.95, 0.05, 0.3],  # near the keep example
        "File created successfully at: b.ts": [0, 0.99, 0.05],  # near the drop example
        "The weather was nice.": [0, 0, 1],
        "  store THE start time,   not a countdown. ": [0, 0, 1],  # exact once normalised, whatever its vector
    })
    texts = ["Keep the start time instead of a countdown.", "File created successfully at: b.ts", "The weather was nice.",
             "  store THE start time,   not a countdown. "]
    assert example_verdicts(texts, examples, vectors) == ["keep", "drop", None, "keep"]
    # Without vectors only an exact example decides; without examples nothing does.
    assert example_verdicts(texts, examples, None) == [None, None, None, "keep"]
    assert example_verdicts(texts, None, vectors) == [None] * 4
    assert 0.8 <= EXAMPLE_BAR < 1


def test_a_keep_example_keeps_a_sentence_below_min_relevance_and_a_drop_example_drops_a_relevant_one():
    from nexus_assets.extract.embedded import keep_relevant

    base = dict(topic_id="garden", display_name="Vegetable garden", state="ACTIVE",
                extraction_policy=ExtractionPolicy(scope_description="beds", required_keywords=("beds",)))
    pointers = [{"topic_id": "garden", "json_path": "$", "verbatim_quote": q} for q in ("Far beds.", "Near beds.")]
    vectors = FakeVectors({"Vegetable garden. beds": [1, 0], "Vegetable garden: beds": [1, 0],
                           "Far beds.": [0, 1], "Near beds.": [1, 0.01]})
    plain = Topic(**base, min_relevance=0.5)
    assert [p["verbatim_quote"] for p in keep_relevant(plain, pointers, vectors)] == ["Near beds."]
    taught = Topic(**base, min_relevance=0.5, examples=Examples(keep=["Far beds."], drop=["Near beds."]))
    assert [p["verbatim_quote"] for p in keep_relevant(taught, pointers, vectors)] == ["Far beds."]


# nexus keep / nexus drop


def test_keep_and_drop_add_the_text_to_the_topic_file_with_its_comments_and_order_and_audit_who_and_why(garden, capsys):
    db = garden / "v.duckdb"
    assert sync(capsys, garden)[0] == 0
    listing = bricks(capsys, db)
    novel, compost = brick_of(listing, NOVEL), brick_of(listing, COMPOST)

    dropped = run_json(capsys, "--db", str(db), "drop", novel["brick_id"][:12], "--reason", "a novel, not the garden")
    assert dropped["verdict"] == "drop" and dropped["file_changed"] and dropped["examples"] == {"keep": 0, "drop": 1}
    code, out, err = run_cli(capsys, "--db", str(db), "keep", compost["brick_id"])
    assert code == 0 and "kept" in out and "1 keep and 1 drop" in out, err

    text = (garden / "topics" / "garden.yaml").read_text(encoding="utf-8")
    assert text.startswith(TOPIC_FILE)  # every byte a person wrote, comments included, then the examples
    assert text[len(TOPIC_FILE):] == f"examples:\n  keep:\n  - {COMPOST}\n  drop:\n  - {NOVEL}\n"
    # Twice is once; changing one's mind moves the text from one list to the other.
    again = run_json(capsys, "--db", str(db), "keep", compost["brick_id"])
    assert not again["file_changed"]
    moved = run_json(capsys, "--db", str(db), "keep", novel["brick_id"])
    assert moved["examples"] == {"keep": 2, "drop": 0}
    assert "# why it exists" in (garden / "topics" / "garden.yaml").read_text(encoding="utf-8")

    with Vault.open(db, read_only=True) as v:
        audit = [(t.brick_id, t.verdict, t.reason) for t in v.teaching.teachings("garden")]
        assert all(t.actor.endswith("(nexus drop)") or t.actor.endswith("(nexus keep)") for t in v.teaching.teachings())
    assert audit == [(novel["brick_id"], "drop", "a novel, not the garden"), (compost["brick_id"], "keep", None),
                     (compost["brick_id"], "keep", None), (novel["brick_id"], "keep", None)]
    (row,) = run_json(capsys, "--db", str(db), "topics")
    assert row["examples"] == {"keep": 2, "drop": 0}


def test_a_dropped_brick_leaves_the_manifest_with_its_reason_and_a_fresh_vault_gives_the_same_manifest(garden, capsys, tmp_path):
    db = garden / "v.duckdb"
    sync(capsys, garden)
    novel = brick_of(bricks(capsys, db), NOVEL)
    run_json(capsys, "--db", str(db), "drop", novel["brick_id"], "--reason", "a novel")
    code, out, err = sync(capsys, garden)
    assert code == 0, err
    visible = [b["content"] for b in bricks(capsys, db)]
    assert NOVEL not in visible and COMPOST in visible and len(visible) == 4
    left = brick_of(bricks(capsys, db, "--all"), NOVEL)
    assert left["state"] == "SUPERSEDED" and left["superseded_by"] is None
    assert "dropped by" in left["left_because"] and "a novel" in left["left_because"]
    code, out, _ = run_cli(capsys, "--db", str(db), "bricks", "garden", "--all")
    assert "(left: dropped by" in out
    # The same topic file and runs in a fresh vault: the same manifest entries and bricks (the hash
    # itself chains to the vault's previous manifest).
    fresh = tmp_path / "fresh.duckdb"
    sync(capsys, garden, fresh)
    assert manifest_entries(capsys, db) == manifest_entries(capsys, fresh)
    assert bricks(capsys, db) == bricks(capsys, fresh)
    # Taking the example back selects the brick again: it returns, the same brick.
    (garden / "topics" / "garden.yaml").write_text(TOPIC_FILE, encoding="utf-8")
    sync(capsys, garden)
    assert brick_of(bricks(capsys, db), NOVEL)["brick_id"] == novel["brick_id"]


def test_a_changed_policy_selects_again_and_what_it_no_longer_selects_leaves(garden, capsys):
    db = garden / "v.duckdb"
    sync(capsys, garden)
    assert len(bricks(capsys, db)) == 5
    narrower = TOPIC_FILE.replace("[garden, beds, watering, soil]", "[soil]")
    (garden / "topics" / "garden.yaml").write_text(narrower, encoding="utf-8")
    assert sync(capsys, garden)[0] == 0
    assert [b["content"] for b in bricks(capsys, db)] == [COMPOST]
    gone = [b for b in bricks(capsys, db, "--all") if b["content"] != COMPOST]
    assert len(gone) == 4 and all("no longer selected" in b["left_because"] for b in gone)


def test_refused_on_a_sealed_topic_an_unknown_brick_or_a_file_that_cannot_be_written(garden, capsys):
    db = garden / "v.duckdb"
    sync(capsys, garden)
    novel = brick_of(bricks(capsys, db), NOVEL)
    code, _, err = run_cli(capsys, "--db", str(db), "drop", "0" * 64)
    assert code == 2 and err.count("\n") == 1 and "no brick" in err
    path = garden / "topics" / "garden.yaml"
    # The file cannot be replaced (the tests may run as root, whom permissions do not stop): where
    # its new text would be written first, a folder stands.
    blocker = garden / "topics" / ".garden.yaml.nexus-tmp"
    blocker.mkdir()
    code, _, err = run_cli(capsys, "--db", str(db), "drop", novel["brick_id"])
    blocker.rmdir()
    assert code == 2 and err.count("\n") == 1 and "cannot be written" in err, err
    assert path.read_text(encoding="utf-8") == TOPIC_FILE
    with Vault.open(db) as v:
        v.topics.transition_topic("garden", "LOCKED", actor="test")
    code, _, err = run_cli(capsys, "--db", str(db), "keep", novel["brick_id"])
    assert code == 2 and err.count("\n") == 1 and "LOCKED" in err
    with Vault.open(db, read_only=True) as v:
        assert v.teaching.teachings() == []


# Moving an existing vault (issue 49 item 4)


class StricterSelector(EmbeddedExtractor):
    """A newer selector, as a later release would ship one: it keeps only sentences about soil."""

    identity = "embedded-test-newer"

    def extract_runs(self, topic, runs, companions=None):
        found = super().extract_runs(topic, runs, companions)
        for extraction in found.values():
            extraction.pointers = [p for p in extraction.pointers if "soil" in p["verbatim_quote"].lower()]
        return found


def test_a_new_selector_never_moves_a_topic_by_itself_and_reselect_moves_it(garden, capsys, monkeypatch):
    db = garden / "v.duckdb"
    sync(capsys, garden)
    with Vault.open(db, read_only=True) as v:
        assert v.teaching.selector("garden") == newest_selector() == "embedded-v6"
    before = manifest_hash(capsys, db)
    # A later release registers a newer selector: the vault stays as it was and the sync says so.
    monkeypatch.setitem(backends._SELECTORS, "embedded-test-newer", lambda vectors, names, weights: StricterSelector(vectors))
    monkeypatch.setattr(backends, "DEFAULT_EMBEDDED", "embedded-test-newer")  # as that release would ship it
    assert newest_selector() == "embedded-test-newer"
    code, out, err = sync(capsys, garden)
    assert code == 0 and manifest_hash(capsys, db) == before
    (line,) = [l for l in err.splitlines() if "older selector" in l]
    assert "garden: selected by embedded-v6" in line and "nexus sync --reselect --topic garden" in line
    code, out, err = sync(capsys, garden, None, "--reselect", "--topic", "garden")
    assert code == 0, err
    assert [b["content"] for b in bricks(capsys, db)] == [COMPOST]
    assert all("no longer selected" in b["left_because"] for b in bricks(capsys, db, "--all") if b["state"] == "SUPERSEDED")
    with Vault.open(db, read_only=True) as v:
        assert v.teaching.selector("garden") == "embedded-test-newer"
    assert "older selector" not in sync(capsys, garden)[2]


def test_final_bricks_never_leave(garden, capsys):
    db = garden / "v.duckdb"
    sync(capsys, garden)
    with Vault.open(db) as v:
        v.conn.execute("UPDATE bricks SET state = 'FINAL' WHERE topic_id = 'garden'")
    (garden / "topics" / "garden.yaml").write_text(TOPIC_FILE.replace("[garden, beds, watering, soil]", "[soil]"), encoding="utf-8")
    sync(capsys, garden)
    assert len(bricks(capsys, db)) == 5 and {b["state"] for b in bricks(capsys, db)} == {"FINAL"}


# The other shells: the HTTP API, MCP and the viewer call the same service


def test_the_api_keeps_and_drops_and_refuses_with_a_problem(garden, capsys):
    from types import SimpleNamespace

    from nexus_assets_tests.api_helpers import api_server

    db = garden / "v.duckdb"
    sync(capsys, garden)
    listing = bricks(capsys, db)
    novel, compost = brick_of(listing, NOVEL), brick_of(listing, COMPOST)
    project = SimpleNamespace(db=db, runs=garden / "runs", topics=garden / "topics")
    with api_server(project) as api:
        status, _, body = api.post(f"/v1/bricks/{novel['brick_id']}/drop", {"reason": "a novel"})
        assert status == 200, body
        assert body["verdict"] == "drop" and body["actor"] == "api" and body["examples"] == {"keep": 0, "drop": 1}
        status, _, body = api.post(f"/v1/bricks/{compost['brick_id'][:12]}/keep")
        assert status == 200 and body["examples"] == {"keep": 1, "drop": 1}, body
        status, headers, body = api.post("/v1/bricks/" + "0" * 64 + "/keep", {})
        assert status == 404 and headers["content-type"].startswith("application/problem+json") and "no brick" in body["detail"]
        status, _, body = api.post(f"/v1/bricks/{novel['brick_id']}/drop", {"reason": "x", "extra": 1})
        assert status == 422
        (row,) = api.get("/v1/topics")[2]
        assert row["examples"] == {"keep": 1, "drop": 1}
        status, _, page = api.get("/topics/garden")
        assert status == 200 and 'class="teach teach-keep"' in page and "examples: keep 1, drop 1" in page
        blocker = garden / "topics" / ".garden.yaml.nexus-tmp"
        blocker.mkdir()
        status, _, body = api.post(f"/v1/bricks/{novel['brick_id']}/keep", {})
        blocker.rmdir()
        assert status == 409 and "cannot be written" in body["detail"]
    assert f"  - {COMPOST}\n" in (garden / "topics" / "garden.yaml").read_text(encoding="utf-8")


def test_the_read_only_viewer_shows_no_buttons_and_says_how_to_teach(garden, capsys):
    from nexus_assets.web.server import Viewer

    db = garden / "v.duckdb"
    sync(capsys, garden)
    page = Viewer(db).handle("GET", "/topics/garden", "", "127.0.0.1").body.decode()
    assert "nexus keep BRICK_ID" in page and 'class="teach teach-keep"' not in page
    assert Viewer(db).handle("POST", f"/v1/bricks/{'0' * 64}/keep", "", "127.0.0.1").status == 405


def test_mcp_keep_and_drop_only_with_allow_writes(garden):
    import os
    import sys

    import anyio
    from mcp.client.client import Client
    from mcp.client.stdio import StdioServerParameters

    from nexus_assets_tests.project import REPO

    from nexus_assets_tests.cli_helpers import run_nexus

    db = garden / "v.duckdb"
    # In a child process: the stdio client hands the server this process's stderr, which capsys would replace.
    done = run_nexus("--db", str(db), "sync", "--runs-dir", str(garden / "runs"), "--topics-dir", str(garden / "topics"), "--no-recall")
    assert done.returncode == 0, done.stderr
    novel = brick_of(json.loads(run_nexus("--db", str(db), "bricks", "garden", "--json").stdout), NOVEL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}

    def client(*flags: str) -> Client:
        return Client(StdioServerParameters(
            command=sys.executable, env=env,
            args=["-m", "nexus_assets.cli", "--db", str(db), "mcp", "--runs-dir", str(garden / "runs"),
                  "--topics-dir", str(garden / "topics"), *flags],
        ))

    async def run():
        async with client() as read_only:
            plain = {t.name for t in (await read_only.list_tools()).tools}
        async with client("--allow-writes") as writer:
            names = {t.name for t in (await writer.list_tools()).tools}
            dropped = await writer.call_tool("drop", {"brick_id": novel["brick_id"], "reason": "a novel"})
            unknown = await writer.call_tool("keep", {"brick_id": "0" * 64})
        return plain, names, dropped, unknown

    plain, names, dropped, unknown = anyio.run(run)
    assert not {"keep", "drop"} & plain and {"keep", "drop"} <= names
    assert not dropped.is_error and dropped.structured_content["verdict"] == "drop"
    assert dropped.structured_content["actor"].startswith("mcp")
    assert unknown.is_error and "brick_id: no brick" in unknown.content[0].text


def test_an_old_vault_opens_with_the_teaching_tables_and_a_sync_takes_no_brick_away(tmp_path, capsys):
    """Migration 24 only adds tables; the selector that answered before is what the topic keeps
    (its answers stay in force), so a sync after the upgrade takes no visible brick away."""
    from nexus_assets.vault.migrations import LATEST
    from nexus_assets_tests.vault.test_vault_migrations import release_vault, snapshot

    db = release_vault(tmp_path / "project")
    before = snapshot(db)
    with Vault.open(db) as v:
        assert v.conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] == LATEST >= 24
        assert v.teaching.teachings() == [] and v.teaching.selectors() == {}
    assert snapshot(db) == before
    visible = {r[0] for r in before["bricks"] if r[4] != "SUPERSEDED" and r[1] in ("nexus-server-sync", "storage-decisions")}
    root = tmp_path / "project"
    code, _, err = run_cli(capsys, "--db", str(db), "sync", "--runs-dir", str(root / "runs"), "--topics-dir", str(root / "topics"),
                           "--no-recall", "--topic", "nexus-server-sync", "--topic", "storage-decisions")
    assert code == 0, err
    after = {b["brick_id"] for t in ("nexus-server-sync", "storage-decisions")
             for b in run_json(capsys, "--db", str(db), "bricks", t)}
    assert visible <= after
    with Vault.open(db, read_only=True) as v:
        # Answered only by an extractor older than every version this release runs: this release's newest,
        # embedded-v6, which without examples keeps what v3 keeps (no brick left, above).
        assert v.teaching.selectors() == {"nexus-server-sync": "embedded-v6", "storage-decisions": "embedded-v6"}


def test_teaching_on_a_postgresql_vault(garden, capsys, postgres_url):
    """The same judgement, selection and audit on the team backend (its migration 3 = DuckDB's 24)."""
    sync(capsys, garden, postgres_url)
    novel = brick_of(run_json(capsys, "--db", postgres_url, "bricks", "garden"), NOVEL)
    run_json(capsys, "--db", postgres_url, "drop", novel["brick_id"], "--reason", "a novel")
    assert sync(capsys, garden, postgres_url)[0] == 0
    listing = run_json(capsys, "--db", postgres_url, "bricks", "garden", "--all")
    assert [b["content"] for b in listing if b["state"] != "SUPERSEDED"] == [
        b["content"] for b in bricks(capsys, (sync(capsys, garden, garden / "fresh.duckdb"), garden / "fresh.duckdb")[1])
    ]
    assert "a novel" in brick_of(listing, NOVEL)["left_because"]
    with Vault.open(postgres_url, read_only=True) as v:
        assert [t.verdict for t in v.teaching.teachings("garden")] == ["drop"]
        assert v.teaching.selector("garden") == "embedded-v6"


def test_forgetting_a_run_takes_the_text_of_its_taught_bricks_out_of_the_audit_trail_and_the_topic_file(garden, capsys):
    db = garden / "v.duckdb"
    sync(capsys, garden)
    novel = brick_of(bricks(capsys, db), NOVEL)
    run_json(capsys, "--db", str(db), "drop", novel["brick_id"])
    code, _, err = run_cli(capsys, "--db", str(db), "forget", "--run", "r1", "--reason", "erasure request", "--yes")
    assert code == 0, err
    with Vault.open(db, read_only=True) as v:
        assert v.teaching.teachings() == []
        assert v.topics.topic("garden").examples.drop == ()
    # The example left the topic file too (no copy of the text stays, invariant 15); the rest is as written.
    text = (garden / "topics" / "garden.yaml").read_text(encoding="utf-8")
    assert NOVEL not in text and text.startswith(TOPIC_FILE)
