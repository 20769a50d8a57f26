"""embedded-v5 (issue 49 item 3, second attempt): v4's reading with features from the sentence's vector
within its own run, and its own weights. Registered beside v3 and v4, never the default by itself; its
weights file fails loudly and harmlessly; its training is deterministic; a run's answer never depends
on the runs extracted beside it. The figures on real data are `benchmarks/bench_selection.py --lopo`'s."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from nexus_assets.extract.backends import (
    SelectorV5Extractor,
    StoredVectors,
    embedded_extractor,
    newest_selector,
    selector_versions,
)
from nexus_assets.extract.selector.features import SCALARS
from nexus_assets.extract.selector.model import (
    WEIGHTS,
    SelectorWeightsError,
    load_selector,
    load_selector_v5,
)
from nexus_assets.extract.selector.select import read_runs
from nexus_assets.extract.selector.v5 import (
    EXTRA,
    SCALARS_V5,
    WEIGHTS_V5,
    conversation_vectors,
    run_extras,
)
from nexus_assets.ingest.formats.nexus import nexus_run
from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.project import REPO
from nexus_assets_tests.extract.test_selector import (
    GARDEN,
    OFF_TOPIC,
    _project,
    document,
    garden_topic,
)

SELECTION = REPO / "benchmarks" / "selection"


def test_v5_is_registered_beside_v3_and_v4_and_not_the_default():
    assert selector_versions()[:3] == ("embedded-v3", "embedded-v4", "embedded-v5")
    assert newest_selector() == "embedded-v6"  # v3 with teaching that generalises (test_taught.py)
    v5 = embedded_extractor("embedded-v5")
    assert isinstance(v5, SelectorV5Extractor) and v5.identity == "embedded-v5" and v5.legacy_identities == ()
    assert embedded_extractor("embedded-v4").identity == "embedded-v4"


def test_the_shipped_v5_weights_are_small_and_score_one_probability_per_row():
    assert WEIGHTS_V5.stat().st_size <= 5 * 1024 * 1024
    selector = load_selector_v5()
    assert 0.0 < selector.threshold < 1.0 and "embedded-v5" in selector.name
    scores = selector.scores(np.zeros((3, 384)), np.zeros((3, len(SCALARS_V5))))
    assert scores.shape == (3,) and np.all((scores > 0) & (scores < 1))
    assert SCALARS_V5 == (*SCALARS, *EXTRA)


@pytest.mark.parametrize("content", [None, b"not a zip at all", b"PK\x03\x04broken"])
def test_a_missing_or_corrupt_v5_weights_file_is_one_error_naming_it(tmp_path, content):
    path = tmp_path / "weights_v5.npz"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SelectorWeightsError, match=f"selector weights {path}"):
        load_selector_v5(path)
    with pytest.raises(SelectorWeightsError, match=f"selector weights {path}"):
        embedded_extractor("embedded-v5", weights=str(path))


def test_v4_and_v5_weights_are_not_taken_for_each_other():
    with pytest.raises(SelectorWeightsError, match="trained on other features"):
        load_selector_v5(WEIGHTS)
    with pytest.raises(SelectorWeightsError, match="trained on other features"):
        load_selector(WEIGHTS_V5)


def test_run_features_read_only_the_run_itself_and_are_rounded():
    topic = garden_topic()
    runs = [nexus_run(GARDEN), nexus_run(OFF_TOPIC)]
    vectors = StoredVectors()

    def extras(batch):
        readings, vecs = read_runs(topic, batch, vectors, {}, every_candidate=True)
        conv = conversation_vectors(batch, readings, {}, vectors)
        garden = next(r for r in readings if r.run_id == "run-garden")
        return {(c.json_path, c.start): v for c, v in ((c, run_extras(garden, vecs, conv[garden.run_id]).get(id(c))) for c in garden.candidates) if v}

    alone, beside = extras(runs[:1]), extras(runs)
    assert alone and alone == beside
    for row in alone.values():
        assert len(row) == len(EXTRA) and row == [round(x, 3) for x in row]
    named = {k: dict(zip(EXTRA, v)) for k, v in alone.items()}
    assert all(-1.0 <= f["restated_before"] <= 1.0 and f["candidates_log"] > 0 for f in named.values())


def test_v5_answers_are_the_same_whatever_the_batch():
    topic = garden_topic()
    runs = [nexus_run(GARDEN), nexus_run(OFF_TOPIC)]
    together = embedded_extractor("embedded-v5").extract_runs(topic, runs)
    apart = {r.run_id: embedded_extractor("embedded-v5").extract_runs(topic, [r])[r.run_id] for r in reversed(runs)}
    assert {k: json.dumps(v.pointers) for k, v in together.items()} == {k: json.dumps(v.pointers) for k, v in apart.items()}
    assert not together["run-tax"].pointers  # the conversation scope keeps the off-topic run out


def _synthetic_rows(n: int = 240, seed: int = 7):
    """A small slice shaped like the corpus (the raw corpus is not in the repository)."""
    sys.path.insert(0, str(SELECTION))
    from dataset import Row

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        v = rng.normal(size=384)
        scalars = list(np.round(rng.normal(size=len(SCALARS)), 3))
        extra = list(np.round(rng.normal(size=len(EXTRA)), 3))
        keep = bool(scalars[0] + extra[0] + rng.normal() > 1.0)
        row = Row(f"person-{i % 3}", "chat", "t", f"run-{i}", "$", 0, 1, keep, "assistant_message", found=True)
        row.vector, row.scalars, row.scalars_v5 = (v / np.linalg.norm(v)).astype("float32"), scalars, [*scalars, *extra]
        rows.append(row)
    return rows


def test_training_v5_on_a_small_slice_is_deterministic_and_its_file_loads(tmp_path):
    sys.path.insert(0, str(SELECTION))
    import train_selector as ts

    features, names, _, name = ts.VERSIONS["embedded-v5"]
    outs = []
    for k in range(2):
        rows = _synthetic_rows()
        model = ts.fit(ts.trainable(rows), features=features)
        bar = ts.choose_threshold(rows, features)
        out = tmp_path / f"w{k}.npz"
        ts.export(model, bar, out, names, name)
        outs.append(out)
    assert outs[0].read_bytes() == outs[1].read_bytes()
    selector = load_selector_v5(outs[0])
    rows = _synthetic_rows()
    v, s, _ = ts.matrices(rows, features)
    assert np.allclose(selector.scores(v, s), ts.scores(model, rows, features))


def test_a_corrupt_v5_weights_file_fails_the_sync_with_one_line_and_changes_nothing(empty_project, tmp_path):
    v5 = {"NEXUS_EMBEDDED_EXTRACTOR": "embedded-v5"}
    _project(empty_project, garden_topic())
    assert run_nexus(*empty_project.sync_args(), "--no-recall", env=v5).returncode == 0
    before = run_nexus(*empty_project.cli_args(), "manifest", "garden-business", "--json").stdout
    bad = tmp_path / "weights_v5.npz"
    bad.write_bytes(b"corrupt")
    empty_project.write_run("more.json", document("run-more", ["I charge £40 to trim a hedge in a front garden."], "Hedge prices"))
    failed = run_nexus(*empty_project.sync_args(), "--no-recall", env={**v5, "NEXUS_SELECTOR_WEIGHTS": str(bad)})
    assert failed.returncode != 0
    assert f"selector weights {bad}" in failed.stderr + (failed.stdout or "")
    assert run_nexus(*empty_project.cli_args(), "manifest", "garden-business", "--json").stdout == before


def test_a_topic_that_lowers_its_min_relevance_lowers_the_models_bar():
    from nexus_assets.extract.selector.v5 import topic_bar

    assert topic_bar(0.32, 0.35) == 0.32  # the default: the trained threshold
    assert topic_bar(0.32, 0.15) == 0.12 and topic_bar(0.32, 0.0) == 0.0 and topic_bar(0.9, 1.0) == 0.99
    runs = [nexus_run(GARDEN)]
    default = embedded_extractor("embedded-v5").extract_runs(garden_topic(), runs)["run-garden"].pointers
    everything = embedded_extractor("embedded-v5").extract_runs(garden_topic(min_relevance=0.0), runs)["run-garden"].pointers
    assert {p["verbatim_quote"] for p in default} <= {p["verbatim_quote"] for p in everything}
    assert len(everything) >= 3  # every sentence the form rules leave (the garden run's three statements)


def test_explain_names_v5_its_score_and_the_topics_bar(empty_project):
    _project(empty_project, garden_topic(min_relevance=0.0))
    assert run_nexus(*empty_project.sync_args(), "--no-recall", env={"NEXUS_EMBEDDED_EXTRACTOR": "embedded-v5"}).returncode == 0
    bricks = json.loads(run_nexus(*empty_project.cli_args(), "bricks", "garden-business", "--json").stdout)
    assert bricks
    explained = json.loads(run_nexus(*empty_project.cli_args(), "explain", bricks[0]["brick_id"], "--json").stdout)
    assert explained["extractor"] == "embedded-v5" and explained["threshold"] == 0.0
    assert explained["decision"]["keep"] is True and explained["decision"]["score"] >= explained["threshold"]
    run = json.loads(run_nexus(*empty_project.cli_args(), "explain", "--run", "run-garden", "--json").stdout)
    assert run["topics"][0]["extractor"] == "embedded-v5" and any(s["keep"] for s in run["topics"][0]["sentences"])
