"""FINAL bricks are immutable (docs/invariants.md §7) and manifests form a hash chain (§1).

The vault refuses to publish a change to a FINAL brick; tampering with the DuckDB file directly
makes the `final_immutability` asset check fail and `nexus verify` exit 1.
"""

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from nexus_assets.defs.assets import FULL_VERIFY_TAG
from nexus_assets.lifecycle.step import immutability_problems
from nexus_assets.publish.immutability import FinalBrickChanged
from nexus_assets.publish.manifest import manifest_hash
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_cli
from nexus_assets_tests.dagster_helpers import check_results, materialize_topic
from nexus_assets_tests.lifecycle_helpers import (
    TOPIC,
    materialize_states_and_manifest,
    sealed_walk,
    tamper,
)
from nexus_assets_tests.manifest_helpers import listed_manifests
from nexus_assets_tests.project import Project


@pytest.fixture(scope="module")
def sealed_template(tmp_path_factory) -> Project:
    p = Project(tmp_path_factory.mktemp("sealed") / "proj")
    sealed_walk(p)
    return p


@pytest.fixture
def sealed(sealed_template: Project, tmp_path: Path) -> Project:
    """A fresh copy of a sealed walk topic (three manifests, three FINAL bricks) per test."""
    p = Project(tmp_path / "proj")
    shutil.copytree(sealed_template.root, p.root)
    return p


def final_bricks(p: Project):
    with Vault.open(p.db, read_only=True) as v:
        return v.bricks.select(TOPIC)


def verify(capsys, p: Project) -> tuple[int, dict]:
    code, out, _ = run_cli(capsys, *p.cli_args(), "verify", "--json")
    return code, json.loads(out)


def immutability_check(p: Project, *, whole_graph: bool = True, nightly: bool = False) -> dg.AssetCheckEvaluation:
    with dg.instance_for_test() as instance:
        if whole_graph:
            result = materialize_topic(p, TOPIC, instance, tags={FULL_VERIFY_TAG: "true"} if nightly else None)
        else:
            result = materialize_states_and_manifest(p, TOPIC, instance)
    return next(e for e in result.get_asset_check_evaluations() if e.check_name == "final_immutability")


def test_a_sealed_topic_passes_every_check_and_verify(sealed: Project, capsys):
    with dg.instance_for_test() as instance:
        result = materialize_topic(sealed, TOPIC, instance)
    assert result.success
    assert check_results(result) == {
        "hallucination_rejection": True, "checksum_drift": True, "final_immutability": True, "extraction_quality": True,
        "vector_index_in_step": True, "open_conflicts": True,
        "passages_verbatim": True, "passage_index_in_step": True,
    }
    code, data = verify(capsys, sealed)
    assert code == 0 and data["immutability_problems"] == [] and data["chain_problems"] == []


@pytest.mark.parametrize(
    "change",
    [
        {"content": "The sync engine compiles nothing."},
        {"content": "the sync engine compiles bricks."},  # same fingerprint, other text
        {"order_index": 7},
        {"state": "FORMING"},
        {"superseded_by": "0" * 64},
    ],
    ids=["content", "case-only-content", "order", "state", "superseded"],
)
def test_the_vault_refuses_to_publish_a_change_to_a_final_brick(sealed: Project, change: dict):
    bricks = final_bricks(sealed)
    target = bricks[0]
    altered = [target.model_copy(update=change), *bricks[1:]]
    with Vault.open(sealed.db) as v:
        with pytest.raises(FinalBrickChanged, match=rf"refusing to publish '{TOPIC}': FINAL bricks are immutable.*{target.brick_id[:12]}"):
            v.bricks.publish(TOPIC, altered, None, dagster_run_id=None)
    assert final_bricks(sealed) == bricks


def test_the_vault_refuses_to_move_or_drop_a_final_brick(sealed: Project):
    bricks = final_bricks(sealed)
    moved = bricks[0].model_copy(update={"sources": bricks[0].sources + bricks[1].sources})
    with Vault.open(sealed.db) as v:
        with pytest.raises(FinalBrickChanged, match="sources would change"):
            v.bricks.publish(TOPIC, [moved, *bricks[1:]], None, dagster_run_id=None)
        with pytest.raises(FinalBrickChanged, match="would be dropped"):
            v.bricks.publish(TOPIC, bricks[1:], None, dagster_run_id=None)
        # Only the stale flag may change: drift must still be reported on a sealed brick.
        v.bricks.publish(TOPIC, [bricks[0].model_copy(update={"stale": True}), *bricks[1:]], None, dagster_run_id=None)
        # The flag follows the canonical source's recorded status (invariant 14).
        canonical = bricks[0].sources[0]
        v.drift.record_source_status([canonical], {canonical: "edited"}, observed_by="test")
    assert final_bricks(sealed)[0].stale is True


