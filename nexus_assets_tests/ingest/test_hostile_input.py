"""Invariant 12: no input can exhaust the machine or hang a sync.

Every hostile file is read in a child process under a hard address-space cap and a timeout, so a
regression fails the test instead of taking the machine down.
"""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus_assets.ingest.formats.limits import GuardedStream
from nexus_assets_tests.cli_helpers import run_json
from nexus_assets_tests.project import Project, nexus_run

TOPIC = "vault-notes"
DEEP = 200_000
CAP_MB = 2048  # address space, not resident memory: DuckDB reserves more than it touches
# A whole sync also embeds its bricks: onnxruntime, FAISS and Dagster map address space they never
# touch. Still a hard cap: a reader that grew without bound would hit it.
SYNC_CAP_MB = 4096
NEXUS = "import sys; from nexus_assets.cli import main; sys.exit(main(sys.argv[1:]))"
READER = """
import json, resource, sys, time
from pathlib import Path
from nexus_assets.ingest.runfiles import iter_run_file
out = []
started = time.perf_counter()
for item in iter_run_file(Path(sys.argv[1]), sys.argv[1]):
    out.append({"run_id": item.run_id} if hasattr(item, "run_id") else {"problem": item.problem, "conversation": item.conversation})
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the forked (large) test worker.
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"items": out, "peak_kb": peak, "seconds": time.perf_counter() - started}))
"""


