"""Teaching that generalises (issue 62 item 2, DESIGN §5, docs/teaching.md): embedded-v6 fits a
topic's keep and drop examples as one scorer over what a sentence says and how it is written, so
dropping narration moves the topic's other narration too, not only near twins. The fit depends on
the topic file alone (the same file gives the same bricks in a fresh vault), each sentence's shift
is an exact sum over the examples (what `nexus explain` shows), and a sentence is dropped only when
the examples pull it further than they pull a keep example left out of the fit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nexus_assets.core.models import Examples
from nexus_assets.extract.backends import StoredVectors
from nexus_assets.extract.examples import EXAMPLE_BAR, fit_taught, taught_verdicts
from nexus_assets_tests.cli_helpers import run_cli, run_json

KEEP = [
    "The raised beds get drip watering every morning at six.",
    "The soil in the north beds needs more compost before spring.",
    "Tomatoes go in the south bed because it gets the most sun.",
    "We water the beds deeply twice a week instead of daily.",
    "The garden's rain barrel holds 200 litres.",
]
# Transient status an agent reports (statements v3's form rules keep: they hold the topic's words).
DROP = [
    "The garden plan tests pass now.",
    "The watering script ran without errors.",
    "The soil notes file was updated successfully.",
    "The beds page renders correctly now.",
    "The garden plan build is green again.",
    "All checks on the watering module are passing.",
]
NEW_NARRATION = "The watering page loads correctly after the fix."
NEW_FACT = "The east beds get mulched with straw every autumn."


@pytest.fixture(scope="module")
def vectors():
    return StoredVectors()


def test_the_fit_is_a_sum_over_the_examples_and_the_same_every_time(vectors):
    examples = Examples(keep=tuple(KEEP), drop=tuple(DROP))
    a, b = fit_taught(examples, vectors), fit_taught(examples, vectors)
    assert np.array_equal(a.alpha, b.alpha) and a.bar == b.bar
    (shift,) = a.shifts([NEW_NARRATION], vectors, top=len(KEEP) + len(DROP))
    # Every example's share, rounded like the total: they add up to it (within the rounding).
    assert abs(sum(by for _, _, by in shift.by) - shift.value) < 0.001 * len(shift.by)
    assert {(side, i) for side, i, _ in shift.by} == {("keep", i) for i in range(len(KEEP))} | {("drop", i) for i in range(len(DROP))}
    # One side alone, or no vectors: no fit (the near-twin rule still applies).
    assert fit_taught(Examples(drop=tuple(DROP)), vectors) is None
    assert fit_taught(Examples(keep=tuple(KEEP), drop=tuple(DROP)), None) is None


def test_drops_move_other_sentences_like_them_not_only_near_twins(vectors):
    examples = Examples(keep=tuple(KEEP), drop=tuple(DROP))
    taught = fit_taught(examples, vectors)
    # The new narration is no near twin of any drop example (the old rule would not touch it) ...
    m = np.asarray(vectors([NEW_NARRATION, *DROP]))
    assert float((m[1:] @ m[0]).max()) < EXAMPLE_BAR
    # ... and the fit drops it, while a new statement of fact stays.
    assert taught_verdicts([NEW_NARRATION, NEW_FACT], taught, vectors) == ["drop", None]
    # No keep example would be dropped by a fit made without it (the bar is set so).
    for i, text in enumerate(KEEP):
        rest = Examples(keep=tuple(k for j, k in enumerate(KEEP) if j != i), drop=tuple(DROP))
        loo = fit_taught(rest, vectors)
        assert loo.shifts([text], vectors)[0].value >= taught.bar


TOPIC_FILE = """\
topic_id: garden
display_name: Vegetable garden
extraction_policy:
  scope_description: Decisions about the vegetable beds, watering and soil.
  required_keywords: [garden, beds, watering, soil, plan]
