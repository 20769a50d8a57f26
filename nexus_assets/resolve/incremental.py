"""Resolution that follows the change (issue 33 item 4): only the bricks a sync's new or changed
runs touch are regrouped; every other brick is read back as the vault holds it.

The rule is still `rules.resolve_keyed`'s, applied to less. What makes that sound:
- a group's text is a function of its fingerprint, so a fingerprint no changed run holds keeps
  its group, its place key and its state (its runs did not change);
- the superset search only ever asks "the smallest strictly longer text that contains me, ties by
  canonical order": for a candidate whose previous answer is still in place, the new answer is the
  smaller of that answer and the best among the touched texts, so only those are searched;
- a candidate whose answer was itself touched, or that was not a candidate before, is searched
  against every text, as a full resolution would.
A full resolution and this one give the same bricks, states and order (the property test
`test_incremental_resolution.py` holds them equal), with the order itself re-ranked from the kept
keys (`ranked_order` here, the same ranking in SQL in the vault).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from nexus_assets.core.fingerprint import normalize
from nexus_assets.core.models import (
    Brick,
    BrickState,
    Occurrence,
    OrderingRule,
    RunStatus,
    SourceAddress,
)
from nexus_assets.resolve.rules import (
    Keyed,
    _brick,
    _Group,
    _smallest_supersets,
    _Text,
    brick_state,
    group_keys,
    retire_deselected,
)


@dataclass(frozen=True, slots=True)
class StoredBrick:
    """What the vault holds of a brick that an incremental resolution reads without regrouping it."""

    brick_id: str
    fingerprint: str
    content: str
    state: BrickState
    superseded_by: str | None
    first_key: bytes
    rank_key: bytes | None = None

    @property
    def retired(self) -> bool:
        """Superseded history of an undone edit: hidden, and no candidate for superseding."""
        return self.state == "SUPERSEDED" and self.superseded_by is None


@dataclass(frozen=True)
class Changes:
    """An incremental resolution: the touched bricks whole (order_index None where the ranking
    decides it), and the new (state, superseded_by) of untouched bricks that a touched text now
    supersedes (or supersedes no longer)."""

    keyed: list[Keyed]
    restated: dict[str, tuple[BrickState, str | None]]


@dataclass(frozen=True)
class Wider:
    """The resolution needs these fingerprints regrouped too (a brick that is no longer superseded
    takes its state from its own sources): resolve again with them touched."""

    fingerprints: frozenset[str]


def resolve_changes(
    topic_id: str,
    occurrences: Iterable[Occurrence],
    *,
    run_status: Mapping[str, RunStatus],
    ordering_rule: OrderingRule,
    stored: Mapping[str, StoredBrick],
    final: Mapping[str, Brick],
    candidates: Sequence[StoredBrick],
    superseders: Mapping[str, StoredBrick],
    everything: Callable[[], Iterable[StoredBrick]],
    stale_addresses: frozenset[SourceAddress] | set[SourceAddress] = frozenset(),
    withdrawn: frozenset[SourceAddress] | set[SourceAddress] = frozenset(),
    ingestion_seq: Mapping[str, int] | None = None,
    deselected: frozenset[str] | set[str] = frozenset(),
) -> Changes | Wider:
    """Resolve the touched fingerprints' groups (`occurrences`: every occurrence of each of them).

    `stored`: the vault's rows of the touched bricks that exist; `final`: those that are FINAL,
    whole. `candidates`: every untouched brick that may be superseded (IMPROVISE, or SUPERSEDED by
    another); `superseders`: the bricks those name; `everything`: every untouched brick that is not
    retired, read only when some candidate must be searched against all texts.
    """
    groups = _groups(topic_id, occurrences, withdrawn, deselected)
    touched = {g.brick_id for g in groups}
    states, retired, keys = _states(groups, final, run_status, ordering_rule, ingestion_seq or {})

    # Touched bricks whose place among the texts moved: a new text, a new first occurrence, or one
    # that retired or came back. A candidate whose answer was one of these is searched again whole.
    moved = {
        g.brick_id
        for g in groups
        if g.brick_id not in stored
        or stored[g.brick_id].first_key != keys[g.brick_id][0]
        or stored[g.brick_id].retired != (g.brick_id in retired)
    }
    order: dict[str, bytes] = {bid: k[0] for bid, k in keys.items()}
    touched_texts = [_Text(g.brick_id, normalize(g.canonical.content)) for g in groups if g.brick_id not in retired]
    untouched = [c for c in candidates if c.brick_id not in touched]
    quick, thorough, last = _to_search(groups, untouched, states, retired, stored, moved, order, touched_texts)
    superseded_by = _quick_answers(quick, last, touched_texts, order, superseders)
    if thorough:
        texts = list(touched_texts)
        for s in everything():
            if s.brick_id not in touched and not s.retired:
                texts.append(_Text(s.brick_id, normalize(s.content)))
                order[s.brick_id] = s.first_key
        superseded_by.update(_smallest_supersets(thorough, texts, order))

    restated: dict[str, tuple[BrickState, str | None]] = {}
    wider: set[str] = set()
    for c in untouched:
        now = superseded_by.get(c.brick_id)
        if now == c.superseded_by:
            continue
        if now is None:
            wider.add(c.fingerprint)  # superseded no longer: its state comes from its own sources
        else:
            restated[c.brick_id] = ("SUPERSEDED", now)
    if wider:
        return Wider(frozenset(wider))
    return Changes(_keyed(topic_id, groups, states, keys, superseded_by, final, stale_addresses), restated)


def _groups(
    topic_id: str, occurrences: Iterable[Occurrence], withdrawn: frozenset[SourceAddress] | set[SourceAddress], deselected: frozenset[str] | set[str]
) -> list[_Group]:
    """One group per touched fingerprint, its deselected ones retired."""
    by_fp: dict[str, list[Occurrence]] = defaultdict(list)
    for occ in occurrences:
        if occ.topic_id != topic_id:
            raise ValueError(f"occurrence of topic {occ.topic_id!r} passed to resolution of {topic_id!r}")
        by_fp[occ.fingerprint].append(occ)
    groups = [_Group(topic_id, occs, withdrawn) for occs in by_fp.values()]
    retire_deselected(groups, deselected)
    return groups


def _states(
    groups: list[_Group], final: Mapping[str, Brick], run_status: Mapping[str, RunStatus], ordering_rule: OrderingRule, ingestion_seq: Mapping[str, int]
) -> tuple[dict[str, BrickState], set[str], dict[str, tuple[bytes, bytes | None]]]:
    """Each touched brick's state before supersession, the ones retired, and their order keys."""
    states: dict[str, BrickState] = {}
    retired: set[str] = set()
    keys: dict[str, tuple[bytes, bytes | None]] = {}
    for g in groups:
        keys[g.brick_id] = group_keys(g, ordering_rule, ingestion_seq)
        if g.brick_id in final:
            states[g.brick_id] = "FINAL"
        elif g.withdrawn:
            states[g.brick_id] = "SUPERSEDED"
            retired.add(g.brick_id)
        else:
            states[g.brick_id] = brick_state((s.run_id for s in g.sources), run_status, sealed=False)
    return states, retired, keys


