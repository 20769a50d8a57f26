"""Pushes compiled by a real `nexus api` on 127.0.0.1 (issue 52 item 2 and its faults): concurrent
pushes to different runs and to one run are all kept, in order, each once; a push while a sync of
the same topic runs is queued after it (never folded into a sync that already read the runs
folder, the cause of a second push not compiled for minutes), never lost or doubled; a server
killed with SIGKILL after acknowledging pushes loses none of them once it is started again."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter

from nexus_assets.ingest.push import run_path
from nexus_assets_tests.api_helpers import Api, api_server
from nexus_assets_tests.cli_helpers import run_nexus
from nexus_assets_tests.project import Project

WAIT_S = 300  # on 2 cores shared with other suites


def project(tmp_path) -> Project:
    p = Project(tmp_path / "proj")
    p.runs.mkdir(parents=True)
    p.write_topic("ops", keywords=["deploy", "database"])
    assert run_nexus(*p.sync_args()).returncode == 0  # an empty vault that knows its folders
    return p


def said(who: str, n: int) -> str:
    return f"We deploy the {who} service after the database backup number {n} because the backup must finish first."


def wait_job(api: Api, job_id: str) -> dict:
    deadline = time.monotonic() + WAIT_S
    while True:
        status, _, job = api.get(f"/v1/sync/{job_id}")
        assert status == 200, job
        if job["status"] in ("succeeded", "failed"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.2)


def contents(api: Api) -> Counter:
    return Counter(b["content"] for b in api.get("/v1/topics/ops/bricks")[2])


def wait_bricks(api: Api, texts: list[str]) -> Counter:
    deadline = time.monotonic() + WAIT_S
    while True:
        have = contents(api)
        if all(have[t] for t in texts):
            return have
        assert time.monotonic() < deadline, sorted(set(texts) - set(have))
        time.sleep(0.3)


def test_concurrent_pushes_to_many_runs_and_to_one_run_are_all_compiled_in_order_each_once(tmp_path):
    p = project(tmp_path)
    jobs: list[str] = []
    failures: list = []

    def put(who: str) -> None:
        for n in range(3):
            status, _, body = api.call("PUT", f"/v1/runs/{who}-{n}",
                                   {"status": "CLOSED", "messages": [{"role": "user", "content": said(who, n)}]})
            (jobs.append(body["sync_job_id"]) if status == 201 else failures.append((status, body)))

    def append(who: str) -> None:
        for n in range(3):
            status, _, body = api.post("/v1/runs/shared/messages", {"messages": [{"id": f"{who}-{n}", "role": "user", "content": said(who, n)}]})
            (jobs.append(body["sync_job_id"]) if status == 200 and body["added"] == 1 else failures.append((status, body)))

    with api_server(p) as api:
        threads = [threading.Thread(target=put, args=(w,)) for w in ("alpha", "beta", "gamma")]
        threads += [threading.Thread(target=append, args=(w,)) for w in ("delta", "epsilon")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures
        assert all(wait_job(api, j)["status"] == "succeeded" for j in set(jobs))
        texts = [said(w, n) for w in ("alpha", "beta", "gamma", "delta", "epsilon") for n in range(3)]
        have = wait_bricks(api, texts)
    assert all(have[t] == 1 for t in texts), have
    messages = json.loads(run_path(p.runs, "shared").read_text())["messages"]
    ids = [m["id"] for m in messages]
    assert sorted(ids) == sorted(f"{w}-{n}" for w in ("delta", "epsilon") for n in range(3)), "every append kept once"
    for who in ("delta", "epsilon"):
        assert [i for i in ids if i.startswith(who)] == [f"{who}-{n}" for n in range(3)], "each pusher's order is kept"


def test_a_push_while_a_sync_of_its_topic_runs_is_queued_after_it_and_compiled_once(tmp_path):
    p = project(tmp_path)
    p.write_run("older.json", {"run_id": "older", "status": "CLOSED", "messages": [{"role": "user", "content": said("older", 0)}]})
    with api_server(p) as api:
        status, _, started = api.post("/v1/sync/initiate", {"force_recompile": True})
        assert status == 202, started
        deadline = time.monotonic() + WAIT_S
        while api.get(f"/v1/sync/{started['sync_job_id']}")[2]["status"] == "queued":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        status, _, pushed = api.call("PUT", "/v1/runs/during", {"status": "OPEN", "messages": [{"role": "user", "content": said("during", 1)}]})
        assert status == 201 and pushed["sync_job_id"] not in (None, started["sync_job_id"]), (
            "a push is never folded into a sync that may have read the runs folder before it")
        assert wait_job(api, started["sync_job_id"])["status"] == "succeeded"
        job = wait_job(api, pushed["sync_job_id"])
        assert job["status"] == "succeeded" and job["results"][0]["pushed"] is True, job
        have = contents(api)
        # Recallable as soon as the push job is done, without another sync.
        status, _, found = api.post("/v1/recall", {"query": said("during", 1), "topics": ["ops"], "k": 1})
    assert have[said("during", 1)] == 1 and have[said("older", 0)] == 1, have
    assert status == 200 and found["results"][0]["content"] == said("during", 1)


def test_a_server_killed_after_acknowledging_pushes_loses_none_of_them(tmp_path):
    p = project(tmp_path)
    acknowledged: list[str] = []
    stop = threading.Event()

    def push(api: Api) -> None:
        n = 0
        while not stop.is_set():
            text = said("killed", n)
            try:
                status, _, _ = api.post("/v1/runs/agent-k/messages", {"messages": [{"id": f"k{n}", "role": "user", "content": text}]})
            except OSError:
                return  # the server is gone: this push was never acknowledged
            if status == 200:
                acknowledged.append(text)
            n += 1

    with api_server(p) as api:
        pusher = threading.Thread(target=push, args=(api,))
        pusher.start()
        deadline = time.monotonic() + WAIT_S
        while len(acknowledged) < 4:
            assert time.monotonic() < deadline and pusher.is_alive()
            time.sleep(0.01)
        os.killpg(api.proc.pid, signal.SIGKILL)  # mid-push: compiles queued or running
        api.proc.wait()
        stop.set()
        pusher.join()
    assert len(acknowledged) >= 4
    on_disk = [m["content"] for m in json.loads(run_path(p.runs, "agent-k").read_text())["messages"]]
    assert on_disk[: len(acknowledged)] == acknowledged, "every acknowledged message is in the run file, in order"
    with api_server(p) as api:  # started again: what the killed one left undone is compiled
        have = wait_bricks(api, acknowledged)
    assert all(have[t] == 1 for t in acknowledged), have


def announced(api: Api, method: str, path: str, length: int) -> int:
    """The status of a request whose Content-Length passes the limit, refused on its headers before
    any body is read: sending the body first would race the server's early answer (a broken pipe)."""
    import http.client
    from urllib.parse import urlsplit

    url = urlsplit(api.base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        conn.putrequest(method, path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(length))
        conn.endheaders()
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_pushes_beyond_the_limits_are_refused_as_before(tmp_path):
    p = project(tmp_path)
    with api_server(p, extra_env={"NEXUS_API_MAX_BODY_BYTES": "600000"}) as api:
        assert announced(api, "PUT", "/v1/runs/big", 700_000) == 413
        many = {"messages": [{"id": str(i), "role": "user", "content": "a"} for i in range(10_001)]}
        assert len(json.dumps(many)) < 600_000
        status, _, problem = api.post("/v1/runs/many/messages", many)
        assert status == 422 and "messages" in json.dumps(problem), problem
    assert not run_path(p.runs, "big").exists() and not run_path(p.runs, "many").exists()
