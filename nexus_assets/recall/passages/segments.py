"""The passages' dense index, in segments beside the vault: each segment one faiss index of 8-bit
codes (`vectors.py`) and the rows it holds (passage id, run, node type, flags, speaker, day, the
message it is in), written once and never changed; a row deleted later (its run grew a new
version) is marked in the segment's `deleted` mask. Forgetting rewrites the segments that hold the
forgotten runs, so none of their vectors is kept (invariant 15).

Measured: an exact 8-bit scan of 1M passages x 256 dimensions takes 24-31 ms on one core.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from nexus_assets.recall.passages.filters import HIDDEN, NODE_TYPE_CODE, NODE_TYPES, OFF_CURRENT, RecordFilter, admits
from nexus_assets.embedding.static_embedder import DIMENSIONS


def _faiss():
    import faiss

    # One query at a time: OpenMP's threads cost more than they give (see recall/index.py).
    faiss.omp_set_num_threads(1)
    return faiss


ID_BYTES = 32


def day_number(stamp: str | None) -> int:
    """Days since 1970-01-01 of an ISO time's date, or -1."""
    from datetime import date

    if not stamp or len(stamp) < 10:
        return -1
    try:
        return date.fromisoformat(stamp[:10]).toordinal() - 719163
    except ValueError:
        return -1


@dataclass
class Segment:
    name: str
    path: Path
    ids: object  # passage ids as their 32 bytes (uint8, rows x 32: `id_of`), row order
    run: object  # int32 per row, into `runs`
    runs: list[str]
    node_type: object  # uint8 per row (filters.NODE_TYPES)
    flags: object  # uint8 per row (filters.HIDDEN | OFF_CURRENT)
    speaker: object  # int32 per row, into `speakers`
    speakers: list[str]
    day: object  # int32 per row
    message: object  # int32 per row, into `messages`
    messages: list[str]  # "run_id\x1fjson_path"
    deleted: object  # bool per row
    index: object = field(repr=False)
    # The written files' identity when read (inode, size, mtime of rows.npz): a segment read again
    # with the same stamp is the same segment, whatever became of its folder's name meanwhile.
    stamp: tuple = ()

    @property
    def rows(self) -> int:
        return len(self.ids)

    def live(self) -> int:
        return int(self.rows - self.deleted.sum())

    def mask(self, filt: RecordFilter, speaker: str | None = None, days: tuple[int, int] | None = None):
        """The rows a recall reads (bool per row)."""
        import numpy as np

        ok = np.zeros(self.rows, dtype=bool)
        for part in filt.parts:
            run_ok = np.ones(len(self.runs), bool) if part.runs is None else np.fromiter((r in part.runs for r in self.runs), bool, len(self.runs))
            types = np.zeros(len(NODE_TYPES), bool)
            types[[NODE_TYPE_CODE[t] for t in part.node_types if t in NODE_TYPE_CODE]] = True
            m = run_ok[self.run] & types[self.node_type]
            if not part.hidden:
                m &= (self.flags & HIDDEN) == 0
            if part.current_only:
                m &= (self.flags & OFF_CURRENT) == 0
            ok |= m
        ok &= ~self.deleted
        if speaker is not None:
            wanted = speaker.casefold()
            said = np.fromiter((s.casefold() == wanted for s in self.speakers), bool, len(self.speakers))
            ok &= said[self.speaker] if len(self.speakers) else False
        if days is not None:
            ok &= (self.day >= days[0]) & (self.day <= days[1])
        return ok

    def search(self, query, k: int, mask) -> list[tuple[str, float, str]]:
        """(passage id, cosine, run id) of the k nearest admitted rows."""
        import numpy as np

        n = int(mask.sum())
        if n == 0 or k < 1:
            return []
        faiss = _faiss()
        params = None
        bitmap = np.packbits(mask, bitorder="little")  # alive until the search returns: faiss reads it by pointer
        if n < self.rows:
            params = faiss.SearchParameters(sel=faiss.IDSelectorBitmap(self.rows, faiss.swig_ptr(bitmap)))
        scores, rows = self.index.search(np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32), min(k, n), params=params)
        return [(id_of(self.ids[r]), float(s), self.runs[self.run[r]]) for r, s in zip(rows[0], scores[0]) if r >= 0]


