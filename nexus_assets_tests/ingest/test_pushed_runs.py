"""Runs pushed live, below the HTTP API (issue 42 item 2, docs/agents.md): written as run files under
the runs folder first, atomically, idempotently by message id, bounded, and never after CLOSED."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nexus_assets.core.models import Run
from nexus_assets.ingest.push import (
    RUN_ID_RULE,
    BadPush,
    MessageConflict,
    RunClosed,
    RunNotFound,
    RunTooLarge,
    append_messages,
    close_run,
    put_run,
    run_path,
)
from nexus_assets.ingest.runfiles import iter_run_file, scan_run_files


def message(n: int, text: str | None = None) -> dict:
    return {"id": f"m-{n}", "role": "user" if n % 2 else "assistant", "content": text or f"Note {n}: the agent keeps its memory.", "timestamp": f"2026-04-01T10:{n % 60:02d}:00Z"}


def read_back(path: Path) -> Run:
    [run] = [i for i in iter_run_file(path, str(path)) if isinstance(i, Run)]
    return run


def test_an_append_creates_an_open_run_file_that_a_sync_reads(tmp_path: Path):
    result = append_messages(tmp_path, "agent-7", [message(1), message(2)])
    assert (result.status, result.messages, result.added, result.created) == ("OPEN", 2, 2, True)
    assert result.path == tmp_path / "pushed" / "agent-7.json" and scan_run_files(tmp_path) == [result.path]
    run = read_back(result.path)
    assert (run.run_id, run.status, len(run.nodes)) == ("agent-7", "OPEN", 2)
    assert run.started_at == "2026-04-01T10:01:00.000000Z"


def test_a_retried_append_adds_nothing(tmp_path: Path):
    append_messages(tmp_path, "agent-7", [message(1), message(2)])
    before = run_path(tmp_path, "agent-7").read_bytes()
    again = append_messages(tmp_path, "agent-7", [message(1), {k: v for k, v in message(2).items() if k != "timestamp"}])
    assert (again.added, again.messages, again.created) == (0, 2, False)
    assert run_path(tmp_path, "agent-7").read_bytes() == before
    more = append_messages(tmp_path, "agent-7", [message(2), message(3)])
    assert (more.added, more.messages) == (1, 3)
    assert [m["id"] for m in json.loads(run_path(tmp_path, "agent-7").read_text())["messages"]] == ["m-1", "m-2", "m-3"]


def test_a_closed_run_refuses_appends_and_changes(tmp_path: Path):
    append_messages(tmp_path, "agent-7", [message(1)])
    assert close_run(tmp_path, "agent-7").status == "CLOSED"
    assert close_run(tmp_path, "agent-7").status == "CLOSED"  # one-way, and idempotent
    before = run_path(tmp_path, "agent-7").read_bytes()
    with pytest.raises(RunClosed):
        append_messages(tmp_path, "agent-7", [message(2)])
    closed = json.loads(before)
    assert put_run(tmp_path, "agent-7", closed).added == 0  # the same run again is a no-op
    with pytest.raises(RunClosed):
        put_run(tmp_path, "agent-7", {**closed, "messages": []})
    assert run_path(tmp_path, "agent-7").read_bytes() == before
    assert read_back(run_path(tmp_path, "agent-7")).status == "CLOSED"
    with pytest.raises(RunNotFound):
        close_run(tmp_path, "never-pushed")


def test_put_writes_a_whole_run_and_checks_it(tmp_path: Path):
    doc = {"run_id": "r-1", "status": "OPEN", "messages": [{"role": "user", "content": "Remember the port is 8080."}]}
    first = put_run(tmp_path, "r-1", doc)
    assert (first.created, first.messages) == (True, 1)
    assert put_run(tmp_path, "r-1", doc).created is False
    with pytest.raises(BadPush, match="not the run_id of the address"):
        put_run(tmp_path, "r-1", {**doc, "run_id": "r-2"})
    with pytest.raises(BadPush, match="messages\\[0\\]"):
        put_run(tmp_path, "r-3", {**doc, "run_id": "r-3", "messages": [None]})
    assert not run_path(tmp_path, "r-3").exists()


@pytest.mark.parametrize(
    "messages, problem",
    [
        ([], "non-empty list"),
        ([{"role": "user", "content": "no id"}], "needs an 'id'"),
        ([{"id": "m", "role": "user", "content": 3}], "'role' and 'content' strings"),
        ("not a list", "non-empty list"),
    ],
)
def test_bad_messages_are_refused_and_nothing_is_written(tmp_path: Path, messages, problem: str):
    with pytest.raises(BadPush, match=problem):
        append_messages(tmp_path, "agent-7", messages)
    assert not run_path(tmp_path, "agent-7").exists()


def test_a_run_never_grows_past_what_a_sync_can_read(tmp_path: Path):
    append_messages(tmp_path, "agent-7", [message(1)], max_bytes=2000)
    before = run_path(tmp_path, "agent-7").read_bytes()
    with pytest.raises(RunTooLarge, match="NEXUS_MAX_RUN_FILE_BYTES"):
        append_messages(tmp_path, "agent-7", [message(2, "x" * 3000)], max_bytes=2000)
    assert run_path(tmp_path, "agent-7").read_bytes() == before
    assert close_run(tmp_path, "agent-7").status == "CLOSED"


def test_no_run_id_reaches_outside_the_pushed_folder(tmp_path: Path):
    for run_id in ("../../etc/passwd", "a/b", "ümlaut run", ".hidden", "été", "bad\nid", "ok\n", "", "x" * 129):
        with pytest.raises(BadPush, match="is not allowed: ") as refused:
            append_messages(tmp_path, run_id, [message(1)])
        assert str(refused.value).endswith(f"({RUN_ID_RULE})"), "the message names the rule"
    assert list(tmp_path.iterdir()) == [], "a refused push writes nothing"
    for run_id in ("agent-7", "A.b_c-9", "x" * 128):
        assert run_path(tmp_path, run_id) == tmp_path / "pushed" / f"{run_id}.json"
    # ':' (a Claude Code subagent's run id) is allowed, but not a file name everywhere: the file is named by its hash.
    result = append_messages(tmp_path, "4f2c9a:agent-1", [message(1)])
    assert result.path.parent == tmp_path / "pushed" and result.path.name.startswith("run-")
    assert read_back(result.path).run_id == "4f2c9a:agent-1"


def test_a_message_id_pushed_again_with_other_content_is_refused_naming_it_and_the_first_is_kept(tmp_path: Path):
    append_messages(tmp_path, "agent-7", [message(1), message(2)])
    before = run_path(tmp_path, "agent-7").read_bytes()
    with pytest.raises(MessageConflict, match="message id 'm-2' is already in run 'agent-7' with other content; the first is kept"):
        append_messages(tmp_path, "agent-7", [message(3), message(2, "a different text under the same id")])
    assert run_path(tmp_path, "agent-7").read_bytes() == before, "nothing of the refused push is written, m-3 neither"
    with pytest.raises(MessageConflict, match="'m-5'"):
        append_messages(tmp_path, "agent-8", [message(5), message(5, "two contents for one id in one push")])
    assert not run_path(tmp_path, "agent-8").exists()


def test_refused_and_failed_pushes_leave_no_file_and_no_lock(tmp_path: Path):
    runs = tmp_path / "runs"
    runs.mkdir()
    with pytest.raises(RunNotFound):
        close_run(runs, "unknown")
    with pytest.raises(BadPush):
        put_run(runs, "été", {"status": "OPEN", "messages": []})
    with pytest.raises(RunTooLarge):
        append_messages(runs, "big", [message(1, "x" * 5000)], max_bytes=2000)
    assert list(runs.rglob("*")) == []
    append_messages(runs, "agent-7", [message(1)])
    close_run(runs, "agent-7")
    with pytest.raises(RunClosed):
        append_messages(runs, "agent-7", [message(2)])
    assert sorted(p.relative_to(runs).as_posix() for p in runs.rglob("*")) == ["pushed", "pushed/agent-7.json"]


def test_concurrent_appends_lose_nothing(tmp_path: Path):
    def agent(k: int) -> None:
        for n in range(15):
            append_messages(tmp_path, "shared", [message(k * 100 + n)])

    threads = [threading.Thread(target=agent, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [m["id"] for m in json.loads(run_path(tmp_path, "shared").read_text())["messages"]]
    assert len(ids) == 60 and len(set(ids)) == 60


APPENDER = """
import sys
from pathlib import Path
from nexus_assets.ingest.push import append_messages
for n in range(100000):
    append_messages(Path(sys.argv[1]), "killed", [{"id": f"m-{n}", "role": "user", "content": "x" * 2000 + str(n)}])
    print(n, flush=True)
"""


def test_a_kill_during_appends_loses_nothing_that_was_acknowledged(tmp_path: Path):
    child = subprocess.Popen([sys.executable, "-c", APPENDER, str(tmp_path)], stdout=subprocess.PIPE, text=True, env={**os.environ})
    acknowledged = []
    assert child.stdout is not None
    for out in child.stdout:
        acknowledged.append(int(out))
        if len(acknowledged) >= 40:
            break
    child.send_signal(signal.SIGKILL)
    child.wait()
    document = json.loads(run_path(tmp_path, "killed").read_text())  # whole, never half written
    held = {m["id"] for m in document["messages"]}
    assert {f"m-{n}" for n in acknowledged} <= held
    assert read_back(run_path(tmp_path, "killed")).run_id == "killed"