def test_tampered_content_fails_final_immutability_and_verify(sealed: Project, capsys):
    target = final_bricks(sealed)[0]
    tamper(sealed, "UPDATE bricks SET content = 'The sync engine compiles summaries.' WHERE brick_id = ?", [target.brick_id])

    code, data = verify(capsys, sealed)
    assert code == 1 and data["ok"] is False
    assert any(target.brick_id[:12] in p and "content no longer matches its sealed fingerprint" in p for p in data["immutability_problems"])

    # The blocking gate check stops the whole graph first; re-materializing the last two assets
    # (as from the UI) runs final_immutability on its own.
    with dg.instance_for_test() as instance:
        whole = materialize_topic(sealed, TOPIC, instance)
    assert check_results(whole)["hallucination_rejection"] is False
    check = immutability_check(sealed, whole_graph=False)
    assert check.passed is False
    assert "content" in check.description and target.brick_id[:12] in check.description


def test_case_only_tampering_is_caught_by_the_seal_snapshot(sealed: Project, capsys):
    target = final_bricks(sealed)[0]
    tamper(sealed, "UPDATE bricks SET content = upper(content) WHERE brick_id = ?", [target.brick_id])
    code, data = verify(capsys, sealed)
    assert code == 1
    assert data["immutability_problems"] == [f"FINAL brick #0 {target.brick_id[:12]} of '{TOPIC}': content differs from the text sealed"]


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("UPDATE bricks SET order_index = 2 - order_index WHERE topic_id = 'walk'", "order_index is now"),
        ("UPDATE bricks SET state = 'FORMING' WHERE order_index = 1", "state is now FORMING"),
        (
            "UPDATE brick_sources SET start_offset = start_offset + 1 WHERE brick_id IN (SELECT brick_id FROM bricks WHERE order_index = 2)",
            "source addresses differ from those at seal time",
        ),
        ("UPDATE bricks SET fingerprint = repeat('0', 64) WHERE order_index = 0", "stored fingerprint"),
        ("DELETE FROM bricks WHERE order_index = 2", "gone from the vault"),
    ],
    ids=["reorder", "state", "sources", "fingerprint", "delete"],
)
def test_tampered_final_bricks_fail_final_immutability_and_verify(sealed: Project, capsys, sql: str, expected: str):
    tamper(sealed, sql)
    code, data = verify(capsys, sealed)
    assert code == 1
    assert any(expected in p for p in data["immutability_problems"]), data["immutability_problems"]
    check = immutability_check(sealed, whole_graph=False)
    assert check.passed is False
    assert int(check.metadata["problems"].value) >= 1
    assert any(expected in r.data["problem"] for r in check.metadata["problem_list"].value.records)


def test_tampering_is_never_published_as_a_new_manifest(sealed: Project):
    with Vault.open(sealed.db, read_only=True) as v:
        manifests = v.bricks.manifests(TOPIC)
    tamper(sealed, "UPDATE bricks SET order_index = 2 - order_index WHERE topic_id = 'walk'")
    with dg.instance_for_test() as instance:
        result = materialize_topic(sealed, TOPIC, instance)
    assert check_results(result)["final_immutability"] is False
    with Vault.open(sealed.db, read_only=True) as v:
        assert v.bricks.manifests(TOPIC) == manifests


def test_an_edited_old_manifest_row_fails_final_immutability_and_verify(sealed: Project, capsys):
    with Vault.open(sealed.db, read_only=True) as v:
        old = v.bricks.manifests(TOPIC)[0]
    entries = [e.model_dump() | {"state": "FORMING"} for e in old.bricks]
    tamper(sealed, "UPDATE manifests SET bricks_json = ? WHERE topic_id = 'walk' AND seq = 0", [json.dumps(entries)])
    code, data = verify(capsys, sealed)
    assert code == 1
    assert any("manifest #0 of walk was altered" in p for p in data["chain_problems"])
    # The nightly run re-hashes every manifest; the check after a sync re-hashes only the newest
    # (the cost of a sync must not grow with its history) and still follows every link.
    check = immutability_check(sealed, nightly=True)
    assert check.passed is False and "manifest #0 of walk was altered" in check.description
    assert immutability_check(sealed).passed is True