min_relevance: 0.0
ordering_rule: chronological
state: ACTIVE
examples:
  keep:
{keep}
  drop:
{drop}
"""


def _garden(root: Path) -> Path:
    (root / "runs").mkdir(parents=True)
    (root / "topics").mkdir()
    said = [NEW_NARRATION, NEW_FACT]
    (root / "runs" / "r1.json").write_text(json.dumps({
        "run_id": "r1", "status": "CLOSED",
        "messages": [{"role": "user", "content": "Where do the beds stand?"},
                     {"role": "assistant", "content": " ".join(said)}],
    }), encoding="utf-8")
    (root / "topics" / "garden.yaml").write_text(TOPIC_FILE.format(
        keep="\n".join(f"    - {json.dumps(k)}" for k in KEEP), drop="\n".join(f"    - {json.dumps(d)}" for d in DROP),
    ), encoding="utf-8")
    return root


def _sync(capsys, root: Path, db: Path):
    return run_json(capsys, "--db", str(db), "sync", "--runs-dir", str(root / "runs"), "--topics-dir", str(root / "topics"), "--no-recall")


@pytest.mark.slow
def test_v6_drops_what_the_examples_pull_down_and_explains_it_the_same_in_a_fresh_vault(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NEXUS_EMBEDDED_EXTRACTOR", "embedded-v6")
    root = _garden(tmp_path / "g")
    first, again = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    (r,) = _sync(capsys, root, first)
    bricks = run_json(capsys, "--db", str(first), "bricks", "garden")
    assert [b["content"] for b in bricks] == [NEW_FACT]
    # The same topic files in a fresh vault: the same bricks and manifest.
    (r2,) = _sync(capsys, root, again)
    assert r2["manifest_hash"] == r["manifest_hash"]
    # explain: the kept brick with its shift and the examples that moved it most; the dropped
    # sentence with the reason, naming an example.
    brick = run_json(capsys, "--db", str(first), "explain", bricks[0]["brick_id"])
    assert brick["extractor"] == "embedded-v6" and brick["taught"]["shift"] >= brick["taught"]["bar"]
    assert brick["taught"]["moved_by"] and {m["example"] for m in brick["taught"]["moved_by"]} <= {"keep", "drop"}
    run = run_json(capsys, "--db", str(first), "explain", "--run", "r1")
    (topic,) = run["topics"]
    (dropped,) = [s for s in topic["sentences"] if s["text"] == NEW_NARRATION]
    assert dropped["reason"].startswith("taught: the topic's examples move it") and "example" in dropped["reason"]


@pytest.mark.slow
def test_examples_that_are_not_strings_are_one_error_naming_the_file_and_nothing_changes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NEXUS_EMBEDDED_EXTRACTOR", "embedded-v6")
    root = _garden(tmp_path / "g")
    db = tmp_path / "v.duckdb"
    (r,) = _sync(capsys, root, db)
    path = root / "topics" / "garden.yaml"
    path.write_text(path.read_text().replace(f"    - {json.dumps(DROP[0])}", "    - 42"), encoding="utf-8")
    code, out, err = run_cli(capsys, "--db", str(db), "sync", "--runs-dir", str(root / "runs"), "--topics-dir",
                             str(root / "topics"), "--no-recall")
    assert code == 2 and "garden.yaml" in err, err
    assert run_json(capsys, "--db", str(db), "manifest", "garden")["manifest_hash"] == r["manifest_hash"]


@pytest.mark.slow
def test_v6_never_keeps_the_assistants_narration_but_keeps_the_persons_plan(tmp_path, capsys, monkeypatch):
    """"The agent's narration never" (issue 62 item 1): v3 keeps "I'll update the garden plan now."
    when it holds a keyword; v6 does not, and keeps the person's own "I'll …" (a plan)."""
    root = tmp_path / "n"
    (root / "runs").mkdir(parents=True)
    (root / "topics").mkdir()
    (root / "runs" / "r1.json").write_text(json.dumps({
        "run_id": "r1", "status": "CLOSED",
        "messages": [{"role": "user", "content": "I'll water the garden beds at six every morning."},
                     {"role": "assistant", "content": "I'll update the garden plan with the watering time now."}],
    }), encoding="utf-8")
    (root / "topics" / "garden.yaml").write_text(TOPIC_FILE.split("examples:")[0], encoding="utf-8")
    kept = {}
    for version in ("embedded-v3", "embedded-v6"):
        monkeypatch.setenv("NEXUS_EMBEDDED_EXTRACTOR", version)
        db = tmp_path / f"{version}.duckdb"
        _sync(capsys, root, db)
        kept[version] = [b["content"] for b in run_json(capsys, "--db", str(db), "bricks", "garden")]
    assert kept["embedded-v3"] == ["I'll water the garden beds at six every morning.", "I'll update the garden plan with the watering time now."]
    assert kept["embedded-v6"] == ["I'll water the garden beds at six every morning."]
    run = run_json(capsys, "--db", str(tmp_path / "embedded-v6.duckdb"), "explain", "--run", "r1")
    (said,) = [s for s in run["topics"][0]["sentences"] if s["text"].startswith("I'll update")]
    assert said["reason"] == "form: the assistant narrating its work (never a note)"


def test_a_missing_or_corrupt_weights_file_is_one_error_naming_it_before_any_answer(tmp_path, monkeypatch):
    """v6 standardises the form features with the shipped selector's weights: without them it
    refuses when it is built (before any answer is made, so nothing in the vault changes)."""
    from nexus_assets.extract.backends import embedded_extractor
    from nexus_assets.extract.selector import model
    from nexus_assets.extract.selector.model import SelectorWeightsError

    bad = tmp_path / "weights.npz"
    bad.write_bytes(b"not a weights file")
    monkeypatch.setattr(model, "WEIGHTS", bad)
    model._load.cache_clear()
    try:
        with pytest.raises(SelectorWeightsError, match=f"selector weights {bad}"):
            embedded_extractor("embedded-v6")
    finally:
        model._load.cache_clear()
