"""Extraction quality (docs/quality.md): `nexus eval` and the `extraction_quality` check against gold
files whose right answers are worked out by hand below.

The project: topic `vault-notes` (keyword "vault"), two runs. The embedded extractor returns the
sentences that say "vault":
  run-a $['messages'][0]['content'] "The vault is append-only. Nothing is deleted."
        [0:25] "The vault is append-only."   [26:45] "Nothing is deleted."
  run-a $['messages'][1]['content'] "Yes, the vault keeps history. It also keeps checksums."
        [0:29] "Yes, the vault keeps history."   [30:54] "It also keeps checksums."
  run-b $['messages'][0]['content'] "Our vault lives in DuckDB. One writer at a time."
        [0:26] "Our vault lives in DuckDB."   [27:48] "One writer at a time."
so its predictions are A0[0:25], A1[0:29], B0[0:26].
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from nexus_assets.eval.rules import Span, score
from nexus_assets.core.sentences import sentences
from nexus_assets_tests.cli_helpers import run_cli, run_json
from nexus_assets_tests.dagster_helpers import materialize_topic
from nexus_assets_tests.llm_server import (
    DEFAULT_API_KEY,
    DEFAULT_MODEL,
    FakeOpenAIServer,
    request_topics_and_fragment,
)
from nexus_assets_tests.project import Project, nexus_run

TOPIC = "vault-notes"
A0, A1, B0 = "$['messages'][0]['content']", "$['messages'][1]['content']", "$['messages'][0]['content']"
EMBEDDED = [("run-a", A0, 0, 25), ("run-a", A1, 0, 29), ("run-b", B0, 0, 26)]


def write_runs(p: Project) -> None:
    p.write_run("a.json", nexus_run("run-a", [("user", "The vault is append-only. Nothing is deleted."), ("assistant", "Yes, the vault keeps history. It also keeps checksums.")]))
    p.write_run("b.json", nexus_run("run-b", [("user", "Our vault lives in DuckDB. One writer at a time."), ("user", "Unrelated small talk.")]))


def write_topic(p: Project, topic_id: str, quality: dict | None = None) -> None:
    p.topics.mkdir(parents=True, exist_ok=True)
    doc = {
        "topic_id": topic_id,
        "display_name": topic_id.title(),
        "extraction_policy": {"scope_description": "The vault.", "required_keywords": ["vault"]},
        "state": "ACTIVE",
    }
    if quality is not None:
        doc["quality"] = quality
    (p.topics / f"{topic_id}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def gold(path: Path, spans: list, topic_id: str = TOPIC) -> Path:
    """Offset-form lines from (run_id, path, start, end) tuples; dicts are written as they are."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        s if isinstance(s, dict) else {"topic_id": topic_id, "run_id": s[0], "json_path": s[1], "start": s[2], "end": s[3]}
        for s in spans
    ]
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def synced(empty_project: Project, capsys) -> Project:
    p = empty_project
    write_runs(p)
    write_topic(p, TOPIC)
    run_json(capsys, *p.sync_args(TOPIC))
    return p


def evaluate(p: Project, capsys, gold_file: Path, *extra: str, expect: int = 0):
    return run_json(capsys, *p.cli_args(), "eval", TOPIC, "--gold", str(gold_file), *extra, expect=expect)


def addr(s: tuple) -> dict:
    return {"run_id": s[0], "json_path": s[1], "start": s[2], "end": s[3]}


def test_a_perfect_match_scores_one(synced: Project, capsys, tmp_path):
    r = evaluate(synced, capsys, gold(tmp_path / "g.jsonl", EMBEDDED))
    for name in ("exact_precision", "exact_recall", "exact_f1", "overlap_precision", "overlap_recall", "overlap_f1"):
        assert r[name] == 1.0, name
    assert (r["predicted"], r["gold"], r["exact_matches"]) == (3, 3, 3)
    assert r["misses"] == [] and r["false_positives"] == []
    assert r["acceptance_rate"] == 1.0 and (r["accepted_pointers"], r["rejected_pointers"]) == (3, 0)
    assert [(x["run_id"], x["exact_f1"]) for x in r["per_run"]] == [("run-a", 1.0), ("run-b", 1.0)]


def test_a_missed_span_lowers_recall_and_is_listed(synced: Project, capsys, tmp_path):
    missed = ("run-a", A0, 26, 45)  # "Nothing is deleted." has no keyword
    r = evaluate(synced, capsys, gold(tmp_path / "g.jsonl", [*EMBEDDED, missed]))
    assert (r["exact_precision"], r["exact_recall"]) == (1.0, 0.75)
    assert r["exact_f1"] == pytest.approx(2 * 0.75 / 1.75)  # 0.857…
    assert r["misses"] == [addr(missed)] and r["false_positives"] == []
    per_run = {x["run_id"]: x for x in r["per_run"]}
    assert (per_run["run-a"]["exact_precision"], per_run["run-a"]["exact_recall"]) == (1.0, pytest.approx(2 / 3))
    assert (per_run["run-b"]["exact_precision"], per_run["run-b"]["exact_recall"]) == (1.0, 1.0)