def test_a_broken_link_in_old_history_fails_the_check_after_any_sync(sealed: Project):
    tamper(sealed, "UPDATE manifests SET previous_hash = 'forged' WHERE topic_id = 'walk' AND seq = 1")
    check = immutability_check(sealed)
    assert check.passed is False and "manifest #1 of walk points back to 'forged'" in check.description


def test_an_edited_newest_manifest_fails_the_check_after_a_sync(sealed: Project):
    with Vault.open(sealed.db, read_only=True) as v:
        newest = v.bricks.manifests(TOPIC)[-1]
        seq = len(v.bricks.manifests(TOPIC)) - 1
    entries = [e.model_dump() | {"state": "FORMING"} for e in newest.bricks]
    tamper(sealed, f"UPDATE manifests SET bricks_json = ? WHERE topic_id = 'walk' AND seq = {seq}", [json.dumps(entries)])
    check = immutability_check(sealed)
    assert check.passed is False and f"manifest #{seq} of walk was altered" in check.description


def test_a_sealed_manifest_row_edited_to_match_tampered_bricks_is_still_caught(sealed: Project, capsys):
    """Someone edits the bricks and the sealed manifest together; the chain and the snapshot both object."""
    target = final_bricks(sealed)[0]
    text = "The sync engine compiles summaries."
    from nexus_assets.core.fingerprint import fingerprint

    tamper(sealed, "UPDATE bricks SET content = ?, fingerprint = ? WHERE brick_id = ?", [text, fingerprint(text), target.brick_id])
    with Vault.open(sealed.db, read_only=True) as v:
        last = v.bricks.manifests(TOPIC)[-1]
    entries = [e.model_dump() | ({"fingerprint": fingerprint(text)} if e.brick_id == target.brick_id else {}) for e in last.bricks]
    tamper(sealed, "UPDATE manifests SET bricks_json = ? WHERE topic_id = 'walk' AND sealed", [json.dumps(entries)])
    with Vault.open(sealed.db, read_only=True) as v:
        problems = immutability_problems(v, TOPIC)
    assert any("was altered" in p for p in problems)
    assert any("content differs from the text sealed" in p for p in problems)
    assert verify(capsys, sealed)[0] == 1


def rows(p: Project) -> list[tuple]:
    with Vault.open(p.db, read_only=True) as v:
        return [(n, h, previous, listed) for _, n, h, previous, listed, _ in listed_manifests(v.conn, TOPIC)]


@pytest.mark.parametrize("seq", [0, 1])
@pytest.mark.parametrize("how", ["bricks_json", "entries", "previous_hash", "rehashed"])
def test_rewriting_any_old_manifest_row_breaks_the_chain(sealed: Project, capsys, seq: int, how: str):
    before = rows(sealed)
    assert len(before) == 3 and [r[2] for r in before[1:]] == [r[1] for r in before[:-1]]
    _, own_hash, previous, bricks_json = before[seq]
    entries = json.loads(bricks_json)
    entries[0]["state"] = "IMPROVISE" if entries[0]["state"] != "IMPROVISE" else "FORMING"
    if how == "bricks_json":
        tamper(sealed, "UPDATE manifests SET bricks_json = ? WHERE topic_id = ? AND seq = ?", [json.dumps(entries), TOPIC, seq])
    elif how == "entries":
        # The list as stored since migration 27: one entry row, edited where the manifest reads it.
        tamper(
            sealed,
            """UPDATE manifest_entries SET state = ? WHERE topic_id = ? AND brick_id = ?
                 AND valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)""",
            [entries[0]["state"], TOPIC, entries[0]["brick_id"], seq, seq],
        )
    elif how == "previous_hash":
        tamper(sealed, "UPDATE manifests SET previous_hash = ? WHERE topic_id = ? AND seq = ?", ["f" * 64, TOPIC, seq])
    else:
        # A careful forger recomputes the row's own hash; the next row still points at the old one.
        from nexus_assets.core.models import ManifestEntry

        forged = manifest_hash(TOPIC, previous, [ManifestEntry(**e) for e in entries])
        tamper(
            sealed,
            "UPDATE manifests SET bricks_json = ?, manifest_hash = ? WHERE topic_id = ? AND seq = ?",
            [json.dumps(entries), forged, TOPIC, seq],
        )
        assert forged != own_hash
    code, data = verify(capsys, sealed)
    assert code == 1 and data["chain_problems"]
    assert any(f"manifest #{seq}" in p or f"manifest #{seq + 1}" in p for p in data["chain_problems"])
    code, out, _ = run_cli(capsys, *sealed.cli_args(), "verify")
    assert code == 1 and "CHAIN manifest #" in out
