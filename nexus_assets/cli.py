"""The `nexus` command (DESIGN §7). Exit codes: 0 done; 1 the work ran but a check failed; 2 bad usage or input."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

from nexus_assets.core.manifest import chain_problems
from nexus_assets.core.models import Brick
from nexus_assets.vault import Vault, VaultBusy

DEFAULT_DB = "data/nexus.duckdb"
COMPILED_STATES = ("ACTIVE", "SEALING")


class UsageError(Exception):
    """Bad usage or input: exit 2 with the message."""


def emit(args: argparse.Namespace, data: Any, text: str | None = None) -> None:
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False, default=str))
    elif text is not None:
        print(text)


def brick_json(b: Brick) -> dict:
    return b.model_dump(mode="json")


def one_line(text: str, width: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def open_vault(args: argparse.Namespace, *, write: bool = False, create: bool = False):
    """The vault; only commands that build it (sync, discover, activate) may create the file."""
    db = Path(args.db)
    if not create and not db.exists():
        raise UsageError(f"no vault at {db}; run `nexus sync` first, or pass --db PATH")
    return Vault.open(db, read_only=not write)


DEFAULT_DIRS = {"runs_dir": ("NEXUS_RUNS_DIR", "data/runs"), "topics_dir": ("NEXUS_TOPICS_DIR", "data/topics")}


def resolve_dirs(args: argparse.Namespace) -> None:
    """Fill --runs-dir/--topics-dir not given: the environment, else the directories the vault
    was last synced from (invariant 13), else ./data. An explicit flag always wins."""
    wanted = [name for name in DEFAULT_DIRS if hasattr(args, name) and getattr(args, name) is None]
    recorded: dict[str, str] = {}
    pending = [n for n in wanted if not os.environ.get(DEFAULT_DIRS[n][0])]
    if pending and Path(args.db).exists():
        import duckdb

        try:
            with Vault.open(args.db, read_only=True) as vault:
                recorded = vault.recorded_sources()
        except duckdb.Error:
            # A process that has written the file cannot also open it read-only; read it read-write.
            with Vault.open(args.db) as vault:
                recorded = vault.recorded_sources()
    for name in wanted:
        env, default = DEFAULT_DIRS[name]
        setattr(args, name, os.environ.get(env) or recorded.get(name) or default)


def require_topic(vault: Vault, topic_id: str) -> None:
    if vault.topic(topic_id) is None:
        known = ", ".join(t.topic_id for t in vault.topics()) or "none"
        raise UsageError(f"unknown topic {topic_id!r}; topics in the vault: {known}")


INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C


class _SignalLog:
    """Notes SIGINT/SIGTERM arriving while installed, through the interpreter's wakeup fd."""

    def __init__(self) -> None:
        self._read, write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(write, False)
        self._write = write
        self._previous = signal.set_wakeup_fd(write)
        self._seen = False

    def stopped(self) -> bool:
        try:
            while data := os.read(self._read, 512):
                self._seen |= any(b in (signal.SIGINT, signal.SIGTERM) for b in data)
        except BlockingIOError:
            pass
        return self._seen

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous)
        os.close(self._read)
        os.close(self._write)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _dagster_instance(topics: list[str]):
    """The Dagster instance with the topics registered. Dagster creates its storage on first use,
    and several first syncs at once race inside that set-up, so it happens under a file lock."""
    from dagster import DagsterInstance

    home = os.environ.get("DAGSTER_HOME")
    if not home:
        instance = DagsterInstance.ephemeral()
        instance.add_dynamic_partitions("topics", topics)
        return instance
    import fcntl

    Path(home).mkdir(parents=True, exist_ok=True)
    with open(Path(home) / ".nexus-setup.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            instance = DagsterInstance.get()
            known = set(instance.get_dynamic_partitions("topics"))
            missing = [t for t in topics if t not in known]
            if missing:
                instance.add_dynamic_partitions("topics", missing)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return instance


def cmd_sync(args: argparse.Namespace) -> int:
    from nexus_assets.definitions import build_defs
    from nexus_assets.topicfiles import read_topic_files

    topics_dir, runs_dir = Path(args.topics_dir), Path(args.runs_dir)
    if not topics_dir.is_dir():
        raise UsageError(f"topics folder {topics_dir} does not exist; pass --topics-dir")
    if not runs_dir.is_dir():
        raise UsageError(f"runs folder {runs_dir} does not exist; pass --runs-dir")
    if args.open_after:
        from nexus_assets.core.order import normalize_timestamp

        if normalize_timestamp(args.open_after) is None:
            raise UsageError(f"--open-after {args.open_after!r} is not an ISO time such as 2026-11-01T00:00:00Z")
    files = read_topic_files(topics_dir)
    for tf in files:
        if tf.problem:
            print(f"warning: {tf.problem}", file=sys.stderr)
    defined = {tf.topic.topic_id: tf.topic for tf in files if tf.topic is not None}
    if args.topic:
        for t in args.topic:
            if t not in defined:
                raise UsageError(f"unknown topic {t!r}; topic files in {topics_dir} define: {', '.join(sorted(defined)) or 'none'}")
            if defined[t].state not in COMPILED_STATES and defined[t].state != "LOCKED":
                raise UsageError(f"topic {t!r} is {defined[t].state}; activate it first (`nexus activate {t}`)")
        selected = list(dict.fromkeys(args.topic))
    else:
        selected = sorted(t for t, topic in defined.items() if topic.state in COMPILED_STATES)
        skipped = sorted(t for t, topic in defined.items() if topic.state not in COMPILED_STATES)
        if skipped:
            print(f"not compiled (not ACTIVE): {', '.join(skipped)}", file=sys.stderr)
    if not selected:
        raise UsageError(f"no ACTIVE topics in {topics_dir}; nothing to sync")

    # Every topic file is recorded, so `nexus topics` shows DRAFT ones too; only compiled ones sync.
    from nexus_assets.lifecycle import TopicFileError, record_topic_files

    with open_vault(args, write=True, create=True) as vault:
        try:
            record_topic_files(vault, files)
        except TopicFileError as exc:
            raise UsageError(f"{exc}. Nothing was compiled.") from None
        vault.record_sources(runs_dir=runs_dir, topics_dir=topics_dir)

    defs = build_defs(
        db_path=args.db,
        runs_dir=str(runs_dir),
        topics_dir=str(topics_dir),
        extractor=args.extractor,
        replay_only=args.replay_only,
        open_after=args.open_after,
        progress=not args.json,
    )
    job = defs.resolve_job_def("sync_topics")
    instance = _dagster_instance(selected)
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}

    results, failed, interrupted = [], False, False
    # Dagster turns Ctrl-C/SIGTERM during a topic into a failed step and returns; between topics
    # they raise here. Either way the whole sync stops: the next topic would hang on the same file.
    previous_term = signal.signal(signal.SIGTERM, signal.default_int_handler) if _main_thread() else None
    # Dagster swaps in its own handlers while a topic runs, and a step may report the interrupt
    # as any error; the wakeup fd records every signal whatever handler took it.
    signals = _SignalLog() if _main_thread() else None
    try:
        for n, topic_id in enumerate(selected, 1):
            if not args.json:
                print(f"[{n}/{len(selected)}] syncing {topic_id}", file=sys.stderr, flush=True)
            result = job.execute_in_process(partition_key=topic_id, instance=instance, raise_on_error=False, run_config=quiet)
            checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
            failures = [e.event_specific_data.error for e in result.all_events if e.is_step_failure and e.event_specific_data and e.event_specific_data.error]
            errors = [f"{e.step_key}: {e.event_specific_data.error.message.strip()}" for e in result.all_events if e.is_step_failure and e.event_specific_data and e.event_specific_data.error]
            ok = result.success and all(checks.values())
            failed |= not ok
            results.append({"topic_id": topic_id, "success": result.success, "dagster_run_id": result.run_id, "checks": checks, "errors": errors})
            if (signals and signals.stopped()) or any("Interrupt" in (f.cls_name or "") for f in failures):
                interrupted = True
                break
            for err in errors:
                print(f"error: {topic_id}: {err}", file=sys.stderr)
            for name, passed in checks.items():
                if not passed:
                    print(f"check failed: {topic_id}: {name}", file=sys.stderr)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
        if signals:
            signals.close()
    if interrupted:
        done = [r["topic_id"] for r in results if r["success"]]
        print(
            f"nexus: interrupted; the sync stopped{' after ' + ', '.join(done) if done else ''}. "
            "What was committed is kept; run `nexus sync` again to finish.",
            file=sys.stderr,
        )
        return INTERRUPTED

    # Read-write: DuckDB refuses a read-only handle in a process that just wrote the same file.
    with open_vault(args, write=True) as vault:
        counts = vault.brick_counts()
        for r in results:
            m = vault.latest_manifest(r["topic_id"])
            r["manifest_hash"] = m.manifest_hash if m else None
            r["bricks"] = counts.get(r["topic_id"], {})
        errors_total = len(vault.ingestion_errors())
    lines = []
    for r in results:
        status = "ok" if r["success"] and all(r["checks"].values()) else "FAILED"
        by_state = ", ".join(f"{k} {v}" for k, v in sorted(r["bricks"].items())) or "no bricks"
        lines.append(f"{r['topic_id']}: {status}; {by_state}; manifest {(r['manifest_hash'] or '-')[:16]}")
    if errors_total:
        lines.append(f"{errors_total} ingestion errors recorded; see `nexus errors`")
    emit(args, results, "\n".join(lines))
    return 1 if failed else 0


