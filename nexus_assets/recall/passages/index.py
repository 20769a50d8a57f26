"""The record's indexes beside the vault (`<vault stem>.passages/`): dense segments
(`segments.py`) and the full-text indexes (`text_index.py`), holding every passage of each run's
latest version. Derived data: `state.json` names the run versions it holds; `refresh` brings it in
step with the vault (only runs with a new version are read and embedded; their older passages are
marked deleted), and a missing or unreadable index is rebuilt from the vault alone.

One writer at a time (a lock file); readers see the state they loaded until they load again.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

from nexus_assets.ingest.passages import SPLITTER_VERSION
from nexus_assets.recall.passages import segments as seg_mod
from nexus_assets.recall.passages import text_index
from nexus_assets.recall.passages.filters import RecordFilter
from nexus_assets.recall.passages.vectors import blended
from nexus_assets.embedding.static_embedder import MODEL
from nexus_assets.vault.connection import derived_path

if TYPE_CHECKING:
    from nexus_assets.ingest.passage_records import PassageRecords, PassageRow

FORMAT = 3  # 2: each passage also indexed with its neighbours (`near`); 3: words without positions, ids as bytes
STATE_FILE = "state.json"
# Runs read and embedded per new segment when a sync adds many (memory stays one slice of rows).
RUNS_PER_SEGMENT = 2_000
# Passages per segment at most (a run longer than that is indexed in pieces): what is held at
# once while indexing is one segment's rows and vectors.
ROWS_PER_SEGMENT = 40_000
# The characters of a message its neighbours' full-text context holds.
CONTEXT_CHARS = 4_000
# Rows of the pieces beside a piece read for its context (a run cut into pieces).
EDGE_ROWS = 2_000
# More segments than this and the smallest are merged (a push adds one small segment each time).
MAX_SEGMENTS = 12
# A segment with more of its rows deleted than this share is rewritten without them.
COMPACT_SHARE = 0.5


class PassageStores(Protocol):
    passages: PassageRecords


def index_dir(db_path: str | Path) -> Path:
    return derived_path(db_path, ".passages")


@dataclass
class PassageIndex:
    path: Path
    held: dict[str, str]
    segments: list[seg_mod.Segment]
    texts: tuple
    messages: tuple
    generation: int = 0
    masks: dict = field(default_factory=dict, repr=False)

    @property
    def rows(self) -> int:
        return sum(s.live() for s in self.segments)


@dataclass
class RefreshReport:
    runs_added: int = 0
    runs_removed: int = 0
    passages_added: int = 0
    rebuilt: bool = False
    merged: int = 0


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.mkdir(parents=True, exist_ok=True)
    with open(path / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_state(path: Path) -> dict | None:
    try:
        state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if state.get("format") != FORMAT or state.get("model") != MODEL or state.get("splitter") != SPLITTER_VERSION:
        return None
    return state


def _write_state(path: Path, state: dict) -> None:
    tmp = path / (STATE_FILE + ".partial")
    tmp.write_text(json.dumps(state, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path / STATE_FILE)


def load(db_path: str | Path, held: PassageIndex | None = None) -> PassageIndex | None:
    """The index as its state file says, or None when it is missing or unreadable. With `held`
    (the index this process read before), a segment it holds whose files are unchanged is kept
    and only its deleted mask read again: after a push only the push's new segment is read (a
    segment is written once; reading all of them was a tenth of a push into 337k passages)."""
    path = index_dir(db_path)
    state = _read_state(path)
    if state is None:
        return None
    kept = {s.name: s for s in held.segments} if held is not None and held.path == path else {}
    try:
        segments = []
        for name in state["segments"]:
            folder = path / "segments" / name
            again = seg_mod.reread(kept[name], folder) if name in kept else None
            segments.append(again if again is not None else seg_mod.load_segment(folder))
        texts = text_index.open_index(path / "text", "passages")
        messages = text_index.open_index(path / "messages", "messages")
    except (OSError, ValueError, RuntimeError, KeyError):
        return None
    index = PassageIndex(path, dict(state["held"]), segments, texts, messages, state.get("generation", 0))
    if held is not None:
        # A mask is keyed by its segment's name and deleted count: kept only for a segment kept.
        same = {s.name for s in segments if s.name in kept and s.index is kept[s.name].index}
        index.masks = {k: m for k, m in held.masks.items() if k[0] in same}
    return index


def in_step(index: PassageIndex | None, vault: PassageStores) -> bool:
    return index is not None and index.held == vault.passages.built_versions(SPLITTER_VERSION)


def refresh(vault: PassageStores, db_path: str | Path, progress: Callable[[str], None] | None = None) -> RefreshReport:
    """Bring the index in step with the passages of every run's latest version."""
    path = index_dir(db_path)
    report = RefreshReport()
    with _locked(path):
        state = _read_state(path)
        if state is None or load(db_path, _warm.get(_place(db_path))) is None:
            _clear(path)
            state = {"format": FORMAT, "model": MODEL, "splitter": SPLITTER_VERSION, "held": {}, "segments": [], "next": 0, "generation": 0}
            report.rebuilt = True
        latest = vault.passages.built_versions(SPLITTER_VERSION)
        held = state["held"]
        changed = sorted(r for r, v in latest.items() if held.get(r) != v)
        gone = sorted(r for r in held if r not in latest)
        stale = {r for r in changed if r in held} | set(gone)
        if not changed and not gone:
            return report
        folder = path / "segments"
        segments: list[seg_mod.Stored] = []
        for n in state["segments"]:
            if stale:  # read one segment at a time: only its deleted mask changes
                seg_mod.mark_deleted(seg_mod.load_segment(folder / n), stale)
            segments.append(seg_mod.stored(folder / n))
        texts, messages = text_index.open_index(path / "text", "passages"), text_index.open_index(path / "messages", "messages")
        t_writer, m_writer = text_index.writer_of(texts[0]), text_index.writer_of(messages[0])
        try:
            if stale:
                text_index.delete_runs(t_writer, sorted(stale))
                text_index.delete_runs(m_writer, sorted(stale))
                for r in gone:
                    held.pop(r, None)
            report.runs_removed = len(stale)
            for start in range(0, len(changed), RUNS_PER_SEGMENT):
                chunk = changed[start : start + RUNS_PER_SEGMENT]
                for batch in _batches(_pieces(vault.passages.latest(chunk))):
                    name = f"seg-{state['next']:06d}"
                    state["next"] += 1
                    segments.append(_add_rows(path, name, batch, t_writer, m_writer))
                    report.passages_added += sum(len(rows) for rows, _, _ in batch)
                    if progress and report.passages_added > ROWS_PER_SEGMENT:
                        progress(f"passages indexed: {report.passages_added}")
                report.runs_added += len(chunk)
                held.update({r: latest[r] for r in chunk})
                if progress and len(changed) > RUNS_PER_SEGMENT:
                    progress(f"passages indexed: {min(start + RUNS_PER_SEGMENT, len(changed))} of {len(changed)} runs")
            t_writer.commit()
            m_writer.commit()
            t_writer.wait_merging_threads()
            m_writer.wait_merging_threads()
        finally:
            del t_writer, m_writer
        segments, report.merged = _tidy(path, segments, state)
        state["segments"] = [s.name for s in segments if s.rows]
        state["generation"] = state.get("generation", 0) + 1
        _write_state(path, state)
        _drop_unlisted(path, set(state["segments"]))
    return report


