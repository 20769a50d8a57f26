"""A sync, whichever shell starts it: `check` the inputs (nothing written on a problem), then `run`:
record the topic files and sources, skip when nothing changed since the last clean sync, else
launch the Dagster jobs the UI and the schedule run (defs/jobs.py) on the instance the vault
shares, and read back what they left. No argparse and no printing: progress is told to an
`on_event` callback, and the shells render it."""

from __future__ import annotations

import importlib.metadata
import signal
from pathlib import Path
from typing import Callable

from nexus_assets import settings
from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.core.models import COMPILED_STATES
from nexus_assets.ingest.runfiles import file_stat, scan_run_files
from nexus_assets.embedding import embedder
from nexus_assets.core.timestamps import normalize_timestamp
from nexus_assets.topics.selection import SyncInputError, broken_topic_files, select_topics
from nexus_assets.defs.tags import TOPIC_TAG
from nexus_assets.extract.registry import extractor_kind
from nexus_assets.services.sync_models import CheckedSync, SyncEvent, SyncOutcome, SyncRequest
from nexus_assets.services.sync_parallel import compile_parallel, parallel_topics, topic_lock
from nexus_assets.services.sync_runs import (
    QUIET,
    SignalLog,
    apply_report,
    compile_report,
    compile_reports,
    dagster_instance,
    job_defs,
    main_thread,
    run_tags,
    shared_step_errors,
    step_errors,
    stopped,
    storage_failure,
)
from nexus_assets.vault.migrations import LATEST

# Besides the service's own names, the shells and tests import from here the topics' tag, the broken
# topic files' lines, the PostgreSQL topic lock and how many topics compile at once.
__all__ = [
    "SyncEvent", "SyncInputError", "SyncOutcome", "SyncRequest", "CheckedSync", "check", "run", "dagster_instance",
    "TOPIC_TAG", "broken_topic_files", "topic_lock", "parallel_topics",
]


# Checking


def check(request: SyncRequest) -> CheckedSync:
    """The folders, options and topic files, checked before anything is written."""
    topics_dir = require_folder(Path(request.topics_dir), "topics", "--topics-dir")
    runs_dir = require_folder(Path(request.runs_dir), "runs", "--runs-dir")
    llm = llm_options(request)
    if request.open_after and normalize_timestamp(request.open_after) is None:
        raise SyncInputError(f"--open-after {request.open_after!r} is not an ISO time such as 2026-11-01T00:00:00Z")
    selection = select_topics(topics_dir, list(request.topics))
    if not selection.selected:
        broken = f"\n{broken_topic_files(selection.problems)}" if selection.problems else ""
        raise SyncInputError(f"no ACTIVE topics in {topics_dir}; nothing to sync{broken}")
    _require_passage_model()
    return CheckedSync(request, topics_dir, runs_dir, llm, selection)


def _require_passage_model() -> None:
    """The passages' embedding model loads (a missing or corrupt file is one error naming it),
    before anything is written: a broken install changes nothing in the vault."""
    from nexus_assets.embedding.static_embedder import StaticModelMissing, check_model

    try:
        check_model()
    except StaticModelMissing as exc:
        raise SyncInputError(str(exc)) from None


def require_folder(path: Path, what: str, flag: str) -> Path:
    """A runs/topics folder that must exist; the error names what is wrong."""
    if not path.exists():
        raise SyncInputError(f"{what} folder {path} does not exist; pass {flag}")
    if not path.is_dir():
        kind = "a file, not a folder" if path.is_file() else "not a folder"
        raise SyncInputError(f"{what} folder {path} is {kind}; pass {flag}")
    return path


