"""`nexus trace` of a brick said in many long messages stays one screen (issue 40): per source the
file, the conversation's title and date and a window around the quoted span; the first 3 sources
and a count of the rest; `--full` for every source and whole messages. The real command, in a child
process, from the project folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nexus_assets.cli.read import TRACE_WIDTH
from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.project import Project, nexus_run

TOPIC = "marathon"
SENTENCE = "The long run stays at an easy pace, never faster than the marathon goal pace."
# A long message around the sentence, as assistants write them: the trace must not print it whole.
BEFORE = " ".join(f"Week {n}: three easy runs, one tempo run and a rest day before the weekend." for n in range(1, 13))
AFTER = " ".join(f"Note {n}: sleep well, eat enough and keep the shoes for race day." for n in range(1, 13))


@pytest.fixture(scope="module")
def ten_sources(tmp_path_factory) -> tuple[Project, dict]:
    p = Project(tmp_path_factory.mktemp("trace") / "proj")
    p.write_topic(TOPIC, keywords=["marathon"])
    for i in range(10):
        run = nexus_run(f"run-{i}", [("assistant", f"{BEFORE}\n\n{SENTENCE}\n\n{AFTER} End of plan {i}.")], start=f"2026-03-{i + 1:02d}T08:00:00Z")
        p.write_run(f"plans/plan-{i}.json", run | {"title": f"Marathon plan #{i}"})
    done = run_nexus(*p.sync_args(), env={"NEXUS_NO_RECALL": "1"}, cwd=p.root)
    assert done.returncode == 0, done.stderr[-3000:]
    listed = run_nexus(*p.cli_args(), "bricks", TOPIC, "--json", cwd=p.root)
    (brick,) = [b for b in json.loads(listed.stdout) if b["content"] == SENTENCE]
    assert len(brick["sources"]) == 10
    return p, brick


def trace(p: Project, *argv: str) -> str:
    done = run_nexus(*p.cli_args(), "trace", *argv, cwd=p.root)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_ten_source_trace_shows_three_windows_and_counts_the_rest(ten_sources):
    p, brick = ten_sources
    out = trace(p, brick["brick_id"][:12])
    lines = out.splitlines()
    assert len(lines) <= 40, out
    assert lines[0] == f"brick {brick['brick_id'][:12]}  FORMING  topic {TOPIC}  (10 sources)"
    assert all(len(line) <= TRACE_WIDTH for line in lines), out
    # The first three sources in canonical order, each with its file, conversation and window.
    for n in range(3):
        assert f"{n + 1}. runs/plans/plan-{n}.json" in lines
        assert f"   └─ conversation “Marathon plan #{n}” (2026-03-{n + 1:02d}) · run-{n}" in lines
    assert "4. " not in out and "Marathon plan #3" not in out
    assert lines[-1] == f"… and 7 more sources; `nexus trace {brick['brick_id'][:12]} --full` shows every source, each message whole"
    # A window: the span marked, some words either side, not the whole message.
    flat = " ".join(line.strip(" │") for line in lines)
    assert flat.count("⟦" + SENTENCE + "⟧") == 3
    assert "Week 1:" not in out and "Note 12:" not in out and "End of plan" not in out
    assert out.count("matches the run file now") == 3


def test_full_shows_every_source_and_each_message_whole(ten_sources):
    p, brick = ten_sources
    out = trace(p, brick["brick_id"][:12], "--full")
    for n in range(10):
        assert f"{n + 1}. runs/plans/plan-{n}.json" in out.splitlines()
        assert f"End of plan {n}." in out
    flat = " ".join(line.strip(" │") for line in out.splitlines())
    assert flat.count("⟦" + SENTENCE + "⟧") == 10
    assert "Week 1: three easy runs" in flat and "more sources" not in out


def test_trace_json_keeps_every_source_and_adds_the_file(ten_sources):
    p, brick = ten_sources
    data = json.loads(trace(p, brick["brick_id"], "--json"))
    assert len(data["traces"]) == 10
    assert all(t["quote"] == SENTENCE and t["node_text"].startswith(BEFORE) for t in data["traces"])
    assert [Path(t["source_file"]).name for t in data["traces"]] == [f"plan-{i}.json" for i in range(10)]