def _to_search(
    groups: list[_Group],
    untouched: list[StoredBrick],
    states: Mapping[str, BrickState],
    retired: set[str],
    stored: Mapping[str, StoredBrick],
    moved: set[str],
    order: dict[str, bytes],
    touched_texts: list[_Text],
) -> tuple[list[_Text], list[_Text], dict[str, str | None]]:
    """The candidates for supersession: those whose last answer still holds for the untouched texts
    (quick: searched among the touched texts only), the others (thorough: searched against all), and
    the quick ones' last answers. Adds the untouched candidates' order keys to `order`."""
    text_of = {t.brick_id: t.normalized for t in touched_texts}

    def previous_answer(s: StoredBrick | None) -> tuple[bool, str | None]:
        """(whether the candidate's last answer still holds for the untouched texts, that answer)."""
        if s is None or not (s.state == "IMPROVISE" or (s.state == "SUPERSEDED" and s.superseded_by is not None)):
            return False, None  # not a candidate last time: no answer to build on
        if s.superseded_by is not None and s.superseded_by in moved:
            return False, None
        return True, s.superseded_by

    quick: list[_Text] = []
    thorough: list[_Text] = []
    last: dict[str, str | None] = {}
    for g in groups:
        before = stored.get(g.brick_id)
        if g.brick_id in retired or not (states[g.brick_id] == "IMPROVISE" or (before is not None and before.state == "SUPERSEDED")):
            continue
        usable, answer = previous_answer(before)
        (quick if usable else thorough).append(_Text(g.brick_id, text_of[g.brick_id]))
        if usable:
            last[g.brick_id] = answer
    for c in untouched:
        text = normalize(c.content)
        order[c.brick_id] = c.first_key
        usable, answer = previous_answer(c)
        (quick if usable else thorough).append(_Text(c.brick_id, text))
        if usable:
            last[c.brick_id] = answer
    return quick, thorough, last