def llm_options(request: SyncRequest) -> dict:
    """The LLM options as extractor resource fields, checked before any step runs: a bad setting is
    an input error, as in `nexus plan`."""
    wanted = {"--batch": request.batch, "--max-cost": request.max_cost is not None}
    if not extractor_kind(request.extractor).calls_endpoint:
        given = [flag for flag, on in wanted.items() if on]
        if given:
            raise SyncInputError(f"{given[0]} applies to the openai extractor; add --extractor openai")
        return {}
    from datetime import datetime, timezone

    from nexus_assets.llm.chunking import token_budget_from_env
    from nexus_assets.llm.client import LLMConfig

    overrides = {k: v for k, v in {"max_cost_usd": request.max_cost}.items() if v is not None}
    try:
        env = settings.load().as_env()
        token_budget_from_env(env)
        config = LLMConfig.from_env(env, **overrides)
    except ValueError as exc:
        raise SyncInputError(str(exc)) from None
    if config.max_cost_usd is not None and (config.price_in_per_mtok is None or config.price_out_per_mtok is None):
        raise SyncInputError(
            "a cost ceiling (--max-cost or NEXUS_LLM_MAX_COST) needs the model's prices to estimate spend: "
            "set NEXUS_PRICE_IN_PER_MTOK and NEXUS_PRICE_OUT_PER_MTOK (USD per million tokens)"
        )
    return {
        **overrides,
        "batch": bool(request.batch),
        # One ceiling for the whole sync: every topic's step counts what was sent since now.
        "cost_since": datetime.now(timezone.utc).isoformat() if config.max_cost_usd is not None else None,
    }



# Running


def run(checked: CheckedSync, *, on_event: Callable[[SyncEvent], None] | None = None, instance=None) -> SyncOutcome:
    """Record the inputs, then compile (unless nothing changed), then read the results back.
    `instance`: the Dagster instance to run on (a long-lived server's); default the vault's own
    (`dagster_instance`), disposed afterwards. Vault and storage errors propagate."""
    tell = on_event or (lambda event: None)
    inputs, unchanged = _record_inputs(checked)
    if unchanged and not (checked.request.force or checked.request.reselect):
        outcome = _unchanged(checked)
    else:
        outcome = _run_jobs(checked, tell, instance, inputs)
        if not outcome.interrupted:
            _finish(checked, outcome, inputs)
    if not outcome.interrupted:
        outcome.selector_notes = selector_notes(checked)
    return outcome


def selector_notes(checked: CheckedSync) -> list[str]:
    """A new release's selector or keyword rule never moves a topic by itself: say which topics an
    older one selects and what `nexus sync --reselect` would do (the selectors' notes only with the
    offline extractor, which they are part of)."""
    from nexus_assets.extract.backends import newest_selector
    from nexus_assets.extract.selection import outdated_selectors

    with _open(checked) as vault:
        offline = not extractor_kind(checked.request.extractor).calls_endpoint
        older = outdated_selectors(vault, checked.selected) if offline else {}
        exact = [t for t in checked.selected if vault.topic_state(t) in COMPILED_STATES and vault.topics.keywords_pinned(t)]
    newest = newest_selector()
    return [
        f"{topic_id}: selected by {version}, an older selector than this release's {newest}; "
        f"`nexus sync --reselect --topic {topic_id}` selects it again with {newest}: bricks {newest} does not "
        "select leave the manifest (kept in history with the reason), FINAL bricks stay"
        for topic_id, version in sorted(older.items())
    ] + [
        f"{topic_id}: matches its keywords as exact words, as it was first compiled; `nexus sync --reselect "
        f"--topic {topic_id}` also matches their plurals and possessives (docs/inputs.md#keywords), or set "
        "`keyword_forms: exact` in its file to keep them exact"
        for topic_id in sorted(exact)
    ]


def _open(checked: CheckedSync):
    from nexus_assets.store import Vault  # the models (pydantic) only when a sync runs

    # Read-write: DuckDB refuses a read-only handle in a process that just wrote the same file.
    return Vault.open(checked.request.db)


def _record_inputs(checked: CheckedSync) -> tuple[dict, bool]:
    """Record every topic file (so `nexus topics` shows DRAFT ones too; only compiled ones sync) and
    the sources; return this sync's inputs and whether the last clean sync saw exactly them."""
    from nexus_assets.lifecycle.step import TopicFileError, record_topic_files

    with _open(checked) as vault:
        try:
            # --reselect moves the synced topics to this release's keyword rule too (docs/teaching.md).
            record_topic_files(vault, checked.selection.files, reselect=checked.selected if checked.request.reselect else ())
        except TopicFileError as exc:
            raise SyncInputError(f"{exc}. Nothing was compiled.") from None
        vault.topics.record_sources(runs_dir=checked.runs_dir, topics_dir=checked.topics_dir)
        inputs = sync_inputs(checked)
        unchanged = vault.history.last_clean_sync() == _digest(inputs, vault)
    return inputs, unchanged


def _digest(inputs: dict, vault) -> str:
    """The "nothing changed" digest: the inputs outside the vault with the vault's change marks."""
    return sha256_hex(canonical_json([inputs, vault.history.change_marks()]))