def test_a_false_positive_lowers_precision_and_is_listed(synced: Project, capsys, tmp_path):
    r = evaluate(synced, capsys, gold(tmp_path / "g.jsonl", EMBEDDED[:2]))
    assert (r["exact_precision"], r["exact_recall"]) == (pytest.approx(2 / 3), 1.0)
    assert r["exact_f1"] == pytest.approx(0.8)
    assert r["false_positives"] == [addr(EMBEDDED[2])] and r["misses"] == []
    run_b = next(x for x in r["per_run"] if x["run_id"] == "run-b")
    # A run with predictions but no gold: every prediction is wrong, nothing was missed.
    assert (run_b["predicted"], run_b["gold"], run_b["exact_precision"], run_b["exact_recall"]) == (1, 0, 0.0, 1.0)


def test_an_overlap_of_half_the_shorter_span_counts_and_less_does_not(synced: Project, capsys, tmp_path):
    counts = ("run-a", A0, 4, 25)  # "vault is append-only." inside [0:25]: shares all 21 of its 21 characters
    does_not = ("run-a", A1, 20, 40)  # shares [20:29] with [0:29]: 9 characters, under half of 20
    r = evaluate(synced, capsys, gold(tmp_path / "g.jsonl", [counts, does_not, EMBEDDED[2]]))
    assert (r["exact_matches"], r["exact_precision"], r["exact_recall"]) == (1, pytest.approx(1 / 3), pytest.approx(1 / 3))
    assert (r["overlap_precision"], r["overlap_recall"]) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    assert r["overlap_misses"] == [addr(does_not)]
    assert r["overlap_false_positives"] == [addr(EMBEDDED[1])]
    assert r["misses"] == [addr(counts), addr(does_not)]  # exact misses list both


def test_the_overlap_rule_at_its_boundary():
    a = Span("r", "$", 0, 10)
    assert a.overlaps(Span("r", "$", 5, 15))  # 5 shared = half of 10
    assert not a.overlaps(Span("r", "$", 6, 16))  # 4 shared
    assert a.overlaps(Span("r", "$", 2, 4))  # a short span inside a long one
    assert not a.overlaps(Span("r", "$['x']", 0, 10)) and not a.overlaps(Span("s", "$", 0, 10))  # other node
    assert not a.overlaps(Span("r", "$", 10, 20))  # touching is not sharing
    empty = score([], [])
    assert (empty.overall.exact_precision, empty.overall.exact_recall, empty.overall.exact_f1) == (1.0, 1.0, 1.0)
    nothing_found = score([], [a])
    assert (nothing_found.overall.exact_precision, nothing_found.overall.exact_recall) == (0.0, 0.0)


def test_quote_lines_resolve_like_the_gate_first_occurrence_any_path_syntax(synced: Project, capsys, tmp_path):
    lines = [
        {"topic_id": TOPIC, "run_id": "run-a", "json_path": "$.messages[0].content", "quote": "Nothing is deleted."},
        {"topic_id": TOPIC, "run_id": "run-a", "json_path": A1, "quote": "Yes, the vault keeps history."},
        {"run_id": "run-b", "json_path": "$['messages'][0]['content']", "quote": "vault"},  # no topic_id: this topic
        {"topic_id": "another-topic", "run_id": "run-b", "json_path": B0, "quote": "not checked: another topic's line"},
    ]
    r = evaluate(synced, capsys, gold(tmp_path / "g.jsonl", lines))
    assert r["gold"] == 3
    # Resolved to normalized addresses: A0[26:45], A1[0:29] (exact hit), B0[4:9] (first "vault").
    assert r["misses"] == [addr(("run-a", A0, 26, 45)), addr(("run-b", B0, 4, 9))]
    assert r["exact_matches"] == 1
    # B0[4:9] lies inside the predicted B0[0:26]: an overlap hit.
    assert r["overlap_misses"] == [addr(("run-a", A0, 26, 45))]


