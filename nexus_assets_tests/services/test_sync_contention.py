"""A sync completes under viewer load, stops whole on Ctrl-C, and several first syncs on a fresh
DAGSTER_HOME do not race (invariant 12: nothing hangs a sync)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from nexus_assets.store import Vault
from nexus_assets.web.server import make_server
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.project import REPO, Project, nexus_run
from nexus_assets_tests.ingest.test_hostile_input import ordinary_text

NEXUS = os.path.join(os.path.dirname(sys.executable), "nexus")


def test_a_sync_completes_while_the_viewer_serves_a_loop_of_requests(project: Project, capsys):
    p = project
    run_json(capsys, *p.sync_args())
    server = make_server(p.db, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stop = threading.Event()
    serving = threading.Event()  # set once every tab has had a page: the load is on
    served = []
    started = set()

    def client(tab: int) -> None:
        # Four tabs reloading as fast as they can, for a bounded number of requests.
        for _ in range(3000):
            if stop.is_set():
                return
            try:
                with urllib.request.urlopen(server.url, timeout=30) as response:
                    served.append(response.status)
            except urllib.error.HTTPError as exc:
                served.append(exc.code)
            started.add(tab)
            if len(started) == 4:
                serving.set()

    clients = [threading.Thread(target=client, args=(tab,)) for tab in range(4)]
    for c in clients:
        c.start()
    try:
        assert serving.wait(timeout=120), "the viewer answers every tab before the sync starts"
        during = served.count(200)
        p.write_run("load/new.json", nexus_run("run-under-load", [("user", "The vault was synced under viewer load.")]))
        done = subprocess.run([NEXUS, *p.sync_args(), "--json"], capture_output=True, text=True, timeout=300)
        during = served.count(200) - during
    finally:
        stop.set()
        for c in clients:
            c.join(timeout=60)
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr[-3000:]
    assert all(r["success"] for r in json.loads(done.stdout))
    assert served.count(200) > 10 and during > 0, "the viewer kept serving while the sync ran"
    assert set(served) <= {200, 503}
    with Vault.open(p.db, read_only=True) as v:
        assert "run-under-load" in v.runs.latest_versions()


def test_ctrl_c_stops_the_whole_sync(empty_project: Project, capsys):
    p = empty_project
    p.write_topic("alpha", keywords=["vault"])
    p.write_topic("beta", keywords=["vault"])
    p.write_run("big.json", nexus_run("run-big", [("assistant", ordinary_text(8, keyword_every=400))]))
    proc = subprocess.Popen([NEXUS, *p.sync_args()], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = []
    # Interrupt in the middle of the sync's one run: once alpha's manifest is written, the run still
    # embeds both topics' bricks (seconds for this run). A line, not a sleep, says where the sync is.
    for line in proc.stderr:
        seen.append(line)
        if "alpha: manifest" in line:
            break
    assert "alpha: manifest" in seen[-1], "".join(seen)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, rest = proc.communicate(timeout=120)
    err = "".join(seen) + rest
    assert time.monotonic() - sent < 60
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted" in err, err[-3000:]
    # What was committed is kept, and the next sync finishes the work (it is not "unchanged").
    results = run_json(capsys, *p.sync_args())
    assert [r["topic_id"] for r in results] == ["alpha", "beta"] and all(r["success"] for r in results)
    assert any(r["dagster_run_id"] for r in results)


def test_three_first_syncs_at_once_on_a_fresh_dagster_home(empty_project: Project, tmp_path: Path):
    p = empty_project
    topics = ["alpha", "beta", "gamma"]
    for t in topics:
        p.write_topic(t, keywords=["vault"])
    for i in range(5):
        p.write_run(f"r{i}.json", nexus_run(f"run-{i}", [("user", f"The vault keeps note {i}.")]))
    home = tmp_path / "fresh_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    procs = [
        subprocess.Popen([NEXUS, *p.sync_args(t), "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for t in topics
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        (result,) = json.loads(out)
        assert result["success"] and all(result["checks"].values())
