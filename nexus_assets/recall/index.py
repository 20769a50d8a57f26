"""One FAISS index per topic, beside the vault, with its row → brick id map persisted with it.

`<vault dir>/<vault stem>.vectors/<topic_id>/`: `index.faiss`, `ids.json` (brick ids in row
order) and `meta.json` (model, manifest hash, count). The map is 1:1 with the index rows and is
checked; a missing or out-of-step index is rebuilt from the vault's embeddings (forgetting deletes
the directory and relies on that).
"""

from __future__ import annotations

import json
import os
import threading
import shutil
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nexus_assets.embedding.embedder import DIMENSIONS, MODEL
from nexus_assets.vault.connection import derived_path

if TYPE_CHECKING:
    from nexus_assets.publish.records import BrickRecords
    from nexus_assets.recall.records import RecallRecords


class IndexStores(Protocol):
    """What a topic's vector index is built from: its visible bricks, their embeddings, its manifest."""

    bricks: BrickRecords
    recall: RecallRecords

    def latest_manifest_hashes(self) -> dict[str, str]: ...


def _faiss():
    import faiss

    # Recall searches one query at a time: OpenMP's threads cost far more than the search itself
    # (10k vectors: 0.4 ms on one thread, 15 ms on two while the other core is busy).
    faiss.omp_set_num_threads(1)
    return faiss


def vector_index_dir(db_path: str | Path, topic_id: str) -> Path:
    return derived_path(db_path, ".vectors") / topic_id


@dataclass
class TopicIndex:
    topic_id: str
    index: object  # faiss.IndexFlatIP
    brick_ids: list[str]
    manifest_hash: str | None

    @cached_property
    def rows(self) -> dict[str, int]:
        """Brick id -> its row, to read the vector of a brick the full-text ranking found."""
        return {b: i for i, b in enumerate(self.brick_ids)}