def capped(code: str, *args: str, cap_mb: int = CAP_MB, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run Python `code` in a child that cannot grow past `cap_mb` of address space."""

    def limit() -> None:
        cap = cap_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return subprocess.run(
        [sys.executable, "-c", code, *args],
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def read_capped(path: Path, cap_mb: int = 512) -> dict:
    done = capped(READER, str(path), cap_mb=cap_mb, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def deep_arrays(n: int) -> str:
    return "[" * n + "]" * n


def deep_objects(n: int) -> str:
    return '{"a":' * n + "1" + "}" * n


def claude(uuid: str, text: str, extra: str = '""') -> str:
    return (
        f'{{"uuid": "{uuid}", "name": "notes", "created_at": "2026-01-01T00:00:00Z", "extra": {extra}, '
        f'"chat_messages": [{{"sender": "human", "created_at": "2026-01-01T00:00:00Z", "text": "{text}", '
        f'"content": [{{"type": "text", "text": "{text}"}}]}}]}}'
    )


def zipped(path: Path, member: str, data: bytes) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(member, data)
    return path


def hostile_files(root: Path) -> dict[str, Path]:
    """Each way to nest deeply: as arrays and objects, in a run file, an export, one conversation, a zip.

    In an export the deep item costs that item only: a good conversation follows it.
    """
    root.mkdir(parents=True, exist_ok=True)
    good = claude("good-1", "The vault keeps every quote.")
    after = claude("good-2", "The vault keeps the later ones too.")
    files = {
        "top-arrays.json": deep_arrays(DEEP),
        "top-objects.json": deep_objects(DEEP),
        "run-arrays.json": '{"run_id": "d1", "status": "CLOSED", "messages": [], "extra": ' + deep_arrays(DEEP) + "}",
        "run-objects.json": '{"run_id": "d2", "status": "CLOSED", "messages": [], "extra": ' + deep_objects(5 * DEEP) + "}",
        "export-list.json": "[" + good + ", " + deep_arrays(DEEP) + ", " + after + "]",
        "one-conversation.json": "[" + good + ", " + claude("deep-1", "x", deep_objects(DEEP)) + ", " + after + "]",
    }
    paths = {}
    for name, text in files.items():
        paths[name] = root / name
        paths[name].write_text(text)
    paths["export.zip"] = zipped(root / "export.zip", "conversations.json", ("[" + good + ", " + claude("deep-2", "x", deep_arrays(DEEP)) + ", " + after + "]").encode())
    return paths


def test_each_way_of_deep_nesting_is_refused_before_it_is_built(tmp_path: Path):
    for name, path in hostile_files(tmp_path).items():
        result = read_capped(path)
        problems = [i for i in result["items"] if "problem" in i]
        assert len(problems) == 1, (name, result["items"])
        assert "deeper than 64 levels (NEXUS_MAX_JSON_DEPTH)" in problems[0]["problem"], (name, problems)
        runs = [i["run_id"] for i in result["items"] if "run_id" in i]
        if name in ("export-list.json", "one-conversation.json", "export.zip"):
            assert runs == ["good-1", "good-2"], (name, runs)
        # Refusing a few MB of brackets costs a few MB, not gigabytes.
        assert result["peak_kb"] < 200 * 1024, (name, result["peak_kb"])


def test_a_recursion_bomb_inside_one_conversation_costs_that_conversation_only(tmp_path: Path):
    # Two million levels as arrays, then as objects with strings, each followed by a good conversation.
    bomb = 2_000_000
    path = tmp_path / "bomb.json"
    path.write_text(
        "["
        + claude("good-1", "Before.")
        + ", "
        + claude("bomb-arrays", "x", deep_arrays(bomb))
        + ", "
        + claude("good-2", "Between.")
        + ", "
        + claude("bomb-objects", "x", '{"s": "[{\\"", "a": ' * bomb + "1" + "}" * bomb)
        + ", "
        + claude("good-3", "After.")
        + "]"
    )
    result = read_capped(path)
    assert [i["run_id"] for i in result["items"] if "run_id" in i] == ["good-1", "good-2", "good-3"]
    problems = [(i["conversation"], i["problem"]) for i in result["items"] if "problem" in i]
    assert [c for c, _ in problems] == ["bomb-arrays", "bomb-objects"]
    assert all("deeper than 64 levels (NEXUS_MAX_JSON_DEPTH)" in p for _, p in problems), problems
    # Skipped in linear time and constant memory: never built, never held whole.
    assert result["peak_kb"] < 200 * 1024, result["peak_kb"]
    assert result["seconds"] < 60, result["seconds"]


def test_a_recursion_bomb_on_one_line_of_a_session_costs_that_line_only(tmp_path: Path):
    """JSON Lines have the limits JSON has: a line nested two million levels is refused on its
    bytes, named by its line, and the session's other lines are read."""
    event = '{{"type": "user", "sessionId": "s-1", "uuid": "u-{n}", "message": {{"role": "user", "content": {content}}}}}\n'
    path = tmp_path / "session.jsonl"
    path.write_text(
        event.format(n=1, content='"Before the bomb."')
        + event.format(n=2, content=deep_arrays(2_000_000))
        + event.format(n=3, content='{"s": "[{\\"", "a": ' * 1_000_000 + "1" + "}" * 1_000_000)
        + event.format(n=4, content='"After the bomb."')
    )
    result = read_capped(path)
    assert [i["run_id"] for i in result["items"] if "run_id" in i] == ["s-1"]
    problems = [i["problem"] for i in result["items"] if "problem" in i]
    assert [p.split(" JSON nesting")[0] for p in problems] == ["line 2", "line 3"], problems
    assert all("deeper than 64 levels (NEXUS_MAX_JSON_DEPTH)" in p for p in problems), problems
    assert result["peak_kb"] < 200 * 1024, result["peak_kb"]
    assert result["seconds"] < 60, result["seconds"]


def test_a_million_tiny_lines_are_refused_in_bounded_memory(tmp_path: Path):
    """Three bytes of input can be an object of its own: the line count is capped too."""
    path = tmp_path / "tiny.jsonl"
    path.write_bytes(b'{"type": "user", "sessionId": "s-1", "message": {"role": "user", "content": "Hi."}}\n' + b"{}\n" * 3_000_000)
    result = read_capped(path)
    assert [i["problem"] for i in result["items"]] == [
        "session file has more than 1000000 lines (NEXUS_MAX_SESSION_LINES); none of it was stored; split it or raise the limit"
    ]
    assert result["peak_kb"] < 300 * 1024, result["peak_kb"]


GUARDED = (
    b'[{"id": "x", "a": [',
    b'[{"k": "]]}\\"[[", "v": [[["\\\\"], {"w": "\\"}"}]]}, "[\\\\\\""]',
    b'], "b": "[[[[\\\\"}, {"id": "y", "c": [1]}]',
)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 16, 64, 1 << 16])
def test_the_guard_hands_over_a_sentinel_in_place_of_the_deep_value(size: int):
    # At a limit of 3 the value after "a": opens level 4; it ends where its own bracket closes,
    # whatever brackets and escaped quotes its strings hold and wherever the chunks break.
    prefix, deep, suffix = GUARDED
    guard = GuardedStream(io.BytesIO(prefix + deep + suffix), depth_limit=3)
    out = b"".join(iter(lambda: guard.read(size), b""))
    assert out == prefix + json.dumps(guard.sentinel).encode() + suffix
    assert json.loads(out)[0]["a"] == [guard.sentinel] and guard.replaced == 1
    assert guard.bytes_read == len(prefix + deep + suffix)


