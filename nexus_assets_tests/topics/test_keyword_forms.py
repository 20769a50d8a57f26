"""A topic's keyword rule as the vault records it (docs/inputs.md "Keywords", topics/records.py): a
topic first recorded by this release matches its keywords' plurals and possessives; one a vault
compiled before keywords were inflected keeps exact words while its file does not say, with its
stored definition byte for byte as it was, until `nexus sync --reselect` moves it; a file that names
`keyword_forms` is recorded as it says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nexus_assets.core.fingerprint import canonical_json
from nexus_assets.store import Vault
from nexus_assets.topics.files import read_topic_file
from nexus_assets.topics.records import as_recorded

TOPIC = """\
topic_id: sims
display_name: Simulations
extraction_policy:
  scope_description: The simulations we ran.
  required_keywords: [simulation]
state: {state}
{extra}"""


def topic_file(tmp_path: Path, state: str = "ACTIVE", extra: str = ""):
    path = tmp_path / "sims.yaml"
    path.write_text(TOPIC.format(state=state, extra=extra), encoding="utf-8")
    return read_topic_file(path).topic


def stored(v) -> dict:
    return json.loads(v.conn.execute("SELECT definition_json FROM topics WHERE topic_id = 'sims'").fetchone()[0])


def as_an_older_release_stored_it(v, topic) -> str:
    """The row a release before `keyword_forms` wrote: the definition without the field."""
    data = topic.model_dump(mode="json")
    data.pop("keyword_forms", None)
    v.conn.execute("UPDATE topics SET definition_json = ? WHERE topic_id = 'sims'", [canonical_json(data)])
    return canonical_json(data)


@pytest.fixture
def vault(tmp_path: Path):
    with Vault.open(tmp_path / "v.duckdb") as v:
        yield v


def test_a_topic_new_to_the_vault_matches_plurals_and_says_so_in_its_definition(vault, tmp_path):
    recorded = vault.topics.record_topic(topic_file(tmp_path), "sims.yaml")
    assert recorded.keyword_forms == "inflected" and stored(vault)["keyword_forms"] == "inflected"
    assert vault.topics.topic("sims").keyword_pattern().search("two simulations")
    assert not vault.topics.keywords_pinned("sims")


def test_a_topic_compiled_before_inflections_keeps_exact_words_and_its_stored_bytes(vault, tmp_path):
    vault.topics.record_topic(topic_file(tmp_path), "sims.yaml")
    legacy = as_an_older_release_stored_it(vault, topic_file(tmp_path))
    assert vault.topics.keywords_pinned("sims")
    assert vault.topics.topic("sims").keyword_forms == "exact"
    recorded = vault.topics.record_topic(topic_file(tmp_path), "sims.yaml")  # the next plain sync
    assert recorded.keyword_forms == "exact" and vault.topics.topic("sims").keyword_pattern().search("two simulations") is None
    row = vault.conn.execute("SELECT definition_json FROM topics WHERE topic_id = 'sims'").fetchone()[0]
    assert row == legacy, "what resolution compares is unchanged: the topic is not resolved again"
    # The file's definition is what the vault holds, so a seal does not call the file changed.
    assert as_recorded(topic_file(tmp_path), True) == recorded


def test_reselect_moves_a_pinned_topic_to_inflections_for_good(vault, tmp_path):
    vault.topics.record_topic(topic_file(tmp_path), "sims.yaml")
    as_an_older_release_stored_it(vault, topic_file(tmp_path))
    assert vault.topics.record_topic(topic_file(tmp_path), "sims.yaml", reselect=True).keyword_forms == "inflected"
    assert not vault.topics.keywords_pinned("sims")
    assert vault.topics.record_topic(topic_file(tmp_path), "sims.yaml").keyword_forms == "inflected"


@pytest.mark.parametrize("said", ["exact", "inflected"])
def test_a_file_that_names_keyword_forms_is_recorded_as_it_says(vault, tmp_path, said):
    vault.topics.record_topic(topic_file(tmp_path), "sims.yaml")
    as_an_older_release_stored_it(vault, topic_file(tmp_path))
    recorded = vault.topics.record_topic(topic_file(tmp_path, extra=f"keyword_forms: {said}\n"), "sims.yaml")
    assert recorded.keyword_forms == said and stored(vault)["keyword_forms"] == said
    assert not vault.topics.keywords_pinned("sims")
    # Named once, the rule is the file's: a file that stops naming it takes this release's.
    assert vault.topics.record_topic(topic_file(tmp_path), "sims.yaml").keyword_forms == "inflected"


def test_a_draft_or_a_catch_all_from_before_has_nothing_to_keep_exact(vault, tmp_path):
    vault.topics.record_topic(topic_file(tmp_path, state="DRAFT"), "sims.yaml")
    as_an_older_release_stored_it(vault, topic_file(tmp_path, state="DRAFT"))
    assert not vault.topics.keywords_pinned("sims")  # a DRAFT was never compiled
    assert vault.topics.record_topic(topic_file(tmp_path), "sims.yaml").keyword_forms == "inflected"

    catch_all = topic_file(tmp_path).model_copy(
        update={"extraction_policy": topic_file(tmp_path).extraction_policy.model_copy(update={"required_keywords": None})}
    )
    vault.topics.record_topic(catch_all, "sims.yaml")
    as_an_older_release_stored_it(vault, catch_all)
    assert not vault.topics.keywords_pinned("sims")  # no keywords: no rule to keep
