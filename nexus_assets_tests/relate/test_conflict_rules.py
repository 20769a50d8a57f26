"""Conflicts a person agrees with (issue 40 item 3, docs/conflicts.md): a pair is flagged only when both
texts state a different value for the same thing. The shapes below are those a user judged on a
real export (re-written here): section titles, possessives and plurals, numbered plan steps and
agreeing sentences are no conflict; one step of a plan given two values is.

The figures on real related pairs are in benchmarks/selection/README.md."""

from __future__ import annotations

import pytest

from nexus_assets.relate.rules import conflict_between, line_of, states_no_value

NO_CONFLICT = [
    # Plan steps of different weeks or dates: each names a place in the plan.
    ("Week 3 (June 18): 8 miles", "Week 7 (July 16): 12 miles"),
    ("July 9th: 15 miles (recovery week)", "July 30th: 16 miles (recovery week)"),
    ("Step 1: install the package.", "Step 2: configure the package."),
    # Agreeing sentences, one of them a plan step.
    ("I am now running the New Forest marathon on September 10th also.", "Week 15 (September 10): Run the New Forest Marathon"),
    # Possessives and plurals are one value.
    ("The Pure Gardening Company's lawn service runs weekly.", "The Pure Gardening Company lawn services run weekly."),
    # Titles, subject lines and headings state no value.
    ('Title: "The Pure Gardening Company Difference"', 'Title: "Pure Gardening Company Family Care Plan"'),
    ("Subject: Important Update on Pricing Changes", "Subject: Purchase Order Query for Gardening Services"),
    ("The Pure Gardening Company Difference", "The Pure Gardening Company Promise"),
    ("Customising Oscar — django-oscar 3.2 documentation (django-oscar.readthedocs.io)",
     "Oscar Core Apps explained — django-oscar 3.2 documentation (django-oscar.readthedocs.io)"),
    # Two items of a list under different headers are two things.
    ("**Set the Correct User**: Ensure the user running Django can write to the database file.",
     "**Check File Permissions**: Ensure the SQLite file is writable by the Django user."),
    # The same value said twice, with more detail on one side.
    ("Regarding the monthly payroll, keeping it at £1,000 sounds like a good plan.",
     "I can continue to run your monthly payroll at £1,000 or reduce it in a month you do not need it."),
]

# What a new user's `nexus conflicts` flagged on coding-agent sessions and chat exports (issue 49
# item 6, re-written here): none is a disagreement a person would call one.
NOT_STATEMENTS = [
    # A distance and a name share no slot: "identifier: 1-mile ≠ resonance".
    ("Warm up with a 1-mile easy jog before the intervals.", "Warm up with Resonance breathing before the intervals."),
    ("Start each session with a 1-mile warm-up at easy pace.", "Start each session with Resonance breathing at easy pace."),
    # Two `ls -l` lines: their timestamps are the files', not a value anyone stated.
    ("drwxr-xr-x  5 ana  staff   160 Nov 12 14:03 components", "drwxr-xr-x  5 ana  staff   160 Nov 12 14:07 components"),
    ("-rw-r--r--  1 ana  staff  2048 Mar  3 10:02 sync.py", "-rw-r--r--  1 ana  staff  2048 Mar  3 10:05 sync.py"),
    # Code lines, a file shown with line numbers, a test run in colour, a traceback.
    ("const MAX_RETRIES = 3;", "const MAX_RETRIES = 5;"),
    ("retries: int = 3", "retries: int = 5"),
    ("74→- **useTodos**: keeps the list in localStorage under `todos-v1`", "74→- **useTodos**: keeps the list in localStorage under `todos-v2`"),
    ("\x1b[32m12 passed\x1b[0m in 0.51s", "\x1b[31m1 failed\x1b[0m, 11 passed in 0.62s"),
    ('File "/app/sync.py", line 42, in run', 'File "/app/sync.py", line 57, in run'),
    # One name written inside the other is one name (a Codex session's plan, re-written).
    ("`board.js`: DOM: board rendering (highlights/drag), controls and status",
     "`board.js`: All DOM work — board rendering/highlights/drag, controls and status"),
    # The assistant narrating its work.
    ("I'll set the sync timeout to 30 seconds.", "I'll set the sync timeout to 60 seconds."),
    ("Now update the config so the sync timeout is 30 seconds.", "Now update the config so the sync timeout is 60 seconds."),
]