@pytest.mark.parametrize(
    "bad_line, why",
    [
        ({"topic_id": TOPIC, "run_id": "run-a", "json_path": A0, "quote": "The vault is immutable."}, "is not a verbatim substring"),
        ({"topic_id": TOPIC, "run_id": "run-zz", "json_path": "$.messages[0].content", "quote": "x"}, "run 'run-zz' is not in the vault"),
        ({"topic_id": TOPIC, "run_id": "run-a", "json_path": "$['messages'][7]['content']", "quote": "x"}, "matches no node"),
        ({"topic_id": TOPIC, "run_id": "run-a", "json_path": A0, "start": 10, "end": 99}, "past the end"),
        ({"topic_id": TOPIC, "run_id": "run-a", "json_path": A0, "start": 5, "end": 5}, "0 <= start < end"),
        ({"topic_id": TOPIC, "run_id": "run-a", "json_path": A0}, "either 'quote' or both 'start' and 'end'"),
        ("{not json", "not valid JSON"),
    ],
)
def test_an_unresolvable_gold_line_is_an_error_naming_file_and_line(synced: Project, capsys, tmp_path, bad_line, why):
    path = tmp_path / "g.jsonl"
    gold(path, EMBEDDED[:1])
    with path.open("a", encoding="utf-8") as f:
        f.write("\n" + (bad_line if isinstance(bad_line, str) else json.dumps(bad_line)) + "\n")  # a blank line, then line 3
    code, out, err = run_cli(capsys, *synced.cli_args(), "eval", TOPIC, "--gold", str(path))
    assert code == 2 and out == ""
    assert f"gold file {path}, line 3:" in err and why in err, err


