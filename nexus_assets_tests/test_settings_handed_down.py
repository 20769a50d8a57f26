"""The settings are made by each entry point and handed down (docs/configuration.md, "How the
settings reach the code"): no module global is written with them at run time, the vault's options
travel with its address, the engine's resources carry the rest, and a Dagster run tells the sync
service what it did as one typed value."""

from __future__ import annotations

import ast
import json
import pickle
from pathlib import Path

import dagster as dg
import pytest

import nexus_assets
from nexus_assets.defs.outcome import OUTCOME_KEY, StepOutcome, TopicRunOutcome
from nexus_assets.defs.resources import DuckDBVaultResource, PostgresVaultResource
from nexus_assets.definitions import build_resources
from nexus_assets.ingest.formats.limits import DEFAULTS, InputLimits, max_node_chars, node_limit
from nexus_assets.settings import Basics
from nexus_assets.vault.address import VaultOptions, parse_address
from nexus_assets.vault.postgres.connection import DEFAULT_POOL_SIZE, pool_bound

PACKAGE = Path(nexus_assets.__file__).parent

# Process switches of the embedding model's one session (its threads), set by an entry point before
# the model loads; not settings.
PROCESS_SWITCHES = {"embedding/embedder.py": {"_sharing", "_spinning"}}


def test_no_module_global_is_written_at_run_time():
    written = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        names = {n for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.Global) for n in node.names}
        if names:
            written[str(path.relative_to(PACKAGE))] = names
    assert written == PROCESS_SWITCHES


def test_no_import_cycle_in_the_llm_client_or_the_vault():
    import grimp  # installed with import-linter (the test extra)
    graph = grimp.build_graph("nexus_assets", cache_dir=None)
    for a, b in [
        ("nexus_assets.llm.batches", "nexus_assets.llm.client"),
        ("nexus_assets.llm.transport", "nexus_assets.llm.client"),
        ("nexus_assets.vault.postgres.connection", "nexus_assets.vault.catalog"),
    ]:
        assert not graph.chain_exists(importer=a, imported=b), f"{a} imports {b}: a cycle"


def test_the_vault_options_travel_with_the_address():
    options = VaultOptions(memory="64MB", pool_size="3")
    address = parse_address("postgresql://u@127.0.0.1:5/db", options)
    assert address.options == options and address == "postgresql://u@127.0.0.1:5/db"
    assert parse_address(address) is address  # parsed again: kept as it is, options too
    assert pickle.loads(pickle.dumps(address)).options == options  # into Dagster's workers
    env = {"NEXUS_DB": "duckdb:///tmp/v.duckdb", "NEXUS_VAULT_MEMORY": "64MB", "NEXUS_PG_POOL_SIZE": "3"}
    basics = Basics.from_env(env)
    assert basics.db.options == options and basics.address("other.duckdb").options == options


@pytest.mark.parametrize("given", ["0", "-2", "many"])
def test_a_bad_pool_size_is_one_line_naming_the_variable(given):
    with pytest.raises(Exception, match=f"NEXUS_PG_POOL_SIZE='{given}' is not a number of connections"):
        pool_bound(given)
    assert pool_bound(None) == pool_bound("") == DEFAULT_POOL_SIZE and pool_bound("3") == 3


def test_the_input_limits_are_parsed_from_their_settings_with_the_defaults_written_once():
    assert InputLimits() == InputLimits.given({})
    assert InputLimits.given({"NEXUS_MAX_JSON_DEPTH": "6", "NEXUS_MAX_NODE_CHARS": "0"}).max_depth == 6
    assert InputLimits.given({"NEXUS_MAX_NODE_CHARS": "0"}).max_node_chars == DEFAULTS["NEXUS_MAX_NODE_CHARS"]
    with pytest.raises(ValueError, match=r"^NEXUS_MAX_JSON_DEPTH='deep' is not a whole number$"):
        InputLimits.given({"NEXUS_MAX_JSON_DEPTH": "deep"})
    assert Basics.from_env({"NEXUS_MAX_ZIP_RATIO": "7"}).input_limits().max_zip_ratio == 7


def test_the_node_limit_holds_inside_its_block_only():
    assert max_node_chars() == DEFAULTS["NEXUS_MAX_NODE_CHARS"]
    with node_limit("1000"):
        assert max_node_chars() == 1000
    assert max_node_chars() == DEFAULTS["NEXUS_MAX_NODE_CHARS"]
    with node_limit("lots"), pytest.raises(ValueError, match="NEXUS_MAX_NODE_CHARS='lots' is not a whole number"):
        max_node_chars()


def test_the_engine_gets_one_vault_resource_per_backend_and_the_settings_in_its_resources(tmp_path):
    env = {"NEXUS_VAULT_MEMORY": "64MB", "NEXUS_PG_POOL_SIZE": "3", "NEXUS_VIEWER_URL": "http://viewer.example/",
           "NEXUS_MAX_NODE_CHARS": "1000"}
    basics = Basics.from_env(env)
    on_file = build_resources(db_path=str(tmp_path / "v.duckdb"), basics=basics)
    assert isinstance(on_file["vault"], DuckDBVaultResource) and on_file["vault"].address.options.memory == "64MB"
    assert "duckdb" not in on_file  # no DuckDB resource carries a PostgreSQL address any more
    on_postgres = build_resources(db_path="postgresql://u@127.0.0.1:1/db", basics=basics)
    assert isinstance(on_postgres["vault"], PostgresVaultResource)
    assert on_postgres["vault"].address.is_postgres and on_postgres["vault"].address.options.pool_size == "3"
    nexus = on_file["settings"]
    assert nexus.viewer_url == "http://viewer.example/" and nexus.limits.max_node_chars == 1000
    with nexus.node_scope():
        assert max_node_chars() == 1000


def test_a_step_outcome_is_one_value_read_back_in_one_place():
    said = StepOutcome(runs_incomplete=2, llm_stopped_by_cost=True)
    value = said.metadata()[OUTCOME_KEY]
    # Its JSON as text: the UI shows it, no JSON behind a link (test_asset_graph).
    assert isinstance(value, dg.TextMetadataValue) and StepOutcome.parse(value) == said
    both = TopicRunOutcome.combine([said, StepOutcome(runs_incomplete=1, conflicts_changed=True)])
    assert both == TopicRunOutcome(runs_incomplete=3, llm_stopped_by_cost=True, conflicts_changed=True)


@pytest.mark.parametrize(
    "recorded, problem",
    [
        ("not json", "is not JSON"),
        ([1], "is not an object"),
        ({"runs_incomplete": 1, "surprise": True}, "unknown fields ['surprise']"),
        ({"runs_incomplete": -1}, "runs_incomplete is not a count"),
        ({"runs_incomplete": "2"}, "runs_incomplete is not a count"),
        ({"conflicts_changed": "yes"}, "a switch that is not true or false"),
    ],
)
def test_a_recorded_outcome_that_is_not_one_is_a_one_line_error(recorded, problem):
    with pytest.raises(ValueError, match=f"^{OUTCOME_KEY}.*{problem.replace('[', '.').replace(']', '.')}"):
        StepOutcome.parse(dg.MetadataValue.text(recorded if isinstance(recorded, str) else json.dumps(recorded)))
