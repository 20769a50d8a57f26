"""The README's examples on the sample data are what the commands print (issue 40): each block
marked `<!-- example: sample -->` is run, command by command, on the shipped sample data synced in
a folder of its own, and compared line for line (see `readme_examples.py`, which also rewrites
them). The first-hour examples are checked in `test_first_hour.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus_assets_tests.readme_examples import blocks, mismatches, sample_folder


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    return sample_folder(tmp_path_factory.mktemp("readme") / "sample")


def test_the_readme_shows_trace_recall_and_search_on_the_sample_data():
    shown = {c.argv[0] for b in blocks("sample") for c in b.commands}
    assert {"trace", "recall", "search"} <= shown
    assert blocks("first-hour"), "the first hour's examples are marked too"


def test_the_readmes_sample_examples_are_what_the_commands_print(sample: Path):
    problems = mismatches("sample", sample)
    assert not problems, "\n\n".join(problems)


def test_the_dagster_tour_names_every_asset_group_in_order():
    """The tour's group count and list are the code location's own (`defs/`), not a memory of them."""
    import re

    from nexus_assets.definitions import defs
    from nexus_assets_tests.project import REPO

    graph = defs.get_repository_def().asset_graph
    groups = {graph.get(k).group_name for k in graph.get_all_asset_keys()}
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    text = " ".join((REPO / "docs" / "dagster-ui.md").read_text(encoding="utf-8").split())
    m = re.search(r"the (\w+) groups run left to right, ([a-z_ →]+)\.", text)
    assert m, "the tour says how many groups the lineage shows"
    listed = [g.strip() for g in m.group(2).split("→")]
    assert m.group(1) == words[len(groups)] and set(listed) == groups and len(listed) == len(groups)
    assert "Join the Dagster community" in text, "the tour mentions the first-run dialog"
    assert "dagster dev -m nexus_assets.definitions" in text, "and how to open your own vault in the UI"