def id_bytes(passage_ids: Sequence[str]):
    """Passage ids (sha256 hex) as rows of their 32 bytes: half the bytes of the hex, and no
    decompression when a segment is read (a server reads every segment again after a push)."""
    import numpy as np

    return np.frombuffer(b"".join(bytes.fromhex(p) for p in passage_ids), np.uint8).reshape(-1, ID_BYTES)


def id_of(row) -> str:
    return row.tobytes().hex()


def write_segment(folder: Path, name: str, rows: Sequence, vectors) -> Segment:
    """A new segment from passage rows (`PassageRow`s) and their unit vectors."""
    import numpy as np

    from nexus_assets.recall.passages.vectors import quantizer_index

    faiss = _faiss()
    staging = folder / f"{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    runs, speakers, messages = _table([r.run_id for r in rows]), _table([r.speaker or "" for r in rows]), _table([_key(r) for r in rows])
    arrays = {
        "run": np.asarray([runs[r.run_id] for r in rows], np.int32),
        "node_type": np.asarray([NODE_TYPE_CODE.get(r.node_type, NODE_TYPE_CODE["other"]) for r in rows], np.uint8),
        "flags": np.asarray([(HIDDEN if r.hidden else 0) | (OFF_CURRENT if r.branch != "current" else 0) for r in rows], np.uint8),
        "speaker": np.asarray([speakers[r.speaker or ""] for r in rows], np.int32),
        "day": np.asarray([day_number(r.timestamp) for r in rows], np.int32),
        "message": np.asarray([messages[_key(r)] for r in rows], np.int32),
        "deleted": np.zeros(len(rows), bool),
        "ids": id_bytes([r.passage_id for r in rows]),
    }
    np.savez(staging / "rows.npz", **arrays)
    (staging / "names.json").write_text(json.dumps({"runs": list(runs), "speakers": list(speakers), "messages": list(messages)}), encoding="utf-8")
    index = quantizer_index(DIMENSIONS)
    if len(rows):
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    faiss.write_index(index, str(staging / "vectors.faiss"))
    target = folder / name
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    return Stored(name, len(rows), len(rows))


@dataclass(frozen=True)
class Stored:
    """A segment on disk as a refresh counts it (its vectors are not held while others are written)."""

    name: str
    rows: int
    live: int


def stored(path: Path) -> Stored:
    """A segment's counts, read without its vectors."""
    import numpy as np

    with np.load(path / "rows.npz") as arrays:
        rows = len(arrays["ids"])
        deleted = np.load(path / "deleted.npy") if (path / "deleted.npy").exists() else arrays["deleted"]
    return Stored(path.name, rows, int(rows - deleted.sum()))


def load_segment(path: Path) -> Segment:
    import numpy as np

    faiss = _faiss()
    names = json.loads((path / "names.json").read_text(encoding="utf-8"))
    with np.load(path / "rows.npz") as arrays:
        a = {k: arrays[k] for k in arrays.files}
    deleted_file = path / "deleted.npy"
    deleted = np.load(deleted_file) if deleted_file.exists() else a["deleted"]
    index = faiss.read_index(str(path / "vectors.faiss"))
    seg = Segment(path.name, path, a["ids"], a["run"], names["runs"], a["node_type"], a["flags"], a["speaker"],
                  names["speakers"], a["day"], a["message"], names["messages"], deleted, index, stamp_of(path))
    if index.ntotal != seg.rows or len(seg.run) != seg.rows or len(deleted) != seg.rows:
        raise ValueError(f"passage segment {path} is out of step with itself")
    return seg


