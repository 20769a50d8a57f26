"""A long-lived process's hold on a DuckDB vault (docs/agents.md: "a warm server answers from warm
state"): `nexus api` and `nexus mcp` keep one read-only connection open, and every read-only
`Vault.open` of that vault in the process is answered on it, instead of opening the file, checking
it and reading its catalog again per request.

Why this is safe on one DuckDB file:
- A read-only connection keeps a writer out (FACTS.md), so the hold is let go as soon as a writer
  announces itself (`writer_intent`): at once for a writer of this process (a hook), within
  `WATCH_S` for one of another process (a watcher thread reading the intents folder). Readers that
  arrive meanwhile take the ordinary path, which waits for the writer as before.
- While held, nothing can change the vault, so what was read from it stays true. Each hold is a
  generation: the memo of read results (`Database.remembered`: manifest hashes, topic rows, brick
  rows by id, run names) belongs to one generation and is dropped when the hold is let go. A sync,
  a push compiled by the server, a `nexus forget` all write, so after any of them the next request
  reopens and reads again: the cheap change check is "was the hold let go", not a query.
- PostgreSQL needs none of this (its pool keeps connections, and writers do not lock readers out):
  `hold` ignores a PostgreSQL address.

DuckDB connections are not shared between threads: each thread reads through its own cursor of the
held connection (a cursor is another connection to the same open database, costing microseconds).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from nexus_assets.vault import connection

log = logging.getLogger("nexus.vault")

WATCH_S = 0.025  # how often the watcher looks for another process's writer
RELEASE_WAIT_S = 10.0  # how long letting go waits for reads in flight to finish
REFRESH_AFTER_S = 0.3  # a sync writes step by step: refresh once it has left the vault alone this long
TRIM_S = 5.0  # after reads, how long the watcher waits before handing freed memory back


def _libc():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def serve_memory() -> None:
    """For a long-lived server, before it starts threads: at most two glibc malloc arenas. Each
    thread that allocates (the request pool, the sync worker, Dagster's) otherwise gets an arena of
    its own, and memory freed in one is never reused by another, so the resident size creeps up
    with every sync the server runs."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(-8, 2)  # M_ARENA_MAX
        # A fixed mmap threshold: a large block (a topic's 15 MB of vectors, copied at each push the
        # server compiles) is mapped and unmapped whole. glibc otherwise raises the threshold after
        # the first such block is freed, and later ones land in the heap, where they fragment it.
        libc.mallopt(-3, 4 * 1024 * 1024)  # M_MMAP_THRESHOLD


def trim_memory() -> None:
    """Hand memory freed since to the system (glibc's malloc_trim; nothing elsewhere)."""
    trim = _trimmer()
    if trim is not None:
        trim(0)


def _trimmer():
    """glibc's malloc_trim, or None elsewhere. A server's threads free what a large answer (a
    10k-brick listing: ~100 MB while it is built) allocated, but glibc keeps it in each thread's
    arena; trimming gives it back to the system, so the resident size stays near the warm state."""
    return getattr(_libc(), "malloc_trim", None)


class Held:
    """One vault file held open read-only, with per-thread cursors and a per-generation memo."""

    def __init__(self, path: Path, refresh: Callable[[], None] | None = None, memory: str | None = None) -> None:
        self.path = path
        self.memory = memory  # DuckDB's memory, as the address's options give it
        # Run by the watcher once a writer is done: the hold is taken again and what the server
        # keeps beyond the memo (vector indexes, run names) is brought in step, before a request asks.
        self._refresh = refresh
        self._stale = False
        self._let_go_at = 0.0
        self._cond = threading.Condition()
        self._conn = None
        self._cursors: list = []
        self._readers = 0
        self._reads = 0  # reads since the last trim
        self._letting_go = 0
        self.generation = 0  # advanced each time the hold is let go
        self.opens = 0  # how many times the file was opened (tests and benchmarks read it)
        self.memo: dict = {}
        self.lasting: dict = {}
        self._local = threading.local()
        self._stopped = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="nexus-vault-watch", daemon=True)
        self._watcher.start()

    # Reading

    @contextmanager
    def reading(self, cls) -> Iterator[object | None]:
        """A `cls` (Vault, Catalog) on this thread's cursor, or None when the caller must open the
        vault the ordinary way (a writer is waiting or writing, or the vault needs an upgrade)."""
        with self._cond:
            usable = not (self._stopped.is_set() or self._letting_go or connection.writer_waiting(self.path))
            if usable and self._conn is None:
                usable = self._open()
            if usable:
                self._readers += 1
                self._reads += 1
                generation = self.generation
        if not usable:
            yield None
            return
        try:
            yield self._vault(cls, generation)
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    def _open(self) -> bool:
        from nexus_assets.vault.migrations import pending

        try:
            conn = connection.connect(self.path, read_only=True, wait_s=0, memory=self.memory)
        except Exception:  # noqa: BLE001 (no vault yet, busy, damaged: the ordinary open says which)
            return False
        try:
            if pending(conn):
                conn.close()  # an older vault: the ordinary open upgrades it; held on the next read
                return False
        except Exception:  # noqa: BLE001
            conn.close()
            return False
        self._conn = conn
        self.opens += 1
        return True

    def _vault(self, cls, generation: int):
        local = self._local
        if getattr(local, "generation", None) != generation:
            with self._cond:
                cursor = self._conn.cursor()
                self._cursors.append(cursor)
            local.generation, local.cursor, local.vaults = generation, cursor, {}
        vault = local.vaults.get(cls)
        if vault is None:
            vault = local.vaults[cls] = cls(local.cursor, migrate=False)
            vault.memo, vault.lasting = self.memo, self.lasting
        return vault

    # Letting go

    def let_go(self, wait_s: float = RELEASE_WAIT_S) -> bool:
        """Close the held connection once the reads in flight are done, and drop what was read
        through it; False when reads were still in flight after `wait_s` (the writer then waits on
        DuckDB's lock as it would for any reader)."""
        with self._cond:
            if self._conn is None:
                self.memo.clear()
                return True
            self._letting_go += 1
            try:
                deadline = time.monotonic() + wait_s
                while self._readers:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
                if self._conn is None:  # another thread let go while this one waited for the readers
                    self.memo.clear()
                    return True
                for cursor in self._cursors:
                    cursor.close()
                self._conn.close()
                self._conn, self._cursors = None, []
                # Forgotten text must not outlive its forgetting in memory: the memo goes with the hold.
                self.memo.clear()
                self.memo = {}
                self.generation += 1
                self._stale, self._let_go_at = True, time.monotonic()
                return True
            finally:
                self._letting_go -= 1

    def _watch(self) -> None:
        trim, last_trim = _trimmer(), time.monotonic()
        while not self._stopped.wait(WATCH_S):
            if self._conn is not None and connection.writer_waiting(self.path):
                self.let_go()
            elif (self._stale and self._conn is None and self._refresh is not None
                  and time.monotonic() - self._let_go_at > REFRESH_AFTER_S and not connection.writer_waiting(self.path)):
                self._stale = False
                try:
                    self._refresh()
                except Exception:  # noqa: BLE001 (a request reads what it needs anyway)
                    log.warning("refreshing the warm state of %s failed", self.path, exc_info=True)
            if trim is not None and self._reads and not self._readers and time.monotonic() - last_trim > TRIM_S:
                self._reads, last_trim = 0, time.monotonic()
                trim(0)

    def close(self) -> None:
        self._stopped.set()
        self.let_go()


