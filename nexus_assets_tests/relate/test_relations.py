"""Related bricks and the Conflict View (docs/conflicts.md, seed 000 Tier 2).

Relations are records beside the bricks: deterministic across re-runs and run orders, recomputed
only for the bricks that changed, and never part of a brick, a state or a manifest hash. A related
pair whose texts state different values is listed side by side by `nexus conflicts`; Nexus never
picks a side.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest
import yaml

from nexus_assets.embedding.embedder import MODEL
from nexus_assets.relate.neighbours import candidate_pairs, nearest_lists
from nexus_assets.relate.rules import conflict_between, nearest
from nexus_assets.relate.step import relate_topic
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.project import FIXTURES, Project, nexus_run, sample_project

TOPIC = "api-keys"
# The seed's example of a flat contradiction, and of an overlap that is no contradiction.
SAID_FIRST = "The API key is XYZ."
SAID_LATER = "The API key is actually ABC."
DOWN = ("The API server is down.", "The API server is currently down.")


def write_topic(p: Project, threshold: float | None = 0.75, **extra) -> None:
    """The seed's pair is 0.78 alike under the shipped (int8) MiniLM: under the 0.85 default."""
    p.topics.mkdir(parents=True, exist_ok=True)
    body = {
        "topic_id": TOPIC,
        "display_name": "API keys and servers",
        "extraction_policy": {"scope_description": "Which keys and servers the API uses.", "required_keywords": ["api"]},
        "state": "ACTIVE",
        "min_relevance": 0,  # every sentence here is written for the topic; relevance is test_worth_keeping's
        **({"related_threshold": threshold} if threshold is not None else {}),
        **extra,
    }
    (p.topics / f"{TOPIC}.yaml").write_text(yaml.safe_dump(body), encoding="utf-8")


def seed_runs(p: Project) -> None:
    p.write_run("a.json", nexus_run("run-a", [("user", SAID_FIRST), ("user", DOWN[0])], start="2026-01-01T00:00:00Z"))
    p.write_run("b.json", nexus_run("run-b", [("user", SAID_LATER), ("user", DOWN[1])], start="2026-02-01T00:00:00Z"))


@pytest.fixture
def project(tmp_path) -> Project:
    p = Project(tmp_path / "proj")
    write_topic(p)
    seed_runs(p)
    return p


def relation_rows(db: Path) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(
            "SELECT topic_id, model, brick_id, related_id, kind, similarity, conflict FROM brick_relations ORDER BY ALL"
        ).fetchall()


def test_the_seed_contradiction_is_listed_by_nexus_conflicts_with_both_sources(project: Project, capsys):
    (result,) = run_json(capsys, *project.sync_args())
    assert result["success"] and all(result["checks"].values()), "open conflicts warn, they never fail a sync"
    assert "open_conflicts" in result["warnings"]
    (conflict,) = run_json(capsys, *project.cli_args(), "conflicts", TOPIC)
    first, later = conflict["bricks"]
    assert (first["content"], later["content"]) == (SAID_FIRST, SAID_LATER), "the earlier statement first"
    assert conflict["conflict"] == "identifier: xyz ≠ abc"
    assert (first["source"]["run_id"], later["source"]["run_id"]) == ("run-a", "run-b")
    assert first["said_at"].startswith("2026-01-01") and later["said_at"].startswith("2026-02-01")
    assert first["source"]["json_path"] == "$['messages'][0]['content']"
    # Both bricks stay visible: Nexus appends both and never picks.
    contents = {b["content"] for b in run_json(capsys, *project.cli_args(), "bricks", TOPIC)}
    assert {SAID_FIRST, SAID_LATER, *DOWN} <= contents
    code, out, _ = run_cli(capsys, *project.cli_args(), "conflicts", TOPIC)
    assert code == 0 and SAID_FIRST in out and SAID_LATER in out and "run-a" in out and "1 conflict in api-keys" in out


def test_an_overlap_is_related_without_being_a_conflict(project: Project, capsys):
    run_json(capsys, *project.sync_args())
    with Vault.open(project.db, read_only=True) as v:
        pairs = v.relations.pairs(TOPIC, MODEL)
        texts = {b.brick_id: b.content for b in v.bricks.select(TOPIC)}
    by_text = {frozenset((texts[p["brick_a"]], texts[p["brick_b"]])): p for p in pairs}
    down = by_text[frozenset(DOWN)]
    assert down["conflict"] is None and down["similarity"] >= 0.75
    assert by_text[frozenset((SAID_FIRST, SAID_LATER))]["conflict"]