def _pieces(rows: Iterator[PassageRow]) -> Iterator[tuple[list[PassageRow], list[PassageRow], list[PassageRow]]]:
    """(piece, the piece before it, the piece after it): a run's passages in pieces of at most
    ROWS_PER_SEGMENT rows cut between messages, counted from the run's start (so a run's pieces,
    and the context each passage is embedded with, never depend on the runs indexed with it); the
    pieces beside it are of the same run, or empty. Two pieces and a look-ahead are held at once,
    whatever the size of a run."""
    def cut() -> Iterator[list[PassageRow]]:
        piece: list[PassageRow] = []
        for r in rows:
            # Cut between messages, or inside one that alone is longer than two segments.
            full = len(piece) >= ROWS_PER_SEGMENT and (_key(r) != _key(piece[-1]) or len(piece) >= 2 * ROWS_PER_SEGMENT)
            if piece and (r.run_id != piece[-1].run_id or full):
                yield piece
                piece = []
            piece.append(r)
        if piece:
            yield piece

    before: list[PassageRow] = []
    current: list[PassageRow] | None = None
    for piece in cut():
        if current is not None:
            same = piece[0].run_id == current[0].run_id
            yield current, before, piece if same else []
            before = current if same else []
        current = piece
    if current is not None:
        yield current, before, []