def stamp_of(path: Path) -> tuple:
    st = (path / "rows.npz").stat()
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def reread(seg: Segment, path: Path) -> Segment | None:
    """The segment held, with its deleted mask read again (the only part a refresh changes), when
    the files at `path` are still the ones it was read from; None when they are not."""
    import numpy as np

    try:
        if stamp_of(path) != seg.stamp:
            return None
        deleted_file = path / "deleted.npy"
        deleted = np.load(deleted_file) if deleted_file.exists() else seg.deleted
    except (OSError, ValueError):
        return None
    if len(deleted) != seg.rows:
        return None
    # A copy: a recall reading the held one meanwhile keeps the mask it started with.
    return replace(seg, deleted=deleted)


def codes_of(seg: Segment, rows):
    """These rows' vectors as their codes decode (added to another segment, each gives its code again)."""
    import numpy as np

    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return np.zeros((0, DIMENSIONS), np.float32)
    return seg.index.reconstruct_batch(rows)


def mark_deleted(seg: Segment, run_ids: set[str]) -> int:
    """Mark the rows of these runs deleted (their run has a newer version); returns how many."""
    import numpy as np

    gone = np.fromiter((r in run_ids for r in seg.runs), bool, len(seg.runs))[seg.run] & ~seg.deleted
    n = int(gone.sum())
    if n:
        seg.deleted = seg.deleted | gone
        tmp = seg.path / "deleted.partial.npy"
        np.save(tmp, seg.deleted)
        os.replace(tmp, seg.path / "deleted.npy")
    return n


def _key(row) -> str:
    return f"{row.run_id}\x1f{row.json_path}"


def _table(values: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out.setdefault(v, len(out))
    return out


def segment_admits(seg: Segment, row: int, part) -> bool:
    """One row against one part, by the pure rule (the tests hold `mask` to it)."""
    return admits(part, seg.runs[seg.run[row]], NODE_TYPES[seg.node_type[row]], int(seg.flags[row])) and not seg.deleted[row]


def merge_segments(folder: Path, name: str, segments: Sequence[str]) -> Stored:
    """One segment holding the live rows of these (named, read one at a time), codes copied as
    stored (no vector is computed again, none of a deleted row is kept)."""
    import numpy as np

    from nexus_assets.recall.passages.vectors import quantizer_index

    faiss = _faiss()
    staging = folder / f"{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    runs: dict[str, int] = {}
    speakers: dict[str, int] = {}
    messages: dict[str, int] = {}
    cols: dict[str, list] = {k: [] for k in ("ids", "run", "node_type", "flags", "speaker", "day", "message")}
    index = quantizer_index(DIMENSIONS)
    for seg_name in segments:
        seg = load_segment(folder / seg_name)
        live = np.flatnonzero(~seg.deleted)
        if not len(live):
            continue
        remap = {"run": (seg.runs, runs), "speaker": (seg.speakers, speakers), "message": (seg.messages, messages)}
        for col, (names, table) in remap.items():
            local = np.asarray([table.setdefault(n, len(table)) for n in names], dtype=np.int32)
            cols[col].append(local[getattr(seg, col)[live]])
        for col in ("ids", "node_type", "flags", "day"):
            cols[col].append(getattr(seg, col)[live])
        index.add(np.ascontiguousarray(codes_of(seg, live), dtype=np.float32))
        del seg
    dtypes = {"ids": np.uint8, "run": np.int32, "node_type": np.uint8, "flags": np.uint8, "speaker": np.int32, "day": np.int32, "message": np.int32}
    empty = {"ids": (0, ID_BYTES)}
    arrays = {k: (np.concatenate(v) if v else np.zeros(empty.get(k, 0), dtypes[k])).astype(dtypes[k]) for k, v in cols.items()}
    arrays["deleted"] = np.zeros(len(arrays["ids"]), bool)
    np.savez(staging / "rows.npz", **arrays)
    (staging / "names.json").write_text(json.dumps({"runs": list(runs), "speakers": list(speakers), "messages": list(messages)}), encoding="utf-8")
    faiss.write_index(index, str(staging / "vectors.faiss"))
    target = folder / name
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    return Stored(name, len(arrays["ids"]), len(arrays["ids"]))
