"""Parse once, do nothing twice (issue 11): a sync reads and parses each new or changed run file
once, nothing downstream re-parses raw JSON, and a no-change re-sync reads, hashes and parses none.

Counted with spies that call through to the real functions: the numbers are what really ran.
"""

import json
from collections import Counter

import pytest

import nexus_assets.drift.step
import nexus_assets.ingest.runfiles
import nexus_assets.ingest.step
from nexus_assets.drift.records import DriftRecords
from nexus_assets.ingest.records import RunRecords
from nexus_assets.publish.records import BrickRecords
from nexus_assets.store import Vault
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.project import Project, nexus_run


class Spy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.calls: Counter = Counter()
        self.monkeypatch = monkeypatch

    def wrap(self, owner, name: str, label: str, key=lambda *a, **k: None) -> None:
        real = getattr(owner, name)

        def spy(*args, **kwargs):
            self.calls[(label, key(*args, **kwargs))] += 1
            return real(*args, **kwargs)

        self.monkeypatch.setattr(owner, name, spy)

    def count(self, label: str) -> int:
        return sum(n for (l, _), n in self.calls.items() if l == label)

    def keys(self, label: str) -> Counter:
        return Counter({k: n for (l, k), n in self.calls.items() if l == label})


@pytest.fixture
def spy(monkeypatch) -> Spy:
    s = Spy(monkeypatch)
    # Reading a run file (the only place raw bytes become runs), hashing it, and re-parsing stored raw JSON.
    s.wrap(nexus_assets.ingest.step, "iter_run_file", "read", key=lambda path, *a, **k: path.name)
    s.wrap(nexus_assets.drift.step, "iter_run_file", "read", key=lambda path, *a, **k: path.name)
    s.wrap(nexus_assets.ingest.step, "_snapshot", "hash", key=lambda path, *a, **k: path.name)
    s.wrap(nexus_assets.ingest.step, "file_sha256", "hash", key=lambda path, *a, **k: path.name)
    s.wrap(RunRecords, "load_runs", "reparse")
    s.wrap(RunRecords, "latest_runs", "reparse")
    return s


def project(p: Project) -> Project:
    p.write_topic("vault-notes", keywords=["vault"])
    p.write_topic("sync-notes", keywords=["sync"])
    for i in range(4):
        p.write_run(
            f"r{i}.json",
            nexus_run(f"run-{i}", [("user", f"The vault keeps item {i}. We sync it nightly."), ("assistant", f"Yes, sync {i} uses the vault.")]),
        )
    return p


def test_a_sync_reads_each_file_once_and_nothing_downstream_reparses(empty_project: Project, capsys, spy: Spy):
    p = project(empty_project)
    results = run_json(capsys, *p.sync_args())
    assert [r["success"] for r in results] == [True, True]
    assert all(all(r["checks"].values()) for r in results)
    # Two topics, four files: each file is read and hashed once for the whole sync.
    assert spy.keys("read") == Counter({f"r{i}.json": 1 for i in range(4)})
    assert spy.keys("hash") == Counter({f"r{i}.json": 1 for i in range(4)})
    assert spy.count("reparse") == 0, "extraction, the gate, resolution and the checks read stored nodes"


def test_a_no_change_resync_reads_hashes_and_parses_nothing(empty_project: Project, capsys, spy: Spy):
    p = project(empty_project)
    first = run_json(capsys, *p.sync_args())
    spy.calls.clear()
    again = run_json(capsys, *p.sync_args())
    assert [r["manifest_hash"] for r in again] == [r["manifest_hash"] for r in first]
    assert spy.count("read") == spy.count("hash") == spy.count("reparse") == 0


def test_a_changed_file_is_read_once_and_its_drift_still_shows(empty_project: Project, capsys, spy: Spy):
    p = project(empty_project)
    run_json(capsys, *p.sync_args())
    spy.calls.clear()
    changed = nexus_run("run-2", [("user", "The vault keeps something else now. We sync it nightly."), ("assistant", "Yes, sync 2 uses the vault.")])
    (p.runs / "r2.json").write_text(json.dumps(changed), encoding="utf-8")
    results = run_json(capsys, *p.sync_args(), expect=1)
    assert spy.keys("read") == Counter({"r2.json": 1})
    assert spy.keys("hash") == Counter({"r2.json": 1})
    vault_topic = next(r for r in results if r["topic_id"] == "vault-notes")
    assert vault_topic["checks"]["checksum_drift"] is False, "the edited source's bricks are stale"
    stale = [b for b in run_json(capsys, *p.cli_args(), "bricks", "vault-notes") if b["stale"]]
    assert stale and all(s["run_id"] == "run-2" for b in stale for s in b["sources"][:1])