def _unchanged(checked: CheckedSync) -> SyncOutcome:
    with _open(checked) as vault:
        counts = vault.brick_counts()
        hashes = vault.latest_manifest_hashes()
        results = [
            {"topic_id": t, "success": True, "unchanged": True, "dagster_run_id": None, "checks": {}, "errors": [],
             "manifest_hash": hashes.get(t), "bricks": counts.get(t, {})}
            for t in checked.selected
        ]
        _hidden_only_notes(vault, checked, results)
    return SyncOutcome(results=results, unchanged=True)


def _hidden_only_notes(vault, checked: CheckedSync, results: list[dict]) -> None:
    """`keywords_only_hidden` on each result whose topic's keywords some runs hold only in hidden
    messages: that topic gets nothing from them until its file sets `include_hidden: true`, which a
    new user cannot guess. Read from the verdicts its `raw_runs` step stored, so a sync that had
    nothing to compile says it too; never for a topic that reads hidden messages or is sealed."""
    from nexus_assets.extract.about_step import keywords_only_hidden

    for r in results:
        topic = checked.selection.defined.get(r["topic_id"])
        if topic is None or vault.topic_state(topic.topic_id) == "LOCKED":
            continue
        if (found := keywords_only_hidden(vault, topic)) is not None:
            r["keywords_only_hidden"] = found.as_dict(topic.topic_id)


def _finish(checked: CheckedSync, outcome: SyncOutcome, inputs: dict) -> None:
    """Each topic's bricks and manifest as the runs left them; the clean-sync digest when all passed."""
    from nexus_assets.lifecycle.idle import record_idle_marks

    with _open(checked) as vault:
        counts = vault.brick_counts()
        hashes = vault.latest_manifest_hashes()
        for r in outcome.results:
            r["manifest_hash"] = hashes.get(r["topic_id"])
            r["bricks"] = counts.get(r["topic_id"], {})
        _hidden_only_notes(vault, checked, outcome.results)
        outcome.ingestion_errors_total = vault.runs.ingestion_error_count()
        if not outcome.failed and not outcome.not_extracted:
            # The inputs as read before this sync (a file changed meanwhile makes the next one run), the
            # vault as this sync left it (any later command that changes it makes the next one run).
            vault.history.record_clean_sync(_digest(inputs, vault))
        for r in outcome.results:
            # Each topic whose run passed everything: a later sync with nothing new for it skips it (idle.py).
            if r.get("dagster_run_id") and r["success"] and all(r["checks"].values()) and r["topic_id"] not in outcome.not_extracted:
                record_idle_marks(vault, r["topic_id"], inputs)


def _gold_file(topic, topics_dir: Path) -> Path | None:
    """The gold file the topic's extraction_quality check reads (relative to the topics folder)."""
    if topic.quality is None:
        return None
    gold = Path(topic.quality.gold)
    return gold if gold.is_absolute() else topics_dir / gold


def sync_inputs(checked: CheckedSync) -> dict:
    """Everything a sync reads outside the vault, cheaply: each run file's size, times and inode
    (not its bytes), the topic definitions, the extractor and its settings, and this release.
    With the vault's change marks, equal to what the last sync that passed everything saw:
    nothing could come out differently, so nothing runs."""
    request, defined, runs_dir = checked.request, checked.selection.defined, checked.runs_dir
    try:
        release = importlib.metadata.version("nexus-sync")
    except importlib.metadata.PackageNotFoundError:
        release = "unknown"
    # The folder resolved once, each file named under it (resolving 10k paths one by one costs 0.4 s).
    root = runs_dir.resolve()
    return {
        "runs": [[str(root / p.relative_to(runs_dir)), file_stat(p)] for p in scan_run_files(runs_dir)],
        "topics": {t: defined[t].model_dump(mode="json") for t in sorted(defined)},
        # The extraction_quality check reads each topic's gold file.
        "gold": {t: [str(g), file_stat(g)] for t in sorted(defined) if (g := _gold_file(defined[t], Path(request.topics_dir)))},
        "selected": sorted(checked.selected),
        "extractor": [request.extractor, bool(request.replay_only), request.open_after, bool(request.batch)],
        # A sync without recall is not the one a later sync with it can skip: embeddings are missing.
        "recall": not request.no_recall,
        "settings": settings.prefixed(),
        "release": [release, LATEST],
        # Another embedding model means every brick is embedded again (brick_embeddings): not unchanged.
        "embedding_model": embedder.MODEL,
    }