def test_bad_usage_exits_2_and_thresholds_exit_1(synced: Project, capsys, tmp_path):
    g = gold(tmp_path / "g.jsonl", EMBEDDED[:2])  # P 2/3, R 1
    code, _, err = run_cli(capsys, *synced.cli_args(), "eval", "no-such-topic", "--gold", str(g))
    assert code == 2 and "unknown topic 'no-such-topic'" in err
    code, _, err = run_cli(capsys, *synced.cli_args(), "eval", TOPIC, "--gold", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "missing.jsonl not found" in err
    code, _, err = run_cli(capsys, *synced.cli_args(), "eval", TOPIC, "--gold", str(gold(tmp_path / "other.jsonl", EMBEDDED, topic_id="x")))
    assert code == 2 and "no lines for topic 'vault-notes'" in err
    code, _, err = run_cli(capsys, *synced.cli_args(), "eval", TOPIC, "--gold", str(g), "--extractor", "nobody")
    assert code == 2 and "no extractions by 'nobody'" in err and "embedded" in err
    assert evaluate(synced, capsys, g, "--min-precision", "0.6", "--min-recall", "1.0")["exact_precision"] == pytest.approx(2 / 3)
    code, out, _ = run_cli(capsys, *synced.cli_args(), "eval", TOPIC, "--gold", str(g), "--min-precision", "0.7")
    assert code == 1 and "BELOW THRESHOLD" in out


def test_init_gold_writes_every_source_address_and_never_overwrites(synced: Project, capsys, tmp_path):
    path = tmp_path / "gold" / "start.jsonl"
    assert run_json(capsys, *synced.cli_args(), "eval", TOPIC, "--init-gold", str(path)) == {"gold_file": str(path), "lines": 3}
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert [(x["run_id"], x["json_path"], x["start"], x["end"]) for x in lines] == EMBEDDED
    assert [x["text"] for x in lines] == ["The vault is append-only.", "Yes, the vault keeps history.", "Our vault lives in DuckDB."]
    assert evaluate(synced, capsys, path)["exact_f1"] == 1.0
    before = path.read_bytes()
    code, _, err = run_cli(capsys, *synced.cli_args(), "eval", TOPIC, "--init-gold", str(path))
    assert code == 2 and "already exists" in err and path.read_bytes() == before


def last_sentences(body: dict) -> dict:
    """A model that points at each node's last sentence, and paraphrases its first one."""
    (topic_id,), fragment = request_topics_and_fragment(body)
    pointers = []
    for node in fragment["nodes"]:
        said = sentences(node["text"])
        pointers += [
            {"topic_id": topic_id, "json_path": node["json_path"], "verbatim_quote": said[-1]},
            {"topic_id": topic_id, "json_path": node["json_path"], "verbatim_quote": "In short: " + said[0].lower()},
        ]
    return {"extracted_pointers": pointers}


def test_two_extractors_are_scored_on_the_same_gold_from_the_vault_alone(synced: Project, capsys, tmp_path, monkeypatch):
    p = synced
    monkeypatch.setenv("NEXUS_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("OPENAI_API_KEY", DEFAULT_API_KEY)
    with FakeOpenAIServer(handler=last_sentences) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run_json(capsys, *p.sync_args(TOPIC), "--extractor", "openai")
        assert server.request_count == 1  # the two small runs share a request
    # The server is gone: whatever eval reports comes from the vault. The openai extractor found
    # A0[26:45], A1[30:54], B0[27:48] and three paraphrases that the gate rejected.
    g = gold(tmp_path / "g.jsonl", [("run-a", A0, 0, 25), ("run-a", A1, 30, 54), ("run-b", B0, 27, 48)])
    vault_bytes = hashlib.sha256(p.db.read_bytes()).hexdigest()
    results = run_json(capsys, *p.cli_args(), "eval", TOPIC, "--gold", str(g), "--extractors")
    assert hashlib.sha256(p.db.read_bytes()).hexdigest() == vault_bytes, "eval never writes the vault"
    by_name = {r["extractor"]: r for r in results}
    openai_id = next(name for name in by_name if name.startswith("openai:"))
    assert openai_id.startswith(f"openai:{DEFAULT_MODEL}:")
    embedded_id = next(name for name in by_name if name not in ("bricks", openai_id))
    figures = lambda r: (r["predicted"], r["exact_matches"], r["exact_precision"], r["exact_recall"], r["acceptance_rate"])  # noqa: E731
    assert figures(by_name[embedded_id]) == (3, 1, pytest.approx(1 / 3), pytest.approx(1 / 3), 1.0)
    assert figures(by_name[openai_id]) == (3, 2, pytest.approx(2 / 3), pytest.approx(2 / 3), 0.5)
    # The bricks hold what both found (6 addresses) and the stored verdicts of both: 6 of 9 accepted.
    assert figures(by_name["bricks"]) == (6, 3, 0.5, 1.0, pytest.approx(6 / 9))
    one = run_json(capsys, *p.cli_args(), "eval", TOPIC, "--gold", str(g), "--extractor", openai_id)
    assert one == by_name[openai_id]
    assert server.request_count == 1


def test_eval_imports_neither_dagster_nor_the_llm_client(synced: Project, tmp_path):
    g = gold(tmp_path / "g.jsonl", EMBEDDED)
    probe = (
        "import json, sys\nfrom nexus_assets.cli import main\ncode = main(sys.argv[1:])\n"
        "print(json.dumps({'code': code, 'heavy': sorted({m.split('.')[0] for m in sys.modules} & {'dagster', 'openai', 'pandas'})}), file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe, *synced.cli_args(), "eval", TOPIC, "--gold", str(g), "--extractors"],
        capture_output=True, text=True, timeout=120,
    )
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == {"code": 0, "heavy": []}


def test_the_quality_check_fails_below_its_thresholds_and_passes_above_per_topic(empty_project: Project, tmp_path):
    p = empty_project
    write_runs(p)
    # Relative gold paths are read from the topic file's directory.
    write_topic(p, "good", {"gold": "../gold/good.jsonl", "min_precision": 0.8, "min_recall": 0.6})
    write_topic(p, "poor", {"gold": str(p.root / "gold" / "poor.jsonl"), "min_precision": 0.8, "min_recall": 0.6})
    write_topic(p, "plain")
    gold(p.root / "gold" / "good.jsonl", EMBEDDED, topic_id="good")  # P 1, R 1
    # P 1/3, R 1/2: the embedded extractor finds one of these two.
    gold(p.root / "gold" / "poor.jsonl", [EMBEDDED[0], ("run-a", A1, 30, 54)], topic_id="poor")
    instance = dg.DagsterInstance.ephemeral()
    evaluations = {}
    for topic_id in ("good", "poor", "plain"):
        result = materialize_topic(p, topic_id, instance)
        assert result.success
        (evaluations[topic_id],) = [e for e in result.get_asset_check_evaluations() if e.check_name == "extraction_quality"]
    good, poor, plain = evaluations["good"], evaluations["poor"], evaluations["plain"]
    assert good.passed and not poor.passed and plain.passed
    assert {e.asset_key for e in evaluations.values()} == {dg.AssetKey("topic_manifest")}
    assert float(good.metadata["overlap_precision"].value) == 1.0 and float(good.metadata["overlap_recall"].value) == 1.0
    # Figures are text (three decimals), so the UI draws no plot that mixes topics.
    assert isinstance(poor.metadata["overlap_precision"], dg.TextMetadataValue)
    assert float(poor.metadata["overlap_precision"].value) == pytest.approx(1 / 3, abs=1e-3)
    assert float(poor.metadata["overlap_recall"].value) == pytest.approx(1 / 2, abs=1e-3)
    assert float(poor.metadata["min_precision"].value) == 0.8
    assert tuple(int(poor.metadata[k].value) for k in ("gold_spans", "misses", "false_positives")) == (2, 1, 2)
    assert poor.description == "overlap precision 0.333 < 0.8; overlap recall 0.500 < 0.6"
    assert plain.description.startswith("no gold configured")