def cmd_topics(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        counts = vault.brick_counts()
        rows = []
        for t in vault.topics():
            m = vault.latest_manifest(t.topic_id)
            by_state = counts.get(t.topic_id, {})
            rows.append(
                {
                    "topic_id": t.topic_id,
                    "display_name": t.display_name,
                    "state": t.state,
                    "ordering_rule": t.ordering_rule,
                    "bricks": by_state,
                    "visible_bricks": sum(n for s, n in by_state.items() if s != "SUPERSEDED"),
                    "manifest_hash": m.manifest_hash if m else None,
                }
            )
    text = "\n".join(
        f"{r['topic_id']:<28} {r['state']:<8} {r['visible_bricks']:>5} bricks  "
        + (", ".join(f"{k} {v}" for k, v in sorted(r["bricks"].items())) or "-")
        for r in rows
    ) or "no topics yet; run `nexus sync`"
    emit(args, rows, text)
    return 0


def cmd_bricks(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        require_topic(vault, args.topic)
        bricks = vault.bricks(args.topic)
    if not args.all:
        bricks = [b for b in bricks if b.state != "SUPERSEDED"]
    text = "\n".join(
        f"{'-' if b.order_index is None else b.order_index:>4} {b.state:<10} {b.brick_id[:12]}"
        f"{' STALE' if b.stale else ''}{' ABANDONED-BRANCH' if b.abandoned else ''}"
        f"{' (' + str(len(b.sources)) + ' sources)' if len(b.sources) > 1 else ''}"
        f"{' superseded by ' + b.superseded_by[:12] if b.superseded_by else ''}  {one_line(b.content)}"
        for b in bricks
    ) or f"no bricks in {args.topic}"
    emit(args, [brick_json(b) for b in bricks], text)
    return 0


def cmd_rejections(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        require_topic(vault, args.topic)
        rows = vault.rejections(args.topic)
    text = "\n".join(
        f"{r['reason']:<18} {r['run_id']}  {r['json_path']}  {one_line(repr(r['verbatim_quote']), 60)}" for r in rows
    ) or f"no rejections in {args.topic}"
    emit(args, rows, text)
    return 0


def cmd_manifest(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        require_topic(vault, args.topic)
        m = vault.latest_manifest(args.topic)
    if m is None:
        raise UsageError(f"topic {args.topic!r} has no manifest yet; run `nexus sync --topic {args.topic}`")
    data = {
        "topic_id": m.topic_id,
        "manifest_hash": m.manifest_hash,
        "previous_hash": m.previous_hash,
        "bricks": [e.model_dump() for e in m.bricks],
    }
    text = f"{m.topic_id} manifest {m.manifest_hash}\n" + "\n".join(
        f"{e.order_index:>4} {e.state:<10} {e.brick_id}" for e in m.bricks
    )
    emit(args, data, text)
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from nexus_assets.trace import trace_brick

    with open_vault(args) as vault:
        matches = vault.conn.execute(
            "SELECT brick_id FROM bricks WHERE brick_id LIKE ? || '%' ORDER BY brick_id LIMIT 2", [args.brick_id]
        ).fetchall()
        if not matches:
            raise UsageError(f"no brick {args.brick_id!r}; list them with `nexus bricks TOPIC`")
        if len(matches) > 1:
            raise UsageError(f"brick id prefix {args.brick_id!r} is ambiguous; give more characters")
        traced = trace_brick(vault, matches[0][0])
    lines = [
        f"brick {traced['brick_id']} [{traced['state']}]{' STALE' if traced['stale'] else ''}"
        f"{' ABANDONED BRANCH (every source)' if traced['abandoned'] else ''} in {traced['topic_id']}"
    ]
    for t in traced["traces"]:
        lines.append(
            f"\n{t['run_id']} {t['json_path']} [{t['start']}:{t['end']}] {t['node_type'] or 'node'}, {t['branch']} branch; "
            f"checksum {t['node_checksum'][:16]}… "
            f"({'matches current source' if t['current'] else 'DRIFTED: ' + (t['problem'] or '')})"
        )
        lines.append(t["node_text"][: t["start"]] + "⟦" + t["node_text"][t["start"] : t["end"]] + "⟧" + t["node_text"][t["end"] :])
    emit(args, traced, "\n".join(lines))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from nexus_assets.drift import file_drift
    from nexus_assets.lifecycle import immutability_problems

    with open_vault(args, write=True) as vault:
        bricks = vault.bricks()
        drifts = file_drift(vault, bricks)
        vault.flag_stale(d.brick_id for d in drifts)
        chain, final = [], []
        for t in vault.topics():
            chain += chain_problems(vault.manifests(t.topic_id))
            final += immutability_problems(vault, t.topic_id, with_chain=False)
    data = {
        "ok": not drifts and not chain and not final,
        "bricks_checked": len(bricks),
        "sources_checked": sum(len(b.sources) for b in bricks),
        "drift": [
            {"brick_id": d.brick_id, "topic_id": d.topic_id, **d.address.model_dump(), "problem": d.problem} for d in drifts
        ],
        "stale_bricks": sorted({d.brick_id for d in drifts}),
        "chain_problems": chain,
        "immutability_problems": final,
    }
    lines = [f"checked {data['sources_checked']} source addresses of {len(bricks)} bricks"]
    lines += [f"DRIFT {d.brick_id[:12]} ({d.topic_id}): {d.problem}" for d in drifts]
    lines += [f"CHAIN {p}" for p in chain]
    lines += [f"FINAL {p}" for p in final]
    lines.append(
        "ok"
        if data["ok"]
        else f"{len(data['stale_bricks'])} stale bricks, {len(chain)} manifest chain problems, {len(final)} FINAL brick problems"
    )
    emit(args, data, "\n".join(lines))
    return 0 if data["ok"] else 1


def cmd_errors(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        rows = vault.ingestion_errors()
    text = "\n".join(f"{r['file']}{' [' + r['conversation'] + ']' if r['conversation'] else ''}: {r['problem']}" for r in rows)
    emit(args, rows, text or "no ingestion errors")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from nexus_assets.extractors import VaultCallStore
    from nexus_assets.llm.chunking import DEFAULT_TOKEN_BUDGET
    from nexus_assets.llm.client import LLMConfig, LLMConfigError
    from nexus_assets.planning import _NoCalls, current_runs, plan_topic
    from nexus_assets.topicfiles import read_topic_files

    env = dict(os.environ)
    # Planning sends nothing, so only the model (part of every call key) and prices matter.
    env.setdefault("OPENAI_BASE_URL", "http://unused.invalid/v1")
    env.setdefault("OPENAI_API_KEY", "unused")
    try:
        config = LLMConfig.from_env(env)
    except LLMConfigError as exc:
        raise UsageError(f"{exc}; the plan needs NEXUS_LLM_MODEL because the model is part of every call key") from None
    topics = {tf.topic.topic_id: tf.topic for tf in read_topic_files(Path(args.topics_dir)) if tf.topic is not None}
    if args.topic:
        unknown = [t for t in args.topic if t not in topics]
        if unknown:
            raise UsageError(f"unknown topic {unknown[0]!r}; topic files define: {', '.join(sorted(topics)) or 'none'}")
        selected = [topics[t] for t in dict.fromkeys(args.topic)]
    else:
        selected = [t for _, t in sorted(topics.items()) if t.state in COMPILED_STATES]
    runs = current_runs(Path(args.runs_dir))
    budget = args.token_budget or DEFAULT_TOKEN_BUDGET
    db = Path(args.db)
    plans = []
    if db.exists():
        with open_vault(args) as vault:
            store = VaultCallStore(vault)
            plans = [plan_topic(t, runs, config=config, store=store, token_budget=budget) for t in selected]
    else:
        plans = [plan_topic(t, runs, config=config, store=_NoCalls(), token_budget=budget) for t in selected]
    data = {"model": config.model, "token_budget": budget, "topics": [p.as_dict() for p in plans]}
    lines = [f"model {config.model}, {budget} source tokens per call; nothing was sent"]
    for p in plans:
        cost = f"${p.cost_usd:.4f}" if p.cost_usd is not None else "cost unknown (set NEXUS_PRICE_IN_PER_MTOK/NEXUS_PRICE_OUT_PER_MTOK)"
        lines.append(
            f"{p.topic_id}: {p.runs_in_scope}/{p.runs_total} runs in scope; {p.calls} calls "
            f"({p.cached_calls} cached, {p.uncached_calls} to send); ~{p.input_tokens_to_send} input + "
            f"~{p.output_tokens_to_send} output tokens to send (~{p.input_tokens_without_prefilter} input without the "
            f"pre-filter); {cost}"
        )
    emit(args, data, "\n".join(lines))
    return 0


def cmd_calls(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        if args.topic:
            require_topic(vault, args.topic)
        rows = vault.llm_calls(args.topic)
    text = "\n".join(
        f"{str(r['recorded_at'])[:19]} {r['status']:<6} {r['topic_id']} {r['run_id']} chunk {r['chunk_index'] + 1}/{r['chunk_count']} "
        f"{r['model']} {r['prompt_version']} in={r['prompt_tokens']} out={r['completion_tokens']} {r['latency_ms']}ms "
        f"key {r['call_key'][:12]}{' — ' + r['error'] if r['error'] else ''}"
        for r in rows
    )
    emit(args, rows, text or "no LLM calls recorded")
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    with open_vault(args, write=True) as vault:
        try:
            changed = vault.close_run(args.run_id)
        except KeyError:
            raise UsageError(f"no run {args.run_id!r} in the vault") from None
    emit(
        args,
        {"run_id": args.run_id, "closed": True, "changed": changed},
        f"run {args.run_id} {'closed' if changed else 'was already closed'}; bricks move to FORMING on the next sync",
    )
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from nexus_assets.web.server import LOOPBACK_NAMES, make_server

    if not Path(args.db).exists():
        raise UsageError(f"no vault at {args.db}; run `nexus sync` first, or pass --db PATH")
    if args.host not in LOOPBACK_NAMES:
        print(f"warning: --host {args.host} makes the vault readable from other machines", file=sys.stderr)
    try:
        server = make_server(args.db, args.host, args.port, log_requests=True)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}; pass another --port (0 picks a free one)") from None
    print(f"Nexus trace viewer (read-only) on {server.url} ; Ctrl-C stops it", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nexus", description="Compile conversations into verbatim, traceable bricks.")
    parser.add_argument("--db", default=os.environ.get("NEXUS_DB", DEFAULT_DB), help=f"vault file (default {DEFAULT_DB})")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--db", default=argparse.SUPPRESS, help="vault file")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("sync", parents=[common], help="compile topics through the Dagster asset graph")
    p.add_argument("--topic", action="append", help="a topic to sync (repeatable); default every ACTIVE topic")
    p.add_argument("--runs-dir", default=None, help="default: $NEXUS_RUNS_DIR, else the vault's recorded one, else data/runs")
    p.add_argument("--topics-dir", default=None, help="default: $NEXUS_TOPICS_DIR, else the vault's recorded one, else data/topics")
    p.add_argument("--extractor", choices=["embedded", "openai"], default=os.environ.get("NEXUS_EXTRACTOR", "embedded"))
    p.add_argument("--replay-only", action="store_true", help="openai: fail on a cache miss instead of calling the model")
    p.add_argument(
        "--open-after",
        default=os.environ.get("NEXUS_OPEN_AFTER"),
        help="export conversations updated at or after this ISO time are OPEN (default: all CLOSED)",
    )
    p.set_defaults(func=cmd_sync)
    p = sub.add_parser("plan", parents=[common], help="what a sync with the openai extractor would call and cost; sends nothing")
    p.add_argument("--topic", action="append", help="a topic to plan (repeatable); default every ACTIVE topic")
    p.add_argument("--runs-dir", default=None, help="default: $NEXUS_RUNS_DIR, else the vault's recorded one, else data/runs")
    p.add_argument("--topics-dir", default=None, help="default: $NEXUS_TOPICS_DIR, else the vault's recorded one, else data/topics")
    p.add_argument("--token-budget", type=int, default=None, help="source tokens per call (default 3000)")
    p.set_defaults(func=cmd_plan)
    p = sub.add_parser("calls", parents=[common], help="the audit trail of LLM calls")
    p.add_argument("--topic", help="only this topic's calls")
    p.set_defaults(func=cmd_calls)

    sub.add_parser("topics", parents=[common], help="topics with state and brick counts").set_defaults(func=cmd_topics)
    p = sub.add_parser("bricks", parents=[common], help="a topic's visible bricks in order")
    p.add_argument("topic")
    p.add_argument("--all", action="store_true", help="include superseded bricks")
    p.set_defaults(func=cmd_bricks)
    p = sub.add_parser("rejections", parents=[common], help="rejected pointers with reason codes")
    p.add_argument("topic")
    p.set_defaults(func=cmd_rejections)
    p = sub.add_parser("manifest", parents=[common], help="the topic's manifest and its hash")
    p.add_argument("topic")
    p.set_defaults(func=cmd_manifest)
    p = sub.add_parser("trace", parents=[common], help="a brick's source nodes with its text marked")
    p.add_argument("brick_id")
    p.set_defaults(func=cmd_trace)
    sub.add_parser(
        "verify", parents=[common], help="re-check sources against run files, manifest chains and sealed (FINAL) bricks"
    ).set_defaults(func=cmd_verify)
    sub.add_parser("errors", parents=[common], help="ingestion errors").set_defaults(func=cmd_errors)
    p = sub.add_parser("close", parents=[common], help="close a run (one-way)")
    p.add_argument("run_id")
    p.set_defaults(func=cmd_close)
    from nexus_assets.lifecycle_cli import add_lifecycle_commands

    add_lifecycle_commands(sub, common)
    p = sub.add_parser("serve", help="the read-only trace viewer (a local web app)")
    p.add_argument("--db", default=argparse.SUPPRESS, help="vault file")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1, this machine only)")
    p.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        resolve_dirs(args)
        return args.func(args)
    except UsageError as exc:
        print(f"nexus: {exc}", file=sys.stderr)
        return 2
    except VaultBusy as exc:
        print(f"nexus: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