def _run_jobs(checked: CheckedSync, tell: Callable[[SyncEvent], None], shared_instance, inputs: dict | None = None) -> SyncOutcome:
    """One Dagster run for the sync (`sync_topics`): the run files ingested and the record built,
    then every topic with something new compiled, each asset once for all of them (a range of topic
    partitions, defs/partitions.py), in process on the Dagster instance, so the run shows in the UI
    with its logs and every check once per topic. When no run file changed, a topic with nothing new
    since its last clean run (`idle.py`; `inputs`: this sync's, as `sync_inputs` reads them) is checked
    only, and starts nothing; with nothing new at all, no run starts. Topics whose partitions are not
    next to each other (another topic between them has nothing new) take a run per stretch; a run
    that fails a step is compiled again one run per topic, so one topic's failure holds back no other;
    `--parallel` on PostgreSQL compiles each topic in a worker of its own after the record is built."""
    import tempfile

    request = checked.request
    # Whether a topic has something new is known before the run only when no run file changed;
    # else the run itself judges it once the files are ingested, from this sync's inputs.
    fresh = inputs is None or _files_to_read(checked, inputs)
    with tempfile.TemporaryDirectory(prefix="nexus-sync-") as tmp:
        inputs_file = None
        if fresh and inputs is not None and not (request.force or request.reselect):
            inputs_file = Path(tmp, "inputs.json")
            inputs_file.write_text(canonical_json(inputs), encoding="utf-8")
        defs = job_defs(checked, str(inputs_file) if inputs_file else None)
        return _run_with(checked, defs, tell, shared_instance, inputs, fresh)


def _run_with(checked: CheckedSync, defs, tell, shared_instance, inputs: dict | None, fresh: bool) -> SyncOutcome:
    request = checked.request
    sync_job, ingest_job, compile_job = (defs.resolve_job_def(n) for n in ("sync_topics", "ingest_run_files", "compile_topic"))
    instance = dagster_instance(request.db, checked.selected, shared_instance)
    outcome = SyncOutcome()
    # On the main thread (a CLI): Dagster turns Ctrl-C/SIGTERM during a step into a failed step and
    # returns; between steps they raise here. Either way the whole sync stops: the next topic would
    # hang on the same file. A server's worker thread leaves signals to the server.
    previous_term = signal.signal(signal.SIGTERM, signal.default_int_handler) if main_thread() else None
    # Dagster swaps in its own handlers while a job runs, and a step may report the interrupt
    # as any error; the wakeup fd records every signal whatever handler took it.
    signals = SignalLog() if main_thread() else None
    try:
        idle = set() if fresh else _idle(checked, inputs)
        outcome.results += [_idle_result(t) for t in checked.selected if t in idle]
        busy = [t for t in checked.selected if t not in idle]
        if parallel_topics(checked) > 1 and len(busy) > 1:
            _ingest(checked, ingest_job, instance, outcome, signals, tell)
            if outcome.ingest_ok and not outcome.interrupted:
                compile_parallel(checked, busy, outcome, tell)
            else:
                _ingest_failed(outcome, busy)
            return outcome
        if not busy:
            return outcome
        tell(SyncEvent("ingesting", message=str(checked.runs_dir)))
        numbers = {t: n for n, t in enumerate(checked.selected, 1)}
        stretches = _stretches(busy, instance)
        for n, stretch in enumerate(stretches):
            for topic_id in stretch:
                tell(SyncEvent("compiling", topic_id=topic_id, n=numbers[topic_id], total=len(checked.selected)))
            # The first run ingests for every topic; a later stretch compiles from what is ingested.
            if not _compile_stretch(checked, sync_job if n == 0 else compile_job, compile_job, instance, stretch, outcome, signals, tell):
                break
            if not outcome.ingest_ok:  # nothing is compiled from a failed read
                _ingest_failed(outcome, [t for later in stretches[n + 1 :] for t in later])
                break
    except KeyboardInterrupt:
        outcome.interrupted = True
    finally:
        order = {t: n for n, t in enumerate(checked.selected)}
        outcome.results.sort(key=lambda r: order.get(r["topic_id"], len(order)))
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
        if signals:
            signals.close()
        if shared_instance is None:
            # An ephemeral instance (a vault outside the project) owns a temporary directory.
            instance.dispose()
    return outcome