def cut_past(value, limit: int, sentinel: str, level: int = 1):
    """What the guard should hand over: each array or object opening level limit + 1 as the sentinel."""
    if not isinstance(value, (list, dict)):
        return value
    if level > limit:
        return sentinel
    if isinstance(value, list):
        return [cut_past(v, limit, sentinel, level + 1) for v in value]
    return {k: cut_past(v, limit, sentinel, level + 1) for k, v in value.items()}


TRICKY_TEXT = st.text(alphabet='[]{}"\\ aé日', max_size=6)
JSON_VALUES = st.recursive(
    st.one_of(TRICKY_TEXT, st.integers(), st.none()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY_TEXT, inner, max_size=3),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(JSON_VALUES, max_size=4), st.integers(1, 6), st.integers(1, 40), st.booleans())
def test_the_guard_cuts_exactly_what_is_past_the_limit(document, limit: int, size: int, ascii_only: bool):
    guard = GuardedStream(io.BytesIO(json.dumps(document, ensure_ascii=ascii_only).encode()), depth_limit=limit)
    out = b"".join(iter(lambda: guard.read(size), b""))
    assert json.loads(out) == cut_past(document, limit, guard.sentinel)


def test_each_guard_has_its_own_sentinel():
    first, second = (GuardedStream(io.BytesIO(b"[]"), depth_limit=3) for _ in range(2))
    assert first.sentinel != second.sentinel


def write_good_run(p: Project) -> None:
    p.write_topic(TOPIC, keywords=["vault"])
    p.write_run("good/good.json", nexus_run("run-good", [("user", "We keep the vault in one DuckDB file.")]))


def errors_by_file(p: Project, capsys) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for e in run_json(capsys, *p.cli_args(), "errors"):
        found.setdefault(Path(e["file"]).name, []).append(e["problem"])
    return found


