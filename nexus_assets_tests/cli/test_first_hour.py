"""The README's path for a new user (issue 34), run as a shell would: a ChatGPT export zip in
`data/runs/`, a topic file written by hand, then `nexus sync`, `nexus bricks`, `nexus recall`,
`nexus ask` and `nexus serve` from the project folder with no flags, up to a cited answer.

The export is generated (`generated_export.py`); its conversations get titles, as real ones have,
and its sourdough conversations say real-looking things (the README shows their bricks).
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

import duckdb
import pytest

from nexus_assets_tests import servers
from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.generated_export import generate_export
from nexus_assets_tests.project import sample_project
from nexus_assets_tests.readme_examples import mismatches

# The topic file exactly as the README's "Bring your own export" writes it.
TOPIC_FILE = """\
topic_id: sourdough
display_name: Sourdough baking
extraction_policy:
  scope_description: How we keep the starter and bake the bread.
  required_keywords: [sourdough, starter, dough]
state: ACTIVE
"""


@pytest.fixture(scope="module")
def first_hour(tmp_path_factory) -> Path:
    return first_hour_folder(tmp_path_factory.mktemp("first-hour"))


# What people ask and are told about sourdough, as a newcomer's own export would say it (the
# README's first-hour examples show these bricks, not the generator's word salad).
SOURDOUGH_QUESTIONS = (
    "How often should I feed my sourdough starter when it lives in the fridge?",
    "My starter smells like nail polish remover. Is it dead?",
    "The dough spread flat in the oven again, what went wrong?",
    "Can I use whole wheat flour to revive a sluggish starter?",
    "How long can the dough proof overnight in the fridge?",
    "What hydration should my first sourdough loaf have?",
)
SOURDOUGH_ANSWERS = (
    "Feed the starter once a week while it lives in the fridge, and twice a day for two days before you bake.",
    "An acetone smell means the starter is hungry, not dead: discard all but 50 g and feed it equal weights of flour and water.",
    "Dough that spreads flat was usually overproofed, so end the bulk ferment an hour earlier next time.",
    "Whole wheat or rye flour wakes a sluggish starter faster because it carries more wild yeast.",
    "A cold retard of 12 to 16 hours at 4 °C gives the dough more sour flavour and makes it easier to score.",
    "Start your first sourdough loaf at 70% hydration; wetter dough is much harder to shape.",
    "Keep the starter at 24 to 26 °C and it peaks about four to six hours after a feed.",
    "Bake the dough in a preheated Dutch oven at 250 °C, with the lid on for the first 20 minutes.",
)


def _real_looking_sourdough(conversation: dict, n: int) -> None:
    """The generated sourdough conversation `conversation` (the n-th) says real-looking things,
    keeping the assistant's boilerplate sentences (what the selector must leave out)."""
    turns = [node["message"] for node in conversation["mapping"].values() if node["message"] is not None]
    for i, message in enumerate(turns):
        k = n * 3 + i // 2
        if message["author"]["role"] == "user":
            message["content"]["parts"] = [SOURDOUGH_QUESTIONS[k % len(SOURDOUGH_QUESTIONS)]]
        else:
            boilerplate = message["content"]["parts"][0].split(". ")[-3:]  # the generator puts it last
            # The answer to the question just asked (answers 0-5 answer questions 0-5), and a tip.
            said = [SOURDOUGH_ANSWERS[k % len(SOURDOUGH_QUESTIONS)], SOURDOUGH_ANSWERS[len(SOURDOUGH_QUESTIONS) + k % 2]]
            message["content"]["parts"] = [" ".join(said + [". ".join(boilerplate)])]