def test_a_deleted_source_file_is_drift_without_rereading_the_rest(empty_project: Project, capsys, spy: Spy):
    p = project(empty_project)
    run_json(capsys, *p.sync_args())
    spy.calls.clear()
    (p.runs / "r1.json").unlink()
    results = run_json(capsys, *p.sync_args(), expect=1)
    assert spy.count("read") == 0
    assert all(r["checks"]["checksum_drift"] is False for r in results)


def test_a_moved_file_is_hashed_once_and_neither_read_nor_stale(empty_project: Project, capsys, spy: Spy):
    p = project(empty_project)
    run_json(capsys, *p.sync_args())
    spy.calls.clear()
    (p.runs / "archive").mkdir()
    (p.runs / "r1.json").rename(p.runs / "archive" / "r1.json")
    results = run_json(capsys, *p.sync_args())
    # Nothing new for any topic (lifecycle/idle.py: its marks include a quiet drift check), or its check passed.
    assert all(r.get("unchanged") or r["checks"]["checksum_drift"] for r in results)
    assert spy.keys("hash") == Counter({"r1.json": 1})
    assert spy.count("read") == spy.count("reparse") == 0
    # Its new stat was kept: the next sync that runs does not hash it again.
    spy.calls.clear()
    p.write_run("r9.json", nexus_run("run-9", [("user", "The vault keeps item 9.")]))
    run_json(capsys, *p.sync_args())
    assert spy.keys("hash") == Counter({"r9.json": 1})


def test_touched_files_are_hashed_but_cost_no_write_or_query_each(empty_project: Project, capsys, spy: Spy):
    """Files whose times moved but whose bytes did not (touched, checked out, copied back): each is
    hashed, nothing is read, and no restore or verdict query runs per file; a file back to bytes it
    held before, touched in the same sync as the rest, is still restored."""
    spy.wrap(DriftRecords, "restore_versions", "restore", key=lambda self, sha, source: source.rsplit("/", 1)[-1])
    spy.wrap(RunRecords, "copy_file_verdict", "verdict")
    p = project(empty_project)
    first = run_json(capsys, *p.sync_args())
    spy.calls.clear()
    for path in p.runs.glob("*.json"):
        path.write_bytes(path.read_bytes())
    touched = run_json(capsys, *p.sync_args())
    assert spy.keys("hash") == Counter({f"r{i}.json": 1 for i in range(4)})
    assert spy.count("read") == spy.count("restore") == spy.count("verdict") == 0
    assert [r["manifest_hash"] for r in touched] == [r["manifest_hash"] for r in first]
    assert all(all(r["checks"].values()) for r in touched)

    original = (p.runs / "r3.json").read_bytes()
    edited = nexus_run("run-3", [("user", "The vault keeps an edited item. We sync it nightly.")])
    (p.runs / "r3.json").write_text(json.dumps(edited), encoding="utf-8")
    run_json(capsys, *p.sync_args(), expect=1)  # run-3's first bricks are stale
    spy.calls.clear()
    for path in p.runs.glob("*.json"):
        path.write_bytes(original if path.name == "r3.json" else path.read_bytes())
    run_json(capsys, *p.sync_args())  # the undone edit's brick is history now, not a stale brick
    assert spy.count("verdict") == 0
    assert spy.keys("restore") == Counter({"r3.json": 1})
    stale = {b["content"]: b["stale"] for b in run_json(capsys, *p.cli_args(), "bricks", "vault-notes")}
    assert stale["The vault keeps item 3."] is False and "The vault keeps an edited item." not in stale