def _batches(pieces) -> Iterator[list]:
    """Pieces gathered into segments of about ROWS_PER_SEGMENT rows (many small runs share one)."""
    batch, size = [], 0
    for item in pieces:
        if batch and size + len(item[0]) > ROWS_PER_SEGMENT:
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += len(item[0])
    if batch:
        yield batch


def _add_rows(path: Path, name: str, batch: list, t_writer, m_writer) -> seg_mod.Stored:
    """One new segment and the full-text documents of these pieces' rows (runs in document order)."""
    import numpy as np

    rows = [r for piece, _, _ in batch for r in piece]
    vectors = np.concatenate([_piece_vectors(piece, before, after) for piece, before, after in batch]) if rows else None
    keys = [_key(r) for r in rows]
    near = _neighbours(rows, keys)
    written: set[str] = set()
    for piece, before, after in batch:
        messages = _messages([*before[-EDGE_ROWS:], *piece, *after[:EDGE_ROWS]])
        for r in piece:
            k = _key(r)
            if k not in written:
                written.add(k)
                text, previous, following = messages[k]
                text_index.add_message(m_writer, r, k, f"{r.speaker or ''} {text}", f"{_context(previous)} {_context(following)}",
                                       seg_mod.day_number(r.timestamp))
    for r, k, n in zip(rows, keys, near):
        text_index.add_passage(t_writer, r, k, f"{r.speaker or ''} {r.text}", n, seg_mod.day_number(r.timestamp))
    return seg_mod.write_segment(path / "segments", name, rows, vectors)


def _piece_vectors(piece: list[PassageRow], before: list[PassageRow], after: list[PassageRow]):
    """The piece's passage vectors, their context read from the pieces beside it (EDGE_ROWS each)."""
    from nexus_assets.ingest.passages import is_conversational

    head = before[-EDGE_ROWS:]
    window = [*head, *piece, *after[:EDGE_ROWS]]
    number: dict[str, int] = {}
    last_of_kind: dict[tuple[str, bool], int] = {}
    previous: list[int] = []
    message: list[int] = []
    for r in window:
        k = _key(r)
        if k not in number:
            number[k] = len(number)
            kind = (r.run_id, is_conversational(r.node_type, r.hidden))
            previous.append(last_of_kind.get(kind, -1))
            last_of_kind[kind] = number[k]
        message.append(number[k])
    vectors = blended([r.text for r in window], [r.speaker for r in window], message, previous)
    return vectors[len(head) : len(head) + len(piece)]


def _context(text: str) -> str:
    """A message as another message's context: its first CONTEXT_CHARS characters."""
    return text if len(text) <= CONTEXT_CHARS else text[:CONTEXT_CHARS]


def _messages(rows: list[PassageRow]) -> dict[str, tuple[str, str, str]]:
    """message key -> (its passages joined: the message as said, the message before, the one after),
    neighbours taken among the messages of the same run and of the same kind (conversation or not)."""
    from nexus_assets.ingest.passages import is_conversational

    texts: dict[str, list[str]] = {}
    order: dict[tuple[str, bool], list[str]] = {}
    for r in rows:
        k = _key(r)
        if k not in texts:
            texts[k] = []
            order.setdefault((r.run_id, is_conversational(r.node_type, r.hidden)), []).append(k)
        texts[k].append(r.text)
    out = {}
    for keys in order.values():
        joined = [" ".join(texts[k]) for k in keys]
        for i, k in enumerate(keys):
            out[k] = (joined[i], joined[i - 1] if i else "", joined[i + 1] if i + 1 < len(keys) else "")
    return out


def _neighbours(rows: list[PassageRow], keys: list[str]) -> list[str]:
    """Each passage's neighbours in its message: the passage before it and the one after."""
    out = []
    for i, k in enumerate(keys):
        before = rows[i - 1].text if i and keys[i - 1] == k else ""
        after = rows[i + 1].text if i + 1 < len(rows) and keys[i + 1] == k else ""
        out.append(f"{before} {after}".strip())
    return out


