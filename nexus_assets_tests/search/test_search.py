"""`nexus search`: BM25 ranking over brick text across topics, highlights as code-point offsets,
an index kept in step by the pipeline and rebuilt from the vault when it is gone."""

import pytest

from nexus_assets.search.step import forget_index, index_dir
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.project import Project, nexus_run

TOPIC = "notes"


@pytest.fixture
def synced(empty_project: Project, capsys) -> Project:
    p = empty_project
    p.write_topic(TOPIC, keywords=["vault", "duckdb", "🦆"])
    p.write_topic("other", keywords=["vault"])
    p.write_run(
        "a.json",
        nexus_run(
            "run-a",
            [
                ("user", "The vault keeps every version. The vault never deletes a vault row."),
                ("assistant", "DuckDB holds the vault in one file."),
                ("user", "Ünïcode 🦆 first: the vault désign über alles."),
                ("assistant", "A duckdb writer takes turns."),
            ],
        ),
    )
    run_json(capsys, *p.sync_args())
    return p


def search(p: Project, capsys, *args: str) -> list[dict]:
    return run_json(capsys, *p.cli_args(), "search", *args)


def test_results_are_ranked_by_bm25_with_the_words_highlighted(synced: Project, capsys):
    hits = search(synced, capsys, "vault", "--topic", TOPIC)
    contents = [h["content"] for h in hits]
    # Term frequency counts: the brick that says "vault" most often ranks first.
    assert contents[0] == "The vault never deletes a vault row."
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
    for h in hits:
        marked = [h["content"][s["start"]:s["end"]] for s in h["highlights"]]
        assert marked and all(m.lower() == "vault" for m in marked)
        assert h["highlighted"].count("«") == len(marked)
    assert all("vault" in c.lower() for c in contents)


def test_highlights_count_code_points_past_emoji_and_accents(synced: Project, capsys):
    (hit,) = search(synced, capsys, "désign", "--topic", TOPIC)
    (span,) = hit["highlights"]
    assert hit["content"][span["start"]:span["end"]] == "désign"


def test_stemming_phrases_and_topic_filters(synced: Project, capsys):
    assert {h["content"] for h in search(synced, capsys, "deleting", "--topic", TOPIC)} == {"The vault never deletes a vault row."}
    phrase = search(synced, capsys, '"one file"', "--topic", TOPIC)
    assert [h["content"] for h in phrase] == ["DuckDB holds the vault in one file."]
    across = {h["topic_id"] for h in search(synced, capsys, "vault")}
    assert across == {TOPIC, "other"}
    assert {h["topic_id"] for h in search(synced, capsys, "vault", "--topic", "other")} == {"other"}
    # A query that is not valid syntax is read leniently, never an error.
    # An unclosed quote is a phrase to the end of the query; a stray bracket is passed over.
    assert search(synced, capsys, '"one file') == search(synced, capsys, '"one file"') != []
    assert search(synced, capsys, "(vault") == search(synced, capsys, "vault") != []
    assert search(synced, capsys, "nothing-says-this") == []


def test_the_index_follows_the_manifest_and_is_rebuilt_when_gone(synced: Project, capsys):
    assert index_dir(synced.db).is_dir(), "the pipeline wrote the index after the manifest"
    synced.write_run("b.json", nexus_run("run-b", [("user", "A zeppelin vault appears.")]))
    run_json(capsys, *synced.sync_args())
    assert [h["content"] for h in search(synced, capsys, "zeppelin")] == ["A zeppelin vault appears."] * 2
    before = search(synced, capsys, "vault")
    forget_index(synced.db)
    assert not index_dir(synced.db).exists()
    assert search(synced, capsys, "vault") == before, "rebuilt from the vault alone"


def test_bad_usage_exits_2(synced: Project, capsys):
    code, _, err = run_cli(capsys, *synced.cli_args(), "search", "vault", "--topic", "nope")
    assert code == 2 and "unknown topic" in err
    code, _, err = run_cli(capsys, *synced.cli_args(), "search", "   ")
    assert code == 2 and "give some words" in err