# What a new user's `nexus conflicts` flagged on coding-agent sessions and chat exports (issue 49
# item 6, re-written here): none is a disagreement a person would call one.
NOT_STATEMENTS = [
    # A distance and a name share no slot: "identifier: 1-mile ≠ resonance".
    ("Warm up with a 1-mile easy jog before the intervals.", "Warm up with Resonance breathing before the intervals."),
    ("Start each session with a 1-mile warm-up at easy pace.", "Start each session with Resonance breathing at easy pace."),
    # Two `ls -l` lines: their timestamps are the files', not a value anyone stated.
    ("drwxr-xr-x  5 ana  staff   160 Nov 12 14:03 components", "drwxr-xr-x  5 ana  staff   160 Nov 12 14:07 components"),
    ("-rw-r--r--  1 ana  staff  2048 Mar  3 10:02 sync.py", "-rw-r--r--  1 ana  staff  2048 Mar  3 10:05 sync.py"),
    # Code lines, a file shown with line numbers, a test run in colour, a traceback.
    ("const MAX_RETRIES = 3;", "const MAX_RETRIES = 5;"),
    ("retries: int = 3", "retries: int = 5"),
    ("74→- **useTodos**: keeps the list in localStorage under `todos-v1`", "74→- **useTodos**: keeps the list in localStorage under `todos-v2`"),
    ("\x1b[32m12 passed\x1b[0m in 0.51s", "\x1b[31m1 failed\x1b[0m, 11 passed in 0.62s"),
    ('File "/app/sync.py", line 42, in run', 'File "/app/sync.py", line 57, in run'),
    # One name written inside the other is one name (a Codex session's plan, re-written).
    ("`board.js`: DOM: board rendering (highlights/drag), controls and status",
     "`board.js`: All DOM work — board rendering/highlights/drag, controls and status"),
    # The assistant narrating its work.
    ("I'll set the sync timeout to 30 seconds.", "I'll set the sync timeout to 60 seconds."),
    ("Now update the config so the sync timeout is 30 seconds.", "Now update the config so the sync timeout is 60 seconds."),
]

CONFLICT = [
    # One step of the plan, two values: the pairs a person called real.
    ("Week 11 (August 13): 16 miles", "Week 11 (August 13): 15 miles"),
    ("October 22nd: 10 miles (taper week)", "October 22nd: 12 miles (taper week)"),
    ("August 20th: 20 miles (recovery week)", "August 20th: 10 miles (recovery week)"),
    ("Week 18 (October 1): 18 miles", "Week 18 (October 1): 22 miles"),
    # Plain sentences still conflict on values, times and yes/no.
    ("The nightly sync runs at 03:00 UTC.", "The nightly sync runs at 05:00 UTC."),
    ("The marathon is on the 29th of October.", "The marathon is on the 22nd of October."),
    ("Sealing is allowed while runs are open.", "Sealing is not allowed while runs are open."),
    # Names in the same place of two alike sentences; a person's constraint against its reverse.
    ("Use Parquet for the nightly exports.", "Use CSV for the nightly exports."),
    ("The API server runs on Python 3.11 in production.", "The API server runs on Python 3.12 in production."),
    ("Keep the retry count at three, not five.", "Keep the retry count at five."),
]


@pytest.mark.parametrize("a,b", NO_CONFLICT)
def test_no_conflict(a, b):
    assert conflict_between(a, b) is None
    assert conflict_between(b, a) is None


@pytest.mark.parametrize("a,b", NOT_STATEMENTS)
def test_tool_output_code_and_narration_never_conflict(a, b):
    assert conflict_between(a, b) is None
    assert conflict_between(b, a) is None


@pytest.mark.parametrize("a,b", CONFLICT)
def test_conflict(a, b):
    assert conflict_between(a, b) is not None
    assert conflict_between(b, a) is not None


def test_same_step_conflict_names_the_values():
    assert conflict_between("Week 11 (August 13): 16 miles", "Week 11 (August 13): 15 miles") == "number: 16 ≠ 15"


def test_a_line_is_read_as_its_label_and_value():
    step = line_of("**Week 11 (August 13)**: 16 miles")
    assert (step.kind, step.label, step.value) == ("step", "week 11 august 13", "16 miles")
    assert line_of("Subject: Pricing").kind == "field"
    assert line_of("**Cloud SQL**: Cloud SQL is managed.").kind == "item"
    # A colon inside a time or a URL is not a label.
    assert line_of("The nightly sync runs at 03:00 UTC.").kind == "plain"
    assert line_of("The webhook URL is https://hooks.example.com/a1.").kind == "plain"


def test_headings_and_titles_state_no_value():
    assert states_no_value("## Storage decisions")
    assert states_no_value("**Post-marathon recovery**")
    assert states_no_value("Training for the second marathon:")
    assert not states_no_value("The vault is one DuckDB file.")


def test_a_sync_says_so_when_the_open_conflicts_change_not_at_every_sync(tmp_path):
    """Issue 40: an unchanged sync repeated the conflicts warning every time; it is said when the
    set of open conflicts changed (the check still lists them, `nexus conflicts` too)."""
    from nexus_assets_tests.cli_helpers import run_nexus
    from nexus_assets_tests.project import Project, nexus_run
    from nexus_assets_tests.relate.test_relations import SAID_FIRST, SAID_LATER, TOPIC, write_topic

    p = Project(tmp_path / "proj")
    write_topic(p)
    p.write_run("a.json", nexus_run("run-a", [("user", SAID_FIRST)], start="2026-01-01T00:00:00Z"))
    first = run_nexus(*p.sync_args())
    assert first.returncode == 0 and "open_conflicts" not in first.stderr
    p.write_run("b.json", nexus_run("run-b", [("user", SAID_LATER)], start="2026-02-01T00:00:00Z"))
    changed = run_nexus(*p.sync_args())
    assert changed.returncode == 0
    assert f"warning: {TOPIC}: open_conflicts" in changed.stderr
    again = run_nexus(*p.sync_args())
    assert again.returncode == 0 and "open_conflicts" not in again.stderr
    listed = run_nexus(*p.cli_args(), "conflicts", TOPIC, "--json")
    assert len(__import__("json").loads(listed.stdout)) == 1, "the conflict is still open, only not repeated"