def _key(row) -> str:
    return f"{row.run_id}\x1f{row.json_path}"


def _tidy(path: Path, segments: list[seg_mod.Stored], state: dict) -> tuple[list[seg_mod.Stored], int]:
    """Rewrite segments mostly deleted, and merge the smallest when there are too many."""
    folder = path / "segments"
    kept, merged = [], 0
    for s in segments:
        if s.rows and s.live < (1 - COMPACT_SHARE) * s.rows:
            name = f"seg-{state['next']:06d}"
            state["next"] += 1
            s = seg_mod.merge_segments(folder, name, [s.name])
            merged += 1
        kept.append(s)
    kept = [s for s in kept if s.live]
    if len(kept) > MAX_SEGMENTS:
        kept.sort(key=lambda s: (s.live, s.name))
        small, big = kept[: len(kept) - MAX_SEGMENTS + 2], kept[len(kept) - MAX_SEGMENTS + 2 :]
        name = f"seg-{state['next']:06d}"
        state["next"] += 1
        kept = big + [seg_mod.merge_segments(folder, name, sorted(s.name for s in small))]
        merged += len(small)
        kept.sort(key=lambda s: s.name)
    return kept, merged


def _drop_unlisted(path: Path, listed: set[str]) -> None:
    folder = path / "segments"
    for child in folder.iterdir() if folder.is_dir() else ():
        if child.name not in listed:
            shutil.rmtree(child, ignore_errors=True)


def _clear(path: Path) -> None:
    for name in ("segments", "text", "messages"):
        shutil.rmtree(path / name, ignore_errors=True)
    (path / STATE_FILE).unlink(missing_ok=True)


def forget(db_path: str | Path) -> None:
    """Drop the whole index (invariant 15: no vector, posting or id of a forgotten run is kept);
    the next refresh rebuilds it from what the vault still holds."""
    path = index_dir(db_path)
    with _locked(path):
        _clear(path)


# A process that answers many queries keeps the index it loaded, with the state it loaded.
_warm: dict[str, PassageIndex] = {}


def _place(db_path: str | Path) -> str:
    return str(Path(db_path).resolve()) if "://" not in str(db_path) else str(db_path)


def ensure(vault: PassageStores, db_path: str | Path, *, writable: bool = True) -> PassageIndex | None:
    """The index in step with the vault: the one held, else loaded, else refreshed (None when the
    vault has no passages at all)."""
    place = _place(db_path)
    latest = vault.passages.built_versions(SPLITTER_VERSION)
    held = _warm.get(place)
    if held is not None and held.held == latest and (held.path / STATE_FILE).exists():
        return held
    loaded = load(db_path, held)
    if loaded is None or loaded.held != latest:
        if not latest and loaded is None:
            return None
        refresh(vault, db_path)
        loaded = load(db_path, loaded or held)
    if loaded is not None:
        _warm[place] = loaded
    return loaded


def dense_ranking(index: PassageIndex, query_vector, filt: RecordFilter, depth: int, *,
                  speaker: str | None = None, days: tuple[int, int] | None = None) -> list[tuple[str, float, str]]:
    """(passage id, cosine, run id) of the `depth` nearest admitted passages, best first, ties by id."""
    found: list[tuple[str, float, str]] = []
    for s in index.segments:
        key = (s.name, int(s.deleted.sum()), filt, speaker, days)
        mask = index.masks.get(key)
        if mask is None:
            if len(index.masks) > 64:
                index.masks.clear()
            mask = index.masks[key] = s.mask(filt, speaker, days)
        found += s.search(query_vector, depth, mask)
    return sorted(((p, round(c, 6), r) for p, c, r in found), key=lambda h: (-h[1], h[0]))[:depth]


def bm25_ranking(index: PassageIndex, question: str, filt: RecordFilter, depth: int, *,
                 speaker: str | None = None, days: tuple[int, int] | None = None) -> list[tuple[str, float, str]]:
    """(passage id, score, run id) best first (`text_index.ranked`)."""
    return text_index.ranked(index.texts, index.messages, question, filt, depth=depth, speaker=speaker, days=days)