def test_an_unchanged_topic_is_not_resolved_or_published_again(empty_project: Project, capsys, monkeypatch):
    import nexus_assets.resolve.step

    spy = Spy(monkeypatch)
    # A resolution is full (resolve_keyed) or of what changed (resolve_changes); so is publishing.
    spy.wrap(nexus_assets.resolve.step, "resolve_keyed", "resolve", key=lambda topic_id, *a, **k: topic_id)
    spy.wrap(nexus_assets.resolve.step, "resolve_changes", "resolve", key=lambda topic_id, *a, **k: topic_id)
    spy.wrap(BrickRecords, "publish_staged", "publish", key=lambda self, topic_id, *a, **k: topic_id)
    spy.wrap(BrickRecords, "publish_changes", "publish", key=lambda self, topic_id, *a, **k: topic_id)
    p = project(empty_project)
    p.write_run("open.json", nexus_run("run-open", [("user", "An open vault thought.")], status="OPEN"))
    first = run_json(capsys, *p.sync_args())
    assert spy.count("resolve") == spy.count("publish") == 2
    spy.calls.clear()
    again = run_json(capsys, *p.sync_args())
    assert spy.count("resolve") == spy.count("publish") == 0
    assert [r["manifest_hash"] for r in again] == [r["manifest_hash"] for r in first]
    # A run closing changes states: the topic that holds its brick resolves again, the other does not.
    run_json(capsys, *p.cli_args(), "close", "run-open")
    run_json(capsys, *p.sync_args())
    assert spy.keys("resolve") == Counter({"vault-notes": 1})
    forming = {b["content"]: b["state"] for b in run_json(capsys, *p.cli_args(), "bricks", "vault-notes")}
    assert forming["An open vault thought."] == "FORMING"


def test_a_sync_with_nothing_changed_runs_nothing_and_any_change_runs_again(tmp_path, capsys):
    """Issue 11 §2: a sync whose inputs (file stats, topic definitions, extractor, settings, vault
    changes) equal those of the last clean sync does nothing; any change makes it run again."""
    from nexus_assets_tests.project import sample_project

    p = sample_project(tmp_path / "proj")
    first = run_json(capsys, *p.sync_args())
    assert all(r["dagster_run_id"] for r in first)
    again = run_json(capsys, *p.sync_args())
    assert [r["unchanged"] for r in again] == [True] * len(first)
    assert [r["manifest_hash"] for r in again] == [r["manifest_hash"] for r in first]
    assert all(r["dagster_run_id"] is None for r in again)

    run_file = next(p.runs.rglob("*.json"))
    run_file.write_bytes(run_file.read_bytes())  # same bytes, new times: looked at again
    touched = run_json(capsys, *p.sync_args())
    # Read again, and nothing new for any topic: each is checked, none compiled (issue 52).
    assert all(r["dagster_run_id"] is None and r.get("unchanged") for r in touched)
    assert [r["manifest_hash"] for r in touched] == [r["manifest_hash"] for r in first]
    assert all(r.get("unchanged") for r in run_json(capsys, *p.sync_args()))

    run_json(capsys, *p.cli_args(), "close", "run-2026-11-18-open-brainstorm")
    closed = run_json(capsys, *p.sync_args())
    from nexus_assets.store import Vault

    with Vault.open(p.db, read_only=True) as v:
        reading = {t for (t,) in v.conn.execute(
            "SELECT DISTINCT topic_id FROM occurrences WHERE run_id = 'run-2026-11-18-open-brainstorm'").fetchall()}
    # Closing a run changes what a sync produces for the topics that hold its text, and only for them.
    assert reading and {r["topic_id"] for r in closed if r["dagster_run_id"]} == reading