def _quick_answers(
    quick: list[_Text], last: Mapping[str, str | None], touched_texts: list[_Text], order: Mapping[str, bytes], superseders: Mapping[str, StoredBrick]
) -> dict[str, str]:
    """The quick candidates' superseders: the smallest of a touched text that contains them and
    their last answer."""
    superseded_by: dict[str, str] = {}
    if not quick:
        return superseded_by
    text_of = {t.brick_id: t.normalized for t in touched_texts}
    found = _smallest_supersets(quick, touched_texts, order) if touched_texts else {}
    for c in quick:
        options = []
        if (new := found.get(c.brick_id)) is not None:
            options.append((len(text_of[new]), order[new], new))
        if (old := last[c.brick_id]) is not None:
            s = superseders.get(old)
            if old in text_of:
                options.append((len(text_of[old]), order[old], old))
            elif s is not None:
                options.append((len(normalize(s.content)), s.first_key, old))
        if options:
            superseded_by[c.brick_id] = min(options)[2]
    return superseded_by


def _keyed(
    topic_id: str,
    groups: list[_Group],
    states: Mapping[str, BrickState],
    keys: Mapping[str, tuple[bytes, bytes | None]],
    superseded_by: Mapping[str, str],
    final: Mapping[str, Brick],
    stale_addresses: frozenset[SourceAddress] | set[SourceAddress],
) -> list[Keyed]:
    """The touched bricks as they now are, with their order keys."""

    def is_stale(sources: Sequence[SourceAddress]) -> bool:
        return bool(sources) and sources[0] in stale_addresses

    keyed: list[Keyed] = []
    for g in groups:
        bid, state = g.brick_id, states[g.brick_id]
        if bid in superseded_by:
            state = "SUPERSEDED"
        if state == "SUPERSEDED":
            brick = _brick(topic_id, g, state, None, superseded_by.get(bid), is_stale(g.sources))
        elif bid in final:
            brick = final[bid].model_copy(update={"stale": is_stale(final[bid].sources)})
        else:
            brick = _brick(topic_id, g, state, None, None, is_stale(g.sources))
        keyed.append(Keyed(brick, *keys[bid]))
    return keyed


def ranked_order(bricks: Iterable[tuple[str, BrickState, int | None, bytes, bytes | None]]) -> dict[str, int | None]:
    """Every brick's order_index from (brick_id, state, stored order_index, first_key, rank_key): a
    FINAL brick keeps its place, every other visible brick follows them by its rank key (the
    first key where it has none), a superseded one has no place. `rules.resolve_keyed` orders
    exactly so; the vault ranks with the same rule in SQL (`StageRecords.rank`)."""
    rows = list(bricks)
    kept = sum(1 for _, state, index, _, _ in rows if state == "FINAL" and index is not None)
    fresh = sorted((rank if rank is not None else first, bid) for bid, state, _, first, rank in rows if state not in ("FINAL", "SUPERSEDED"))
    order: dict[str, int | None] = {bid: (index if state == "FINAL" else None) for bid, state, index, _, _ in rows}
    for n, (_, bid) in enumerate(fresh):
        order[bid] = kept + n
    return order
