"""A PostgreSQL vault's topics: two syncs of one topic take turns (an advisory lock per topic), and
`--parallel` compiles several topics at once, each in a worker process of its own. A DuckDB vault
has one writer: its topics compile one at a time."""

from __future__ import annotations

from contextlib import contextmanager

from nexus_assets.embedding import embedder
from nexus_assets.services.sync_models import CheckedSync, SyncEvent, SyncOutcome
from nexus_assets.services.sync_runs import TopicReport, apply_report, compile_report, dagster_instance, job_defs
from nexus_assets.vault.address import is_postgres


def parallel_topics(checked: CheckedSync) -> int:
    """How many topics compile at once: `--parallel` on a PostgreSQL vault; one on DuckDB (one writer)."""
    wanted = checked.request.parallel or 1
    return min(wanted, len(checked.selected)) if is_postgres(checked.request.db) else 1


@contextmanager
def topic_lock(db: str, topic_id: str):
    """Two syncs of one topic take turns on a PostgreSQL vault (an advisory lock held on a
    connection of its own for the whole run); a DuckDB vault has one writer at a time anyway."""
    if not is_postgres(db):
        yield
        return
    from nexus_assets.catalog import Catalog

    with Catalog.open(db) as vault, vault.topic_lock(topic_id):
        yield


def _compile_in_worker(checked: CheckedSync, topic_id: str, workers: int) -> TopicReport:
    """`--parallel`: one topic's run in a process of its own (its own Dagster run, vault pool and
    share of the cores)."""
    embedder.share_cores(workers)

    job = job_defs(checked).resolve_job_def("compile_topic")
    instance = dagster_instance(checked.request.db, [topic_id])
    try:
        with topic_lock(checked.request.db, topic_id):
            return compile_report(checked, job, instance, topic_id, None)
    finally:
        instance.dispose()  # as `_run_jobs` (services/sync.py) does with an instance of its own


def compile_parallel(checked: CheckedSync, topics: list[str], outcome: SyncOutcome, tell) -> None:
    """Up to `--parallel` topics at once, each in a worker process; reported in topic order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    workers = min(checked.request.parallel or 1, len(topics))
    # Spawned, not forked: the parent holds Dagster's and the pool's threads.
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {}
        for n, topic_id in enumerate(topics, 1):
            tell(SyncEvent("compiling", topic_id=topic_id, n=n, total=len(topics)))
            futures[topic_id] = pool.submit(_compile_in_worker, checked, topic_id, workers)
        for topic_id in topics:
            if not apply_report(futures[topic_id].result(), outcome, tell):
                for f in futures.values():
                    f.cancel()
                break
