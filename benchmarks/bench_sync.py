"""Benchmark `nexus sync` against the cost of merely reading its inputs.

Generates deterministic synthetic Nexus runs (and optionally a ChatGPT export), then times, in one
process and over the same bytes:

  floor   read every run file, json.loads it and sha256 its bytes
  floor + sentences
          the floor, plus every string split into sentences once (the least Python work per
          character a compiler of quotes can do; it shows how far the floor itself is from Python)
  full    a first `nexus sync` into a fresh DuckDB vault
  resync  the same sync again with nothing changed
  export  (--with-export) a subprocess `nexus sync` of one big conversations.json (edited prompts
          and regenerated answers as branches, emoji and CJK text), with peak RSS
  topics  `nexus topics` against a bare `python -c "import duckdb"` (best of 5 each)

Absolute seconds depend on the machine; the ratios full/floor and resync/floor are the figures to
compare between commits.

    python benchmarks/bench_sync.py --runs 2000 --seed 1 [--json] [--with-export --export-mb 200]
    python benchmarks/bench_sync.py --runs-mb 100 --with-export --export-mb 200   # the issue-11 scale
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import io
import json
import math
import os
import pstats
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXPORTS_MODULE = REPO / "nexus_assets" / "ingest" / "formats" / "exports.py"

# Keywords of the two generated topics (same style as data/topics); every sentence that carries
# one becomes a pointer, so their share drives how much compiler work there is.
TOPIC_KEYWORDS = {
    "nexus-server-sync": ["sync", "brick", "bricks", "compiler", "manifest"],
    "storage-decisions": ["duckdb", "vault", "checksum", "checksums", "parquet", "append-only"],
}
KEYWORDS = [k for ks in TOPIC_KEYWORDS.values() for k in ks]
KEYWORD_SHARE = 0.16  # plus shared-pool sentences and code blocks: ~20% of sentences overall
SHARED_SHARE = 0.08  # sentences drawn from a cross-run pool, so LINK (and some SUPERSEDE) happens
OPEN_SHARE = 0.10
MAX_MESSAGE = 8192

WORDS = (
    "the a we our this that each every one two new old first last next data file files run runs "
    "message messages topic topics path paths node nodes text quote quotes order rule rules state "
    "states table tables query queries index test tests user users team review schema batch batches "
    "stream streams export exports import parser offset offsets hash hashes record records key keys "
    "should must can will would could may might keep store read write load scan split merge check "
    "compare sort filter group count update insert delete commit retry skip return raise log "
    "before after during while because unless when where since until once again always never "
    "only also still just already quickly slowly safely exactly simply later early fast slow "
    "small large stable broken clean empty full partial final open closed local remote "
    "is are was be been has have had does do not no more less most least than then into from with "
    "without over under between across per about for of in on at by to as and or but if so"
).split()
# Real chats mix scripts; offsets are code points, so these exercise the non-ASCII paths.
INTL = ["同步之前先校验 checksum。", "ブリックは逐語的に保存されます。", "数据不能丢失 🙂", "Ship it 🚀✅", "vault 🔒 と manifest"]
OPENERS = ["So", "Then", "Also", "Honestly", "In practice", "For now", "Right", "Okay", "Note that", "Yes"]
LANGS = ["python", "sql", "bash", "yaml", "json", ""]
CODE_LINES = [
    "for run in runs:",
    "    vault.store(run)",
    "SELECT run_id, count(*) FROM bricks GROUP BY run_id;",
    "con = duckdb.connect('data/nexus.duckdb')",
    "nexus sync --topic nexus-server-sync",
    "digest = hashlib.sha256(data).hexdigest()",
    "if checksum != expected:",
    "    raise DriftError(path)",
    "topic_id: storage-decisions",
    "    return [b for b in bricks if b.state != 'SUPERSEDED']",
    "x = compute(batch, offset=offset)",
    "print(json.dumps(manifest, indent=2))",
    "def load(path):",
    "    with open(path) as fh:",
    "        return json.load(fh)",
]
BASE_TIME = datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc)


def lognormal_int(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, int(rng.lognormvariate(math.log(median), sigma))))


class ChatText:
    """Deterministic chat-like text: prose, lists, code blocks, headings, some shared sentences."""

    def __init__(self, rng: random.Random, pool_size: int):
        self.rng = rng
        self.pool = [self._fresh_sentence(keyword_share=0.5) for _ in range(pool_size)]

    def _fresh_sentence(self, keyword_share: float = KEYWORD_SHARE) -> str:
        rng = self.rng
        words = rng.choices(WORDS, k=rng.randint(5, 22))
        if rng.random() < keyword_share:
            words.insert(rng.randrange(len(words) + 1), rng.choice(KEYWORDS))
        if rng.random() < 0.12:
            words.insert(rng.randrange(len(words) + 1), f"`{rng.choice(WORDS)}_{rng.choice(WORDS)}`")
        if rng.random() < 0.25:
            words.insert(rng.randrange(1, len(words) + 1), ",")
        text = " ".join(words).replace(" ,", ",")
        if rng.random() < 0.15:
            text = f"{rng.choice(OPENERS)}, {text}"
        if rng.random() < 0.05:
            text = f"{text[:-1]} {rng.choice(INTL)}"
        return text[0].upper() + text[1:] + rng.choice(".....?!")

    def sentence(self) -> str:
        rng = self.rng
        if rng.random() >= SHARED_SHARE:
            return self._fresh_sentence()
        shared = rng.choice(self.pool)
        roll = rng.random()
        if roll < 0.15:
            # Same fingerprint, different bytes: LINK must still happen.
            return shared.upper() if rng.random() < 0.3 else shared.replace(" ", "  ", 1)
        if roll < 0.25:
            # A strict superset of a shared sentence: SUPERSEDE candidates when the other is OPEN.
            return shared[:-1] + f" and {' '.join(rng.choices(WORDS, k=rng.randint(2, 6)))}."
        return shared

    def block(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.62:
            return " ".join(self.sentence() for _ in range(rng.randint(1, 5)))
        if roll < 0.82:
            ordered = rng.random() < 0.4
            return "\n".join(
                f"{i}. {self.sentence()}" if ordered else f"- {self.sentence()}" for i in range(1, rng.randint(3, 8))
            )
        if roll < 0.93:
            lines = rng.choices(CODE_LINES, k=rng.randint(2, 14))
            return f"```{rng.choice(LANGS)}\n" + "\n".join(lines) + "\n```"
        return f"{'#' * rng.randint(2, 3)} {' '.join(rng.choices(WORDS, k=rng.randint(2, 5))).capitalize()}"

    def message(self, target: int) -> str:
        parts: list[str] = []
        size = 0
        while size < target:
            part = self.block()
            if parts and size + len(part) > MAX_MESSAGE:
                break
            parts.append(part)
            size += len(part) + 2
        return "\n\n".join(parts)

    def conversation(self) -> list[tuple[str, str]]:
        """(role, content) pairs; user turns are shorter than assistant turns, as in real chats."""
        rng = self.rng
        turns = lognormal_int(rng, 14, 0.6, 4, 60)
        out = []
        if rng.random() < 0.1:
            out.append(("system", self.message(lognormal_int(rng, 120, 0.5, 40, 600))))
        for i in range(turns - len(out)):
            role = "user" if i % 2 == 0 else "assistant"
            median = 110 if role == "user" else 330  # message() overshoots its target by about one block
            out.append((role, self.message(lognormal_int(rng, median, 1.0, 20, MAX_MESSAGE))))
        return out


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def write_topics(topics_dir: Path) -> None:
    topics_dir.mkdir(parents=True)
    (topics_dir / "nexus-server-sync.yaml").write_text(
        "topic_id: nexus-server-sync\n"
        "display_name: Nexus Server Sync Architecture\n"
        "extraction_policy:\n"
        "  scope_description: Technical constraints and data-flow rules of the sync engine.\n"
        "  target_node_types: [user_message, assistant_message]\n"
        f"  required_keywords: [{', '.join(TOPIC_KEYWORDS['nexus-server-sync'])}]\n"
        "  exclusion_criteria: [General pleasantries]\n"
        "ordering_rule: chronological\n"
        "state: ACTIVE\n"
    )
    (topics_dir / "storage-decisions.yaml").write_text(
        "topic_id: storage-decisions\n"
        "display_name: Storage and Vault Decisions\n"
        "extraction_policy:\n"
        "  scope_description: Decisions about where and how data is stored (DuckDB, files, checksums, retention).\n"
        "  target_node_types: [user_message, assistant_message]\n"
        f"  required_keywords: [{', '.join(TOPIC_KEYWORDS['storage-decisions'])}]\n"
        "  exclusion_criteria: [Speculation about vendors not being evaluated]\n"
        "ordering_rule: source-run-order\n"
        "state: ACTIVE\n"
    )


def write_runs(runs_dir: Path, n: int, seed: int, target_bytes: int | None = None) -> dict:
    """N Nexus run files (or as many as reach `target_bytes`), one month folder each (the scanner
    recurses). Returns size statistics."""
    rng = random.Random(seed)
    text = ChatText(rng, pool_size=max(50, n // 4))
    lengths: list[int] = []
    total = open_runs = 0
    start = BASE_TIME
    i = -1
    while (total < target_bytes) if target_bytes else (i + 1 < n):
        i += 1
        start += timedelta(minutes=rng.randint(5, 600))
        status = "OPEN" if rng.random() < OPEN_SHARE else "CLOSED"
        open_runs += status == "OPEN"
        t = start
        messages = []
        for role, content in text.conversation():
            t += timedelta(seconds=rng.randint(5, 400))
            messages.append({"role": role, "content": content, "timestamp": iso(t)})
            lengths.append(len(content))
        doc = {"run_id": f"bench-run-{i:06d}", "status": status, "started_at": iso(start), "messages": messages}
        folder = runs_dir / start.strftime("%Y-%m")
        folder.mkdir(parents=True, exist_ok=True)
        data = json.dumps(doc, ensure_ascii=False, indent=1).encode()
        (folder / f"bench-run-{i:06d}.json").write_bytes(data)
        total += len(data)
    lengths.sort()
    return {
        "bytes": total,
        "runs": i + 1,
        "open_runs": open_runs,
        "messages": len(lengths),
        "message_chars_median": int(statistics.median(lengths)),
        "message_chars_p99": lengths[int(len(lengths) * 0.99)],
        "message_chars_max": lengths[-1],
    }


def write_chatgpt_export(path: Path, target_bytes: int, seed: int) -> dict:
    """A ChatGPT-style conversations.json of about `target_bytes`, written one conversation at a
    time so the generator never holds more than one conversation in memory."""
    rng = random.Random(seed + 7919)
    text = ChatText(rng, pool_size=2000)

    def uid() -> str:
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    t = BASE_TIME
    count = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        fh.write("[")
        while fh.tell() < target_bytes:
            t += timedelta(minutes=rng.randint(5, 600))
            created = t.timestamp()
            root = uid()
            mapping = {root: {"id": root, "message": None, "parent": None, "children": []}}
            parent, clock = root, created

            def add(role: str, content: str, under: str) -> str:
                node = uid()
                mapping[node] = {
                    "id": node,
                    "message": {
                        "id": node,
                        "author": {"role": role, "name": None, "metadata": {}},
                        "create_time": clock,
                        "update_time": None,
                        "content": {"content_type": "text", "parts": [content]},
                        "status": "finished_successfully",
                        "end_turn": role == "assistant" or None,
                        "weight": 1.0,
                        "metadata": {"request_id": uid()[:18], "timestamp_": "absolute"},
                        "recipient": "all",
                        "channel": None,
                    },
                    "parent": under,
                    "children": [],
                }
                mapping[under]["children"].append(node)
                return node

            for role, content in text.conversation():
                clock += rng.randint(5, 400)
                if rng.random() < 0.06:
                    # An edited prompt or a regenerated answer: the first try stays as an abandoned branch.
                    add(role, text.message(len(content)), parent)
                parent = add(role, content, parent)
            conv_id = uid()
            conversation = {
                "title": " ".join(rng.choices(WORDS, k=4)).capitalize(),
                "create_time": created,
                "update_time": clock,
                "mapping": mapping,
                "moderation_results": [],
                "current_node": parent,
                "conversation_id": conv_id,
                "id": conv_id,
            }
            if count:
                fh.write(",\n")
            json.dump(conversation, fh, ensure_ascii=False)
            count += 1
        fh.write("]\n")
    return {"bytes": path.stat().st_size, "conversations": count}


def run_files(runs_dir: Path) -> list[Path]:
    return sorted(p for p in runs_dir.rglob("*.json") if p.is_file())


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure_floor(files: list[Path], repeats: int = 5) -> tuple[float, float]:
    """Best (wall, CPU) of `repeats`: the floor is short, so one preemption would skew every ratio;
    the page cache is warm after the first pass, as it is for sync."""
    best, best_cpu = math.inf, math.inf
    for _ in range(repeats):
        c0, t0 = cpu_seconds(), time.perf_counter()
        for p in files:
            data = p.read_bytes()
            hashlib.sha256(data).hexdigest()
            json.loads(data)
        best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, cpu_seconds() - c0)
    return best, best_cpu


def measure_sentence_floor(files: list[Path]) -> float:
    """The floor plus the one per-character Python pass no sync can skip: every string of every run
    split into sentences once, with Nexus' own splitter (the embedded extractor's unit of work).
    It bounds from below what any compiler written in Python costs over the floor."""
    from nexus_assets.core.sentences import sentence_spans

    t0 = time.perf_counter()
    for p in files:
        data = p.read_bytes()
        hashlib.sha256(data).hexdigest()
        stack = [json.loads(data)]
        while stack:
            value = stack.pop()
            if isinstance(value, str):
                sentence_spans(value)
            elif isinstance(value, dict):
                stack.extend(value.values())
            elif isinstance(value, list):
                stack.extend(value)
    return time.perf_counter() - t0


def measure_export_floor(path: Path) -> float:
    """Streaming floor for an export: sha256 of the bytes plus an ijson pass over the array."""
    import ijson

    try:
        backend = ijson.get_backend("yajl2_c")
    except ImportError:
        backend = ijson
    t0 = time.perf_counter()
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    with path.open("rb") as fh:
        for _ in backend.items(fh, "item", use_float=True):
            pass
    return time.perf_counter() - t0


# `--no-recall`: every sync leaves the recall group out (the product's own switch), to see the
# compiler's cost apart from the model's.
NO_RECALL: list[str] = []


def sync_argv(db: Path, runs_dir: Path, topics_dir: Path) -> list[str]:
    return ["--db", str(db), "sync", "--json", "--runs-dir", str(runs_dir), "--topics-dir", str(topics_dir), *NO_RECALL]


def summarize(results: list[dict]) -> dict:
    bricks = {r["topic_id"]: r.get("bricks", {}) for r in results}
    return {
        "bricks": sum(sum(b.values()) for b in bricks.values()),
        "bricks_visible": sum(n for b in bricks.values() for s, n in b.items() if s != "SUPERSEDED"),
        "bricks_by_state": {
            s: sum(b.get(s, 0) for b in bricks.values()) for s in sorted({s for b in bricks.values() for s in b})
        },
        "manifests": {r["topic_id"]: r.get("manifest_hash") for r in results},
        "ok": all(r.get("success") and all(r.get("checks", {}).values()) for r in results),
    }


def sync_in_process(
    db: Path, runs_dir: Path, topics_dir: Path, profile: cProfile.Profile | None = None
) -> tuple[float, float, dict]:
    """Wall and CPU seconds (CPU counts DuckDB's threads too; wall >> CPU means waiting)."""
    from nexus_assets.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        c0, t0 = cpu_seconds(), time.perf_counter()
        if profile is not None:
            code = profile.runcall(main, sync_argv(db, runs_dir, topics_dir))
        else:
            code = main(sync_argv(db, runs_dir, topics_dir))
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    if code != 0:
        raise SystemExit(f"nexus sync exited {code}:\n{err.getvalue()[-3000:]}")
    return elapsed, cpu, summarize(json.loads(out.getvalue()))


def sync_subprocess(db: Path, runs_dir: Path, topics_dir: Path) -> tuple[float, float, int | None, dict]:
    """Wall and CPU seconds, child peak RSS (bytes) and summary. ru_maxrss of RUSAGE_CHILDREN is the maximum
    over every child ever waited for, so it only belongs to this sync if it rose (or was 0)."""
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "nexus_assets.cli", *sync_argv(db, runs_dir, topics_dir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=db.parent,
    )
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"nexus sync (export) exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    rose = after.ru_maxrss > before.ru_maxrss or before.ru_maxrss == 0
    peak = after.ru_maxrss * 1024 if rose else None  # Linux reports KiB
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    try:
        summary = summarize(json.loads(proc.stdout))
    except json.JSONDecodeError:
        raise SystemExit(f"nexus sync (export) printed no JSON summary:\n{proc.stdout[:2000]}\n{proc.stderr[-3000:]}") from None
    return elapsed, cpu, peak, summary


def best_of(argv: list[str], repeats: int = 5, cwd: Path | None = None) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, cwd=cwd)
        best = min(best, time.perf_counter() - t0)
    return best