def test_a_sync_over_hostile_files_names_each_and_compiles_the_rest(empty_project: Project, capsys):
    p = empty_project
    write_good_run(p)
    hostile_files(p.runs / "hostile")
    done = capped(NEXUS, *p.sync_args(TOPIC), "--json", cap_mb=SYNC_CAP_MB)
    assert done.returncode == 0, done.stderr[-3000:]
    errors = errors_by_file(p, capsys)
    for name in ("top-arrays.json", "top-objects.json", "run-arrays.json", "run-objects.json", "export-list.json", "one-conversation.json", "export.zip"):
        assert any("NEXUS_MAX_JSON_DEPTH" in e for e in errors.get(name, [])), (name, errors.get(name))
    sources = {s["run_id"] for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all") for s in b["sources"]}
    assert {"run-good", "good-1", "good-2"} <= sources


def ordinary_text(megabytes: float, keyword_every: int = 50_000) -> str:
    words = "the quick brown fox jumps over a lazy dog near our river bank while storage grows".split()
    sentences = []
    size = 0
    i = 0
    while size < megabytes * 1_000_000:
        body = " ".join(words[(i + k) % len(words)] for k in range(11))
        if i % keyword_every == 0:
            body += " and the vault remembers it"
        sentence = body[0].upper() + body[1:] + f" {i}. "
        sentences.append(sentence)
        size += len(sentence)
        i += 1
    return "".join(sentences)


def test_a_30_mb_message_compiles_checks_and_verifies(empty_project: Project, capsys):
    p = empty_project
    write_good_run(p)
    p.write_run("big/big.json", nexus_run("run-big", [("assistant", ordinary_text(30))]))
    # The whole sync process (Dagster, DuckDB threads, the 30 MB text in the vault) gets 2.5 GB of
    # address space: bounded, far below what the old quadratic splitter took.
    done = capped(NEXUS, *p.sync_args(TOPIC), "--json", cap_mb=SYNC_CAP_MB + 512, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    bricks = run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all")
    assert any(s["run_id"] == "run-big" for b in bricks for s in b["sources"])
    verified = capped(NEXUS, *p.cli_args(), "verify", "--json", timeout=600)
    assert verified.returncode == 0, verified.stderr[-3000:]


def test_a_node_over_the_node_limit_is_named_and_skipped(empty_project: Project, capsys, monkeypatch):
    p = empty_project
    write_good_run(p)
    p.write_run("big/long.json", nexus_run("run-long", [("user", "The vault is long. " * 200)]))
    monkeypatch.setenv("NEXUS_MAX_NODE_CHARS", "1000")
    run_json(capsys, *p.sync_args(TOPIC))
    errors = errors_by_file(p, capsys)
    assert any("NEXUS_MAX_NODE_CHARS=1000" in e and "$['messages'][0]['content']" in e for e in errors["long.json"]), errors
    sources = {s["run_id"] for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all") for s in b["sources"]}
    assert "run-good" in sources and "run-long" not in sources


def test_zip_members_that_inflate_past_the_limits_are_refused(empty_project: Project, capsys):
    p = empty_project
    write_good_run(p)
    bomb = ("[" + claude("bomb-1", "v" * (8 * 1024 * 1024)) + "]").encode()
    zipped(p.runs / "ratio.zip", "conversations.json", bomb)
    fine = ("[" + ", ".join(claude(f"c-{i}", f"The vault note {i}.") for i in range(30)) + "]").encode()
    zipped(p.runs / "many.zip", "conversations.json", fine)
    large = ("[" + ", ".join(claude(f"l-{i}", f"The vault note {i}.") for i in range(60)) + "]").encode()
    (p.runs / "nested").mkdir()
    zipped(p.runs / "nested" / "size.zip", "export/conversations.json", large)
    limits = {"NEXUS_MAX_ZIP_INFLATED_BYTES": str(len(fine) + 100), "NEXUS_MAX_CONVERSATIONS_PER_FILE": "20"}
    done = capped(NEXUS, *p.sync_args(TOPIC), "--json", cap_mb=SYNC_CAP_MB, env=limits)
    assert done.returncode == 0, done.stderr[-3000:]
    errors = errors_by_file(p, capsys)
    assert any("NEXUS_MAX_ZIP_RATIO" in e for e in errors["ratio.zip"]), errors
    assert any("NEXUS_MAX_ZIP_INFLATED_BYTES" in e for e in errors["size.zip"]), errors
    assert any("NEXUS_MAX_CONVERSATIONS_PER_FILE" in e for e in errors["many.zip"]), errors
    sources = {s["run_id"] for b in run_json(capsys, *p.cli_args(), "bricks", TOPIC, "--all") for s in b["sources"]}
    assert {"run-good", "c-0", "c-19"} <= sources and "c-25" not in sources and "bomb-1" not in sources


OOM_READER = """
import json, resource, sys
from pathlib import Path
from nexus_assets import settings
from nexus_assets.ingest.runfiles import iter_run_file
limits = settings.Basics.from_env().input_limits()  # the limits as set for this process, as a command reads them
# The cap is set after imports: what is left is too little for the big file, plenty for the small.
size = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
cap = size + 96 * 1024 * 1024
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
out = []
for name in sys.argv[1:]:
    for item in iter_run_file(Path(name), name, limits=limits):
        out.append({"run_id": item.run_id} if hasattr(item, "run_id") else {"problem": item.problem})
print(json.dumps(out))
"""


def test_running_out_of_memory_on_one_file_is_reported_as_such_and_costs_that_file_only(tmp_path: Path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps(nexus_run("run-huge", [("user", "The vault. " * 6_000_000)])))
    small = tmp_path / "small.json"
    small.write_text(json.dumps(nexus_run("run-small", [("user", "The vault is small.")])))
    done = capped(OOM_READER, str(big), str(small), cap_mb=CAP_MB, timeout=120, env={"NEXUS_MAX_RUN_FILE_BYTES": str(1 << 30)})
    assert done.returncode == 0, done.stderr[-2000:]
    items = json.loads(done.stdout)
    assert "ran out of memory" in items[0]["problem"] and "not valid JSON" not in items[0]["problem"], items
    assert items[1:] == [{"run_id": "run-small"}]