def _write(path: Path, index, brick_ids: list[str], manifest_hash: str | None) -> None:
    faiss = _faiss()

    # A staging folder of this writer's own: two builds of one topic at once (a server's refresh
    # after a writer, beside a request that found the index out of step) never share one.
    staging = path.with_name(f"{path.name}.partial-{os.getpid()}-{threading.get_ident()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    faiss.write_index(index, str(staging / "index.faiss"))
    (staging / "ids.json").write_text(json.dumps(brick_ids), encoding="utf-8")
    (staging / "meta.json").write_text(
        json.dumps({"model": MODEL, "manifest_hash": manifest_hash, "count": len(brick_ids)}), encoding="utf-8"
    )
    shutil.rmtree(path, ignore_errors=True)
    os.replace(staging, path)


def build(vault: IndexStores, db_path: str | Path, topic_id: str) -> TopicIndex:
    """From the vault alone: the topic's visible, embedded bricks in manifest order."""
    faiss = _faiss()
    import numpy as np

    # Slice by slice, in manifest order: the vectors exist once, in the index.
    index = faiss.IndexFlatIP(DIMENSIONS)
    brick_ids: list[str] = []
    for ids, vectors in vault.recall.visible_vector_chunks(topic_id, MODEL):
        index.add(np.ascontiguousarray(vectors))
        brick_ids += ids
    manifest = vault.bricks.latest_manifest(topic_id)
    built = TopicIndex(topic_id, index, brick_ids, manifest.manifest_hash if manifest else None)
    _write(vector_index_dir(db_path, topic_id), index, built.brick_ids, built.manifest_hash)
    return built


def load(db_path: str | Path, topic_id: str) -> TopicIndex | None:
    faiss = _faiss()

    path = vector_index_dir(db_path, topic_id)
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        ids = json.loads((path / "ids.json").read_text(encoding="utf-8"))
        index = faiss.read_index(str(path / "index.faiss"))
    except (OSError, ValueError, RuntimeError):
        return None
    if meta.get("model") != MODEL or index.ntotal != len(ids) or meta.get("count") != len(ids):
        return None
    return TopicIndex(topic_id, index, ids, meta.get("manifest_hash"))


def in_step(loaded: TopicIndex | None, vault: IndexStores, topic_id: str) -> bool:
    if loaded is None:
        return False
    manifest = vault.bricks.latest_manifest(topic_id)
    expected = vault.recall.visible_embedded_ids(topic_id, MODEL)
    return loaded.manifest_hash == (manifest.manifest_hash if manifest else None) and loaded.brick_ids == expected


# A process that answers many queries (the viewer, the API) keeps each topic's index it has checked,
# with what identifies the vault's state for it: the newest manifest (which lists every visible
# brick) and how many of those still lack a vector (embeddings are only ever added, and forgetting
# writes a new manifest). While both are the same, the index is the one the vault would give.
_warm: dict[tuple[str, str], tuple[tuple[str, str | None, int], TopicIndex]] = {}


def ensure(
    vault: IndexStores, db_path: str | Path, topic_id: str, *, manifest_hash: str | None = None, unembedded: int | None = None
) -> tuple[TopicIndex, bool]:
    """The topic's index, rebuilt from the vault when missing or out of step; (index, rebuilt).
    A caller that has read the topic's newest manifest hash and its count of bricks without a vector
    (recall reads them for every topic at once) passes them in."""
    if manifest_hash is None:
        manifest_hash = vault.latest_manifest_hashes().get(topic_id)
    if unembedded is None:
        unembedded = vault.recall.unembedded_counts([topic_id], MODEL).get(topic_id, 0)
    state = (MODEL, manifest_hash, unembedded)
    place = (str(Path(db_path).resolve()), topic_id)
    # One thread at a time per topic: a server's refresh after a writer and a request that finds the
    # index out of step would otherwise build it at once, each replacing the other's files.
    with _lock_of(place):
        held = _warm.get(place)
        # The files beside the vault are kept too: one that was removed is written again.
        if held is not None and held[0] == state and (vector_index_dir(db_path, topic_id) / "meta.json").exists():
            return held[1], False
        loaded = load(db_path, topic_id)
        if in_step(loaded, vault, topic_id):
            built, rebuilt = loaded, False
        else:
            built, rebuilt = build(vault, db_path, topic_id), True
        _warm[place] = (state, built)
        return built, rebuilt


_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_of(place: tuple[str, str]) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(place, threading.Lock())


def follow(vault: Vault, db_path: str | Path, topic_id: str, manifest_hash: str | None) -> tuple[TopicIndex, bool]:
    """The topic's index after a small change this process made (a push compiled by the server):
    from the index it holds, the rows of bricks still visible are kept and only new bricks' vectors
    are read, so a push costs its own bricks, not the topic's. The result is the index `build`
    gives (same bricks, same manifest order, the same stored vectors). Without a held index, `ensure`."""
    import numpy as np

    place = (str(Path(db_path).resolve()), topic_id)
    held = _warm.get(place)
    if held is None:
        return ensure(vault, db_path, topic_id, manifest_hash=manifest_hash)
    old = held[1]
    ordered = vault.recall.visible_embedded(topic_id, MODEL)
    rows = old.rows
    new = [fp for b, fp in ordered if b not in rows]
    found = vault.recall.vectors_of(MODEL, new) if new else {}
    vectors = np.zeros((len(ordered), DIMENSIONS), "float32")
    kept = [(i, rows[b]) for i, (b, _) in enumerate(ordered) if b in rows]
    if kept:
        at, source = map(list, zip(*kept))
        vectors[at] = old.index.reconstruct_batch(np.asarray(source, dtype="int64"))
    for i, (b, fp) in enumerate(ordered):
        if b not in rows:
            vectors[i] = found[fp]
    faiss = _faiss()
    index = faiss.IndexFlatIP(DIMENSIONS)
    index.add(vectors)
    built = TopicIndex(topic_id, index, [b for b, _ in ordered], manifest_hash)
    _write(vector_index_dir(db_path, topic_id), index, built.brick_ids, manifest_hash)
    _warm[place] = ((MODEL, manifest_hash, vault.recall.unembedded_counts([topic_id], MODEL).get(topic_id, 0)), built)
    return built, True