def test_the_gate_reads_only_the_nodes_pointers_name_and_judges_as_with_the_whole_run(tmp_path):
    """Validation loads just the nodes an extraction's pointers name. Every verdict (occurrence,
    offsets, checksum, timestamp, position, rejection reason) is the one the whole run gives,
    including for paths written another way, paths at no text node and malformed pointers."""
    from nexus_assets.gate.rules import NeedsDocument, named_paths, validate_pointers
    from nexus_assets.ingest.formats.nexus import nexus_run as parse_nexus
    from nexus_assets.store import RunVersion

    document = {
        "run_id": "run-a",
        "status": "CLOSED",
        "started_at": "2025-01-01T00:00:00Z",
        "messages": [
            {"role": "user", "content": "The vault keeps bricks. Nothing else.", "timestamp": "2025-01-02T00:00:00Z"},
            {"role": "assistant", "content": "We sync the vault nightly."},
            {"role": "user", "content": "A third message about the vault."},
        ],
    }
    run = parse_nexus(document)
    at = "$['messages'][{}]['content']".format
    pointers = [
        {"topic_id": "t", "json_path": at(0), "verbatim_quote": "The vault keeps bricks."},
        {"topic_id": "t", "json_path": at(1), "verbatim_quote": "We sync the vault nightly."},
        {"topic_id": "t", "json_path": at(2), "verbatim_quote": "not there"},
        {"topic_id": "t", "json_path": at(1), "verbatim_quote": "vault"},
        {"topic_id": "other", "json_path": at(2), "verbatim_quote": "vault"},
        {"topic_id": "t", "json_path": at(0), "verbatim_quote": "   "},
        {"topic_id": "t", "json_path": at(0)},
        "not a pointer",
    ]
    with Vault.open(tmp_path / "vault.duckdb") as vault:
        vault.runs.store_runs([(run, "a.json", "0" * 64)])
        rv = RunVersion(run.run_id, run.version_id)
        whole = vault.runs.load_run_nodes([rv])[rv]
        some = vault.runs.load_run_nodes([rv], only={rv: named_paths(pointers)})[rv]
    assert len(whole.nodes) == 3 and {n.path for n in some.nodes} == {n.path for n in whole.nodes}
    judged = validate_pointers(pointers, topic_id="t", run=some)
    assert judged == validate_pointers(pointers, topic_id="t", run=whole)
    occurrences, rejections = judged
    assert [o.content for o in occurrences] == ["The vault keeps bricks.", "We sync the vault nightly.", "vault"]
    assert occurrences[0].timestamp == "2025-01-02T00:00:00.000000Z"
    assert sorted(r.reason for r in rejections) == ["empty_quote", "malformed_pointer", "malformed_pointer", "quote_not_found", "unknown_topic"]
    with Vault.open(tmp_path / "vault.duckdb", read_only=True) as vault:
        only_first = vault.runs.load_run_nodes([rv], only={rv: named_paths(pointers[:1])})[rv]
    assert [n.path for n in only_first.nodes] == [whole.nodes[0].path]
    # A pointer at a node that was not loaded is never judged on a partial run: it asks for the
    # document, as a path in another syntax does on the whole run.
    with pytest.raises(NeedsDocument):
        validate_pointers(pointers[1:2], topic_id="t", run=only_first)
    other_syntax = [{"topic_id": "t", "json_path": "$.messages[0].content", "verbatim_quote": "vault"}]
    assert named_paths(other_syntax) == set()
    with pytest.raises(NeedsDocument):
        validate_pointers(other_syntax, topic_id="t", run=whole)


def test_a_chunk_of_run_versions_loads_exactly_its_own_nodes_and_statuses(tmp_path):
    """Nodes and statuses are read per chunk of run versions with a range prefilter in SQL; a chunk
    of scattered keys (an older version, a run between two wanted ones) gets only its own rows."""
    from nexus_assets.ingest.scope import node_text
    from nexus_assets.ingest.formats.nexus import nexus_run as parse_nexus
    from nexus_assets.store import RunVersion

    def document(run_id: str, status: str, *texts: str) -> dict:
        messages = [{"role": "user", "content": t} for t in texts]
        return {"run_id": run_id, "status": status, "started_at": "2025-01-01T00:00:00Z", "messages": messages}

    runs = [
        parse_nexus(document("run-a", "OPEN", "a one.", "a two.")),
        parse_nexus(document("run-a", "OPEN", "a one.", "a two, edited.", "a three.")),
        parse_nexus(document("run-b", "OPEN", "b only.")),
        parse_nexus(document("run-c", "CLOSED", "c one.", "c two.")),
        parse_nexus(document("run-d", "OPEN", "d one.")),
    ]
    with Vault.open(tmp_path / "vault.duckdb") as vault:
        vault.runs.store_runs([(run, f"{i}.json", f"{i}" * 64) for i, run in enumerate(runs)])
        vault.runs.close_run("run-d")
        key = {i: RunVersion(run.run_id, run.version_id) for i, run in enumerate(runs)}
        wanted = [key[0], key[3], key[4]]
        loaded = vault.runs.load_run_nodes(wanted)
        assert set(loaded) == set(wanted)
        for i in (0, 3, 4):
            assert [(n.path, n.text) for n in loaded[key[i]].nodes] == [(n.path, node_text(runs[i], n)) for n in runs[i].nodes]
        assert [r.status for r in (loaded[key[0]], loaded[key[3]], loaded[key[4]])] == ["OPEN", "CLOSED", "CLOSED"]
        first_texts = {rv: {n.path for n in run.nodes[:1]} for rv, run in zip(wanted, [runs[0], runs[3], runs[4]])}
        some = vault.runs.load_run_nodes(wanted, only=first_texts)
        assert {rv: [n.text for n in run.nodes] for rv, run in some.items()} == {
            key[0]: ["a one."], key[3]: ["c one."], key[4]: ["d one."]
        }
        assert vault.runs.run_status(["run-d", "run-b", "nowhere"]) == {"run-d": "CLOSED", "run-b": "OPEN"}
        assert vault.runs.run_status([]) == {}
        assert vault.runs.run_status() == {"run-a": "OPEN", "run-b": "OPEN", "run-c": "CLOSED", "run-d": "CLOSED"}