def measure_read_command(db: Path) -> dict:
    """A read-only command's start-up cost against the floor of merely importing DuckDB."""
    floor = best_of([sys.executable, "-c", "import duckdb"])
    topics = best_of([sys.executable, "-m", "nexus_assets.cli", "--db", str(db), "topics"])
    return {"import_duckdb_s": round(floor, 3), "topics_s": round(topics, 3), "topics_over_import": round(topics / floor, 2)}


def profile_hotspots(profile: cProfile.Profile, top: int) -> list[dict]:
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, func), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "nexus_assets" not in filename or "nexus_assets_tests" in filename:
            continue
        if filename.endswith("cli.py") and func in ("main", "cmd_sync"):
            continue  # the entry points are always ~100% and say nothing
        rel = filename.split("nexus_assets", 1)[1].lstrip("/")
        rows.append(
            {"function": f"nexus_assets/{rel}:{line}({func})", "calls": ncalls, "tottime_s": round(tottime, 3), "cumtime_s": round(cumtime, 3)}
        )
    rows.sort(key=lambda r: r["cumtime_s"], reverse=True)
    return rows[:top]


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    # Binary units, as the kernel counts RSS: 1 GB (10^9 bytes) is 953.7 MiB.
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def print_table(fig: dict) -> None:
    g = fig["generated"]
    print(
        f"inputs: {g['runs']} runs ({g['open_runs']} OPEN), {g['messages']} messages, {fmt_bytes(g['bytes'])}; "
        f"message chars median {g['message_chars_median']}, p99 {g['message_chars_p99']}, max {g['message_chars_max']}"
    )
    print(f"bricks: {fig['bricks']} ({fig['bricks_visible']} visible) {fig['bricks_by_state']}")
    if not fig.get("recall_group", True):
        print("syncs ran without the recall group (--no-recall): no embeddings, no vector index")
    print()
    print(f"{'measurement':<22}{'seconds':>10}{'cpu s':>9}{'x floor':>10}{'MB/s':>9}{'peak RSS':>12}")
    mb = g["bytes"] / 1e6
    rows = (
        ("floor (read+json+sha)", fig["floor_s"], fig["floor_cpu_s"], 1.0, None),
        ("full sync", fig["full_s"], fig["full_cpu_s"], fig["full_over_floor"], fmt_bytes(fig["process_peak_rss"]) + "*"),
        ("no-change re-sync", fig["resync_s"], fig["resync_cpu_s"], fig["resync_over_floor"], None),
        ("floor + sentences", fig["sentence_floor_s"], None, fig["sentence_floor_over_floor"], None),
    )
    for name, s, cpu, ratio, rss in rows:
        print(f"{name:<22}{s:>10.3f}{'-' if cpu is None else f'{cpu:.2f}':>9}{ratio:>10.1f}{mb / s:>9.2f}{rss or '-':>12}")
    if "export" in fig:
        e = fig["export"]
        emb = e["bytes"] / 1e6
        print(
            f"\nexport: {fmt_bytes(e['bytes'])}, {e['conversations']} conversations, "
            f"{e['bricks']} bricks ({e['bricks_visible']} visible)"
        )
        print(f"{'export floor (ijson)':<22}{e['floor_s']:>10.3f}{'-':>9}{1.0:>10.1f}{emb / e['floor_s']:>9.2f}{'-':>12}")
        print(
            f"{'export sync (subproc)':<22}{e['sync_s']:>10.3f}{e['sync_cpu_s']:>9.2f}{e['sync_over_floor']:>10.1f}"
            f"{emb / e['sync_s']:>9.2f}{fmt_bytes(e['peak_rss']):>12}"
        )
    t = fig["topics"]
    print(f"{'nexus topics':<22}{t['topics_s']:>10.3f}   vs `import duckdb` {t['import_duckdb_s']:.3f} s: {t['topics_over_import']:.2f}x")
    print(
        f"\nratios (wall): full/floor {fig['full_over_floor']:.1f}  resync/floor {fig['resync_over_floor']:.1f}"
        f"  resync/full {fig['resync_over_full']:.3f}  throughput vs floor {1 / fig['full_over_floor']:.4f}x"
        f"  full/(floor + sentences) {fig['full_over_sentence_floor']:.1f}"
        + (f"  export/floor {fig['export']['sync_over_floor']:.1f}" if "export" in fig else "")
    )
    if fig["full_over_floor_cpu"]:
        print(f"ratios (cpu):  full/floor {fig['full_over_floor_cpu']:.1f}  resync/floor {fig['resync_over_floor_cpu']:.1f}")
    print("* benchmark process high-water mark after the full sync (includes imports and generation)")
    if not fig["resync_identical"]:
        print("WARNING: the no-change re-sync changed a manifest or brick counts")
    for phase, prof in fig.get("profile", {}).items():
        label = "full sync" if phase == "full" else "no-change re-sync"
        print(f"\ncProfile, {label} into a separate vault ({prof['seconds']:.1f} s under the profiler), top cumulative in nexus_assets:")
        print(f"{'cum s':>8}{'own s':>8}{'calls':>10}  function")
        for h in prof["hotspots"]:
            print(f"{h['cumtime_s']:>8.2f}{h['tottime_s']:>8.2f}{h['calls']:>10}  {h['function']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # 300 keeps the default near 1 minute on 2 cores: today a full sync plus re-sync costs ~0.15 s per run.
    parser.add_argument("--runs", type=int, default=300, help="synthetic Nexus runs to generate (default 300)")
    parser.add_argument("--runs-mb", type=float, help="instead of --runs: generate runs until they hold this many MB")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--with-export", action="store_true", help="also ingest a generated ChatGPT export (subprocess)")
    parser.add_argument("--export-mb", type=float, default=200.0, help="size of the generated export (default 200)")
    parser.add_argument("--profile", action="store_true", help="also cProfile a full sync and a re-sync into a fresh vault")
    parser.add_argument("--top", type=int, default=10, help="hotspots to show with --profile")
    parser.add_argument("--workdir", type=Path, help="generate here and keep it (default: a temp dir, removed)")
    parser.add_argument("--no-recall", action="store_true", help="leave the recall group (embeddings, vector index) out of every sync")
    args = parser.parse_args(argv)
    if args.no_recall:
        NO_RECALL.append("--no-recall")

    # The CLI would otherwise record every benchmark run in the user's Dagster instance.
    os.environ.pop("DAGSTER_HOME", None)
    warnings.filterwarnings("ignore")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="nexus-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()
    try:
        runs_dir, topics_dir = work / "runs", work / "topics"
        if runs_dir.exists() or topics_dir.exists():
            raise SystemExit(f"{work} already holds runs/ or topics/; pass an empty --workdir")
        fig: dict = {"seed": args.seed, "recall_group": not args.no_recall}
        t0 = time.perf_counter()
        write_topics(topics_dir)
        target = int(args.runs_mb * 1024 * 1024) if args.runs_mb else None
        fig["generated"] = write_runs(runs_dir, args.runs, args.seed, target)
        fig["generate_s"] = round(time.perf_counter() - t0, 3)

        # The export subprocess goes first: RUSAGE_CHILDREN's peak must not include another child.
        if args.with_export:
            if not EXPORTS_MODULE.exists():
                print("note: no nexus_assets/core/formats/exports.py; skipping --with-export", file=sys.stderr)
            else:
                export_runs = work / "export-runs"
                gen = write_chatgpt_export(export_runs / "conversations.json", int(args.export_mb * 1024 * 1024), args.seed)
                floor = measure_export_floor(export_runs / "conversations.json")
                seconds, cpu, peak, summary = sync_subprocess(work / "export.duckdb", export_runs, topics_dir)
                fig["export"] = {
                    **gen,
                    "floor_s": round(floor, 3),
                    "sync_s": round(seconds, 3),
                    "sync_cpu_s": round(cpu, 3),
                    "sync_over_floor": round(seconds / floor, 2),
                    "peak_rss": peak,
                    "bricks": summary["bricks"],
                    "bricks_visible": summary["bricks_visible"],
                }
                (export_runs / "conversations.json").unlink()

        # Import Dagster and the code location up front so the timings are sync work, not imports.
        t0 = time.perf_counter()
        import dagster  # noqa: F401

        import nexus_assets.cli  # noqa: F401
        import nexus_assets.definitions  # noqa: F401

        fig["import_s"] = round(time.perf_counter() - t0, 3)

        files = run_files(runs_dir)
        floor_before = measure_floor(files)
        full_s, full_cpu, full = sync_in_process(work / "vault.duckdb", runs_dir, topics_dir)
        fig["process_peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        resync_s, resync_cpu, again = sync_in_process(work / "vault.duckdb", runs_dir, topics_dir)
        floor_after = measure_floor(files)
        fig["floor_s"], floor_cpu = min(floor_before[0], floor_after[0]), min(floor_before[1], floor_after[1])
        sentence_floor = measure_sentence_floor(files)
        fig.update(
            full_s=full_s,
            full_cpu_s=round(full_cpu, 3),
            resync_s=resync_s,
            resync_cpu_s=round(resync_cpu, 3),
            full_over_floor=round(full_s / fig["floor_s"], 2),
            resync_over_floor=round(resync_s / fig["floor_s"], 2),
            resync_over_full=round(resync_s / full_s, 3),
            sentence_floor_s=round(sentence_floor, 3),
            sentence_floor_over_floor=round(sentence_floor / fig["floor_s"], 2),
            full_over_sentence_floor=round(full_s / sentence_floor, 2),
            # CPU ratios hold up better than wall ones when other work shares the cores.
            floor_cpu_s=round(floor_cpu, 3),
            full_over_floor_cpu=round(full_cpu / floor_cpu, 2) if floor_cpu else None,
            resync_over_floor_cpu=round(resync_cpu / floor_cpu, 2) if floor_cpu else None,
            bricks=full["bricks"],
            bricks_visible=full["bricks_visible"],
            bricks_by_state=full["bricks_by_state"],
            manifests=full["manifests"],
            resync_identical=full["manifests"] == again["manifests"] and full["bricks_by_state"] == again["bricks_by_state"],
        )
        for key in ("floor_s", "full_s", "resync_s"):
            fig[key] = round(fig[key], 3)
        fig["topics"] = measure_read_command(work / "vault.duckdb")

        if args.profile:
            # A separate fresh vault, so the profiler's overhead never touches the timed figures.
            fig["profile"] = {}
            for phase in ("full", "resync"):
                profile = cProfile.Profile()
                seconds = sync_in_process(work / "profile.duckdb", runs_dir, topics_dir, profile=profile)[0]
                fig["profile"][phase] = {"seconds": round(seconds, 3), "hotspots": profile_hotspots(profile, args.top)}
                if args.workdir:
                    profile.dump_stats(str(work / f"{phase}_sync.prof"))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)

    if args.json:
        print(json.dumps(fig, indent=2))
    else:
        print_table(fig)
    return 0 if fig["resync_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