def _files_to_read(checked: CheckedSync, inputs: dict) -> bool:
    """Whether ingestion would read a run file: one whose size, times or inode are not the ones the
    vault recorded when it last read it (a new, changed, moved or restored file)."""
    with _open(checked) as vault:
        known = vault.runs.file_stats()
    return any(known.get(path) != tuple(stat) for path, stat in inputs["runs"] if stat is not None) or any(
        stat is None for _, stat in inputs["runs"]
    )


def _stretches(topics: list[str], instance) -> list[list[str]]:
    """The topics as runs of neighbouring partitions (a run covers a range of partition keys), in
    the partitions' order; a topic the instance does not list takes a run of its own."""
    order = {key: n for n, key in enumerate(instance.get_dynamic_partitions("topics"))}
    listed = sorted((t for t in topics if t in order), key=order.__getitem__)
    out: list[list[str]] = []
    for topic_id in listed:
        if out and order[out[-1][-1]] + 1 == order[topic_id]:
            out[-1].append(topic_id)
        else:
            out.append([topic_id])
    return out + [[t] for t in topics if t not in order]


def _ingest_failed(outcome: SyncOutcome, topics: list[str]) -> None:
    """Every topic failed with the ingestion's errors: nothing was compiled from a failed read."""
    for topic_id in topics:
        outcome.results.append({"topic_id": topic_id, "success": False, "dagster_run_id": outcome.ingest_run_id,
                                "checks": {}, "errors": outcome.ingest_errors})
    outcome.failed = outcome.failed or bool(topics)


def _idle(checked: CheckedSync, inputs: dict | None) -> set[str]:
    """The selected topics with nothing new since their last clean run (never with --force or --reselect)."""
    if inputs is None or checked.request.force or checked.request.reselect:
        return set()
    from nexus_assets.lifecycle.idle import idle_topics  # reads the vault's phases: only when a sync runs

    with _open(checked) as vault:
        return idle_topics(vault, checked.selected, inputs)


def _idle_result(topic_id: str) -> dict:
    return {"topic_id": topic_id, "success": True, "unchanged": True, "dagster_run_id": None, "checks": {}, "errors": []}


def _ingest(checked: CheckedSync, job, instance, outcome: SyncOutcome, signals: SignalLog | None, tell) -> None:
    """Run files are ingested once for every topic; each topic then compiles from the vault (`--parallel`)."""
    tell(SyncEvent("ingesting", message=str(checked.runs_dir)))
    result = job.execute_in_process(instance=instance, raise_on_error=False, run_config=QUIET, tags=run_tags(checked))
    outcome.dagster_run_ids.append(result.run_id)
    outcome.interrupted = stopped(result, signals)
    if problem := storage_failure(checked.request.db, result):
        raise problem
    outcome.ingest_ok = result.success
    outcome.ingest_run_id = result.run_id
    outcome.ingest_errors = step_errors(result)


def _compile_stretch(checked: CheckedSync, job, compile_job, instance, topics: list[str], outcome: SyncOutcome, signals, tell) -> bool:
    """One run over neighbouring topics, added to the outcome; False when the sync was stopped. A
    run that failed a step of the topic graph compiles each topic again in a run of its own (their
    steps pick up where it stopped), so each topic reports its own success; a failed ingestion or
    record fails every topic with its errors."""
    from contextlib import ExitStack

    with ExitStack() as locks:
        for topic_id in sorted(topics):  # a fixed order: two syncs never wait on each other's locks
            locks.enter_context(topic_lock(checked.request.db, topic_id))
        result, reports = compile_reports(checked, job, instance, topics, signals)
    if result.run_id not in outcome.dagster_run_ids:
        outcome.dagster_run_ids.append(result.run_id)
    first = reports[topics[0]]
    if first.storage_problem is not None:
        raise first.storage_problem  # the next topic would fail the same way
    if not result.success and not first.stopped:
        if job is not compile_job and (errors := shared_step_errors(result)):
            outcome.ingest_ok, outcome.ingest_run_id, outcome.ingest_errors = False, result.run_id, errors
            _ingest_failed(outcome, topics)
            return True
        if len(topics) > 1:
            for topic_id in topics:
                with topic_lock(checked.request.db, topic_id):
                    report = compile_report(checked, compile_job, instance, topic_id, signals)
                if not apply_report(report, outcome, tell):
                    return False
            return True
    return all([apply_report(reports[t], outcome, tell) for t in topics])