_held: dict[Path, Held] = {}
_lock = threading.Lock()


def _key(db: str | Path) -> Path | None:
    from nexus_assets.vault.address import parse_address

    address = parse_address(db)
    if address.is_postgres:
        return None
    return Path(address.path).resolve()


def hold(db: str | Path, refresh: Callable[[], None] | None = None) -> Held | None:
    """Keep this vault open for the life of the process (or until `release`); None for PostgreSQL.
    `refresh`: run after each writer (see Held)."""
    from nexus_assets.vault.address import parse_address

    key = _key(db)
    if key is None:
        return None
    with _lock:
        held = _held.get(key)
        if held is None:
            held = _held[key] = Held(key, refresh, parse_address(db).options.memory)
            if len(_held) == 1:
                connection.on_writer(_writer_announced)
        return held


def holding(db: str | Path) -> Held | None:
    if not _held:
        return None
    try:
        key = _key(db)
    except Exception:  # noqa: BLE001 (a bad address: the ordinary open names the problem)
        return None
    return _held.get(key) if key is not None else None


def release(db: str | Path) -> None:
    """Stop holding this vault (the server's shutdown)."""
    key = _key(db)
    with _lock:
        held = _held.pop(key, None) if key is not None else None
    if held is not None:
        held.close()


def _writer_announced(db_path: Path) -> None:
    try:
        held = _held.get(Path(db_path).resolve())
    except OSError:
        return
    if held is not None:
        held.let_go()