def test_relations_change_no_brick_state_or_manifest_hash(tmp_path, capsys):
    """The shipped sample synced twice: once with relations off (`--no-recall`: no embeddings, so no
    relations) and once with them built. Every brick, state and manifest hash is the same."""
    off = sample_project(tmp_path / "off")
    on = sample_project(tmp_path / "on")
    for p in (off, on):  # a threshold low enough that the sample's bricks do relate
        for f in p.topics.glob("*.yaml"):
            f.write_text(yaml.safe_dump({**yaml.safe_load(f.read_text(encoding="utf-8")), "related_threshold": 0.5}), encoding="utf-8")
    results_off = run_json(capsys, *off.sync_args(), "--no-recall")
    results_on = run_json(capsys, *on.sync_args())
    with duckdb.connect(str(off.db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM relation_builds").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM brick_relations").fetchone()[0] == 0
    with duckdb.connect(str(on.db), read_only=True) as con:
        visible = con.execute("SELECT count(*) FROM bricks WHERE state <> 'SUPERSEDED'").fetchone()[0]
        assert con.execute("SELECT count(*) FROM relation_builds").fetchone()[0] == visible > 0
        assert con.execute("SELECT count(*) FROM brick_relations").fetchone()[0] > 0, "the sample has related bricks"
    hashes = {r["topic_id"]: r["manifest_hash"] for r in results_off}
    assert hashes.keys() == {"nexus-server-sync", "storage-decisions"}
    assert {r["topic_id"]: r["manifest_hash"] for r in results_on} == hashes
    for topic in hashes:
        assert run_json(capsys, *on.cli_args(), "bricks", topic, "--all") == run_json(capsys, *off.cli_args(), "bricks", topic, "--all")
        assert run_json(capsys, *on.cli_args(), "manifest", topic) == run_json(capsys, *off.cli_args(), "manifest", topic)


def test_relations_are_the_same_whatever_the_run_order_and_however_often_rerun(tmp_path, capsys):
    """One project synced run by run in two orders, and once with everything at once: the same
    relation records (ids, similarities, conflicts), and a re-run changes nothing."""
    runs = [
        ("a.json", nexus_run("run-a", [("user", SAID_FIRST), ("user", "The API uses port 8080 in staging.")])),
        ("b.json", nexus_run("run-b", [("user", SAID_LATER), ("user", "The API uses port 9090 in staging.")], start="2026-01-02T00:00:00Z")),
        ("c.json", nexus_run("run-c", [("user", DOWN[0]), ("user", "We never rotate the API key on Fridays.")], start="2026-01-03T00:00:00Z")),
        ("d.json", nexus_run("run-d", [("user", DOWN[1]), ("user", "We rotate the API key on Fridays.")], start="2026-01-04T00:00:00Z")),
    ]
    outcomes = []
    for name, order in [("forward", [0, 1, 2, 3]), ("backward", [3, 2, 1, 0]), ("together", None)]:
        p = Project(tmp_path / name)
        write_topic(p)
        steps = [[i] for i in order] if order else [[0, 1, 2, 3]]
        for step in steps:
            for i in step:
                p.write_run(*runs[i])
            run_json(capsys, *p.sync_args())
        rows = [r[2:] for r in relation_rows(p.db)]  # the time of computing aside
        run_json(capsys, *p.sync_args())
        assert [r[2:] for r in relation_rows(p.db)] == rows, "a re-run changes nothing"
        outcomes.append(rows)
    assert outcomes[0] == outcomes[1] == outcomes[2]
    reasons = {r[-1] for r in outcomes[0] if r[-1]}
    assert {"number: 8080 ≠ 9090", "identifier: xyz ≠ abc"} <= reasons


def test_only_bricks_that_changed_are_looked_at_again(project: Project, capsys):
    run_json(capsys, *project.sync_args())
    with Vault.open(project.db) as v:
        topic = v.topics.topic(TOPIC)
        assert relate_topic(v, topic, MODEL).looked_at == 0, "nothing changed: nothing is looked at"
        before = v.relations.built(TOPIC, MODEL)
    project.write_run("c.json", nexus_run("run-c", [("user", "Unrelated: the API docs live in the wiki.")], start="2026-03-01T00:00:00Z"))
    run_json(capsys, *project.sync_args())
    with duckdb.connect(str(project.db), read_only=True) as con:
        stamps = dict(con.execute("SELECT brick_id, computed_at FROM relation_builds").fetchall())
    old = [b for b in before if b in stamps]
    assert len(stamps) == len(before) + 1
    # Computed once, at the first sync, for every brick the new one is not related to.
    assert len({stamps[b] for b in old}) == 1


def test_a_changed_threshold_finds_every_pair_again(project: Project, capsys):
    run_json(capsys, *project.sync_args())
    assert run_json(capsys, *project.cli_args(), "conflicts", TOPIC)
    write_topic(project, threshold=None)  # back to the 0.85 default: the seed's pair is 0.78 alike
    run_json(capsys, *project.sync_args())
    assert run_json(capsys, *project.cli_args(), "conflicts", TOPIC) == []
    assert {r[-1] for r in relation_rows(project.db)} == {None}


def test_exact_search_equals_brute_force_with_ties_broken_by_id():
    rng = np.random.default_rng(7)
    base = rng.standard_normal((40, 384)).astype("float32")
    # Near-duplicates and exact ties: copies of a few vectors with tiny noise.
    near = np.concatenate([base[:5] + 0.01 * rng.standard_normal((5, 384)).astype("float32"), base[:3]])
    vectors = np.concatenate([base, near])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    found, _ = candidate_pairs(vectors, None, 0.9)
    lists = nearest_lists(range(len(vectors)), found, limit=3)
    exact = np.round(vectors.astype(np.float64) @ vectors.astype(np.float64).T, 4)
    for i in range(len(vectors)):
        want = nearest(str(i).zfill(3), [(str(j).zfill(3), exact[i, j]) for j in range(len(vectors)) if exact[i, j] >= 0.9], limit=3)
        assert [(str(j).zfill(3), s) for j, s in lists[i]] == want
    some, near = candidate_pairs(vectors, [0, 41], 0.9)
    assert nearest_lists([0, 41], some, limit=3) == {0: lists[0], 41: lists[41]}
    assert set(near.tolist()) == {j for r in (0, 41) for j in range(len(vectors)) if j != r and exact[r, j] >= 0.9}


CONFLICT_SET = FIXTURES / "relations" / "conflict_pairs.json"


def conflict_figures() -> dict:
    pairs = json.loads(CONFLICT_SET.read_text(encoding="utf-8"))["pairs"]
    flagged = [p for p in pairs if conflict_between(p["a"], p["b"])]
    true = [p for p in flagged if p["conflict"]]
    positives = [p for p in pairs if p["conflict"]]
    return {
        "pairs": len(pairs),
        "conflicts": len(positives),
        "flagged": len(flagged),
        "precision": len(true) / len(flagged),
        "recall": len(true) / len(positives),
        "missed": [p for p in positives if p not in flagged],
        "false": [p for p in flagged if not p["conflict"]],
    }


def test_the_detector_is_precise_on_the_labelled_pairs():
    """The labelled set (fixtures/relations/conflict_pairs.json): related-looking pairs a person
    marked as contradicting or not. README quotes these figures."""
    figures = conflict_figures()
    assert figures["pairs"] >= 60
    assert figures["precision"] >= 0.8, figures["false"]


def test_the_open_conflicts_check_warns_and_the_manifest_metadata_counts_them(project: Project):
    import dagster as dg

    from nexus_assets_tests.dagster_helpers import materialize_topic

    with dg.instance_for_test() as instance:
        first = materialize_topic(project, TOPIC, instance)
        assert first.success
        (check,) = [e for e in first.get_asset_check_evaluations() if e.check_name == "open_conflicts"]
        assert check.passed is False and check.severity == dg.AssetCheckSeverity.WARN
        assert check.metadata["open_conflicts"].value == 1
        (row,) = check.metadata["conflicts"].value.records
        assert row.data["kind"] == "identifier" and {row.data["first_run"], row.data["second_run"]} == {"run-a", "run-b"}
        assert SAID_FIRST not in str(check.metadata), "a check holds no text (forgetting never edits its history)"
        embedded = first.asset_materializations_for_node("brick_embeddings")[0].metadata
        assert embedded["open_conflicts"].value == 1 and embedded["relations_looked_at"].value == 4
        # The manifest counts what was related when it was published: from the next sync on, this one.
        again = materialize_topic(project, TOPIC, instance)
        manifest = again.asset_materializations_for_node("topic_manifest")[0].metadata
        assert manifest["open_conflicts"].value == 1 and manifest["related_pairs"].value == 2


def test_tool_output_never_conflicts_even_for_a_topic_that_reads_it(tmp_path, capsys):
    """Issue 49 item 6: a topic may ask for tool output (docs/inputs.md), but what a tool printed states
    nothing a person disagrees with; the same two values said by the person still conflict."""
    p = Project(tmp_path / "proj")
    policy = {"scope_description": "Which keys and servers the API uses.", "required_keywords": ["api"],
              "target_node_types": ["user_message", "tool_message"]}
    write_topic(p)
    body = yaml.safe_load((p.topics / f"{TOPIC}.yaml").read_text(encoding="utf-8")) | {"extraction_policy": policy}
    (p.topics / f"{TOPIC}.yaml").write_text(yaml.safe_dump(body), encoding="utf-8")
    p.write_run("a.json", nexus_run("run-a", [("tool", "The API key is XYZ."), ("user", SAID_FIRST)], start="2026-01-01T00:00:00Z"))
    p.write_run("b.json", nexus_run("run-b", [("tool", "The API key is actually ABC.")], start="2026-02-01T00:00:00Z"))
    run_json(capsys, *p.sync_args())
    bricks = run_json(capsys, *p.cli_args(), "bricks", TOPIC)
    assert {s["node_type"] for b in bricks for s in b["sources"]} == {"tool_message", "user_message"}
    assert run_json(capsys, *p.cli_args(), "conflicts", TOPIC) == []
    p.write_run("c.json", nexus_run("run-c", [("user", "The API key is now ABC.")], start="2026-03-01T00:00:00Z"))
    run_json(capsys, *p.sync_args())
    [conflict] = run_json(capsys, *p.cli_args(), "conflicts", TOPIC)
    assert {s["content"] for s in conflict["bricks"]} == {SAID_FIRST, "The API key is now ABC."}