def first_hour_folder(root: Path) -> Path:
    """A fresh project folder holding only the user's export and topic, synced by `nexus sync`."""
    made = generate_export(root / "scratch", per_theme=6, one_off_questions=10, themes=None)
    conversations = json.loads(made.path.read_text(encoding="utf-8"))
    sourdough = 0
    for i, c in enumerate(conversations):
        theme = made.subject_of[c["id"]] or "question"
        c["title"] = f"{theme.title()} notes #{i}"
        if theme == "sourdough":
            _real_looking_sourdough(c, sourdough)
            sourdough += 1
    (root / "data" / "runs" / "chatgpt").mkdir(parents=True)
    with zipfile.ZipFile(root / "data" / "runs" / "chatgpt" / "chatgpt-export.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("conversations.json", json.dumps(conversations))
        z.writestr("user.json", "{}")  # the side files of a real export are skipped
    (root / "data" / "topics").mkdir()
    (root / "data" / "topics" / "sourdough.yaml").write_text(TOPIC_FILE, encoding="utf-8")
    done = run_nexus("sync", cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def nexus(root: Path, *argv: str, expect: int = 0, env: dict | None = None) -> str:
    done = run_nexus(*argv, cwd=root, env=env)
    assert done.returncode == expect, done.stderr[-3000:]
    return done.stdout


def test_from_an_export_zip_to_a_cited_answer(first_hour: Path):
    root = first_hour
    topics = json.loads(nexus(root, "topics", "--json"))
    (topic,) = topics
    assert topic["topic_id"] == "sourdough" and topic["visible_bricks"] > 0

    # Bricks name the conversation they came from by its title and date, not its UUID alone.
    listing = nexus(root, "bricks", "sourdough")
    assert re.search(r"— “Sourdough notes #\d+” \(\d{4}-\d{2}-\d{2}\)", listing), listing[:500]
    bricks = json.loads(nexus(root, "bricks", "sourdough", "--json"))
    assert all(s["run_title"].startswith("Sourdough notes") and s["run_date"] for b in bricks for s in b["sources"])
    assert not [b for b in bricks if b["content"].endswith("?")], "questions are not bricks"

    question = "how do I keep the sourdough starter"
    recalled = json.loads(nexus(root, "recall", question, "--json"))
    assert recalled["results"] and all(r["run_title"] for r in recalled["results"])
    text = nexus(root, "recall", question)
    assert text.startswith("from “Sourdough notes #")

    answer = nexus(root, "ask", question)
    cited = re.findall(r"\[([0-9a-f]{12})\]", answer.split("\n\n")[0])
    assert cited, answer
    assert "offline-extractive" in answer and "CCC 1.00" in answer
    for brick_id in cited:
        assert re.search(rf"\[{brick_id}\] “Sourdough notes #\d+” \(\d{{4}}-\d{{2}}-\d{{2}}\) · ", answer), answer
    data = json.loads(nexus(root, "ask", question, "--json"))
    assert data["refused"] is False and all(s["run_title"] for s in data["sources"])


def test_nexus_serve_answers_recall_warm_from_one_process(first_hour: Path):
    """The viewer is the warm path: its process keeps the model and the index between questions.
    (How fast is measured in benchmarks/bench_default_sync.py, never asserted here.)"""
    with servers.running(
        servers.nexus("--db", str(first_hour / "data" / "nexus.duckdb"), "serve", "--port", "0"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as proc:
        line = servers.read_line(proc.stdout, timeout_s=60)
        url = line.split("on ", 1)[1].split()[0]
        for question in ("keep the starter warm", "how long to proof the dough"):
            with urllib.request.urlopen(f"{url}?recall={urllib.parse.quote(question)}", timeout=120) as resp:
                page = resp.read().decode("utf-8")
            assert 'class="brick recalled"' in page and "from “Sourdough notes #" in page


def test_bricks_full_shows_each_text_whole_and_wrapped(first_hour: Path):
    bricks = json.loads(nexus(root := first_hour, "bricks", "sourdough", "--json"))
    full = nexus(root, "bricks", "sourdough", "--full")
    longest = max(bricks, key=lambda b: len(b["content"]))
    assert " ".join(full.split()).count(" ".join(longest["content"].split())) >= 1, "nothing is cut"
    assert "…" not in full
    assert all(len(line) <= 120 for line in full.splitlines() if not line.lstrip().startswith("from "))
    assert f"from “{longest['sources'][0]['run_title']}”" in full


def test_plan_without_a_model_plans_for_a_stated_default(first_hour: Path):
    done = run_nexus("plan", cwd=first_hour, env={"NEXUS_LLM_MODEL": ""})
    assert done.returncode == 0, done.stderr
    assert "gpt-4o-mini (a default: NEXUS_LLM_MODEL is not set" in done.stdout
    data = json.loads(nexus(first_hour, "plan", "--json", env={"NEXUS_LLM_MODEL": ""}))
    assert data["model"] == "gpt-4o-mini" and data["model_is_default"] is True
    named = json.loads(nexus(first_hour, "plan", "--json", env={"NEXUS_LLM_MODEL": "llama3.1:8b"}))
    assert named["model"] == "llama3.1:8b" and named["model_is_default"] is False


def test_parquet_export_goes_beside_the_vault_and_says_where(first_hour: Path, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    db = first_hour / "data" / "nexus.duckdb"
    done = run_nexus("--db", str(db), "export", "sourdough", "--format", "parquet", cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    out = first_hour / "data" / "exports" / "sourdough.parquet"
    assert out.is_file() and str(out) in done.stderr
    assert list(elsewhere.iterdir()) == [], "nothing written where the command ran"
    rows = duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchone()[0]
    assert rows == len(json.loads(nexus(first_hour, "bricks", "sourdough", "--json")))


def test_verify_reports_drift_once_per_conversation(tmp_path: Path):
    p = sample_project(tmp_path / "sample")
    assert run_nexus(*p.sync_args(), "--no-recall").returncode == 0
    path = p.runs / "nexus" / "2026-10-09-vault-design.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    for message in doc["messages"]:
        message["content"] = "Edited. " + message["content"]
    path.write_text(json.dumps(doc), encoding="utf-8")
    done = run_nexus(*p.cli_args(), "verify")
    assert done.returncode == 1
    drift_lines = [line for line in done.stdout.splitlines() if line.startswith("DRIFT")]
    assert drift_lines == [drift_lines[0]] and drift_lines[0].startswith("DRIFT run-2026-10-09-vault-design (2026-10-09): ")
    assert "in 3 messages" in drift_lines[0] and "nexus-server-sync, storage-decisions" in drift_lines[0]
    data = json.loads(run_nexus(*p.cli_args(), "verify", "--json").stdout)
    (run,) = data["drift_by_run"]
    assert run["run_id"] == "run-2026-10-09-vault-design" and run["sources"] == len(data["drift"]) > 3


def test_the_readmes_first_hour_examples_are_what_the_commands_print(first_hour: Path):
    problems = mismatches("first-hour", first_hour)
    assert not problems, "\n\n".join(problems)
