"""The uniqueness gate and brick states (docs/invariants.md §6, §2.7).

Resolution is a function of the whole set of occurrences validated so far, never of the order
they arrived in: that is what makes a sync order-independent and idempotent.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

from nexus_assets.core.fingerprint import brick_id as make_brick_id
from nexus_assets.core.fingerprint import normalize
from nexus_assets.core.models import (
    Brick,
    BrickState,
    Occurrence,
    OrderingRule,
    RunStatus,
    SourceAddress,
    trusted,
)
from nexus_assets.resolve.order import (
    brick_sort_key,
    canonical_key,
    first_ingestion,
    key_bytes,
    occurrence_key,
)


@dataclass(frozen=True, slots=True)
class PriorState:
    """What resolution needs of a stored brick that is not FINAL: its state and place. A topic's
    prior bricks are held this small; only FINAL ones, which resolution copies, come whole."""

    state: BrickState
    order_index: int | None


def brick_state(source_runs: Iterable[str], run_status: Mapping[str, RunStatus], *, sealed: bool) -> BrickState:
    """IMPROVISE while any source run is open; FORMING once all are closed; FINAL once sealed."""
    if sealed:
        return "FINAL"
    if any(run_status.get(run_id, "OPEN") == "OPEN" for run_id in source_runs):
        return "IMPROVISE"
    return "FORMING"


class _Group:
    __slots__ = ("brick_id", "canonical", "first", "keys", "sources", "withdrawn")

    def __init__(self, topic_id: str, occurrences: list[Occurrence], withdrawn: frozenset[SourceAddress] | set[SourceAddress]):
        self.brick_id = make_brick_id(topic_id, occurrences[0].fingerprint)
        self.keys: tuple[bytes, bytes | None] | None = None  # (first_key, rank_key) once ranked
        if len(occurrences) == 1:  # most bricks: nothing to rank
            self.canonical = self.first = occurrences[0]
            self.sources = (occurrences[0].address,)
            self.withdrawn = bool(withdrawn) and occurrences[0].address in withdrawn
            return
        # A withdrawn source is kept (history) but never canonical while another is not: the brick
        # then reads as it did before the undone edit.
        key = (lambda o: (o.address in withdrawn, canonical_key(o))) if withdrawn else canonical_key
        occurrences.sort(key=key)
        seen: dict[SourceAddress, None] = {}
        for occ in occurrences:
            seen.setdefault(occ.address, None)
        self.canonical = occurrences[0]
        self.withdrawn = bool(withdrawn) and self.canonical.address in withdrawn
        live = [o for o in occurrences if o.address not in withdrawn] if withdrawn and not self.withdrawn else occurrences
        # Where the brick sorts among the others: its smallest occurrence_key, at the canonical's
        # place. Which version of the node is canonical never moves a brick, so manifests built
        # before versions were ranked keep their order.
        self.first = min(live, key=occurrence_key)
        self.sources = tuple(seen)


def retire_deselected(groups: Iterable[_Group], deselected: frozenset[str] | set[str]) -> None:
    """A text the topic's current definition no longer selects (`extract/selection.py`) is history,
    as an undone edit's is: superseded with `superseded_by` None, kept, back if selected again."""
    if deselected:
        for g in groups:
            if g.canonical.fingerprint in deselected:
                g.withdrawn = True


def resolve_topic(topic_id: str, occurrences: Iterable[Occurrence], **options: Any) -> list[Brick]:
    """All of a topic's bricks: the visible ones in manifest order, then the superseded ones.
    `options` as for `resolve_lazily`, which makes them.

    `prior` is what the vault holds from earlier syncs; it matters only where the contract makes
    history count: FINAL bricks never change and SUPERSEDED never comes back.

    `withdrawn` are addresses whose node now reads other text that the vault knew before them (an
    edit that was undone); `deselected` fingerprints of texts the topic's definition no longer
    selects are history the same way. A brick with no other source is superseded history (`superseded_by`
    None): hidden, kept, and visible again if its text comes back; it supersedes nothing. FINAL
    bricks are kept as they are (invariant 7).
    """
    return list(resolve_lazily(topic_id, occurrences, **options))


class Keyed(NamedTuple):
    """A resolved brick with the keys its place was decided by, as `key_bytes`: `first_key` of its
    first occurrence (the canonical order, which also breaks ties between supersets) and
    `rank_key` of its place under the topic's ordering rule (None: the same as `first_key`). The
    vault keeps them, so a later sync re-ranks without reading every occurrence again."""

    brick: Brick
    first_key: bytes
    rank_key: bytes | None


def resolve_lazily(topic_id: str, occurrences: Iterable[Occurrence], **options: Any) -> Iterator[Brick]:
    """`resolve_topic`'s bricks in the same order, made one at a time as they are asked for; see
    `resolve_keyed`, which makes them with their keys."""
    return (k.brick for k in resolve_keyed(topic_id, occurrences, **options))


def resolve_keyed(
    topic_id: str,
    occurrences: Iterable[Occurrence],
    *,
    run_status: Mapping[str, RunStatus],
    ordering_rule: OrderingRule = "chronological",
    sealed: bool = False,
    prior: Mapping[str, Brick | PriorState] | None = None,
    stale_addresses: frozenset[SourceAddress] | set[SourceAddress] = frozenset(),
    withdrawn: frozenset[SourceAddress] | set[SourceAddress] = frozenset(),
    ingestion_seq: Mapping[str, int] | None = None,
    deselected: frozenset[str] | set[str] = frozenset(),
) -> Iterator[Keyed]:
    """`resolve_topic`'s bricks in the same order, with their keys, made one at a time as they are asked for.

    Everything is decided, and `occurrences` read to the end, before this returns; each group is
    let go once its brick is made. A consumer that writes bricks away as they come (the stage)
    thus never holds a large topic twice, once as groups and once as bricks.
    """
    prior = prior or {}
    ingestion_seq = ingestion_seq or {}
    by_fp: dict[str, list[Occurrence]] = defaultdict(list)
    for occ in occurrences:
        if occ.topic_id != topic_id:
            raise ValueError(f"occurrence of topic {occ.topic_id!r} passed to resolution of {topic_id!r}")
        by_fp[occ.fingerprint].append(occ)
    groups = sorted((_Group(topic_id, occs, withdrawn) for occs in by_fp.values()), key=lambda g: occurrence_key(g.first))
    del by_fp
    retire_deselected(groups, deselected)  # a group keeps its canonical occurrence and its addresses; the other copies can go

    states: dict[str, BrickState] = {}
    retired: set[str] = set()
    for g in groups:
        before = prior.get(g.brick_id)
        if before is not None and before.state == "FINAL":
            states[g.brick_id] = "FINAL"
        elif g.withdrawn:
            states[g.brick_id] = "SUPERSEDED"
            retired.add(g.brick_id)
        else:
            states[g.brick_id] = brick_state((s.run_id for s in g.sources), run_status, sealed=sealed)

    candidates = [
        g
        for g in groups
        if g.brick_id not in retired
        and (states[g.brick_id] == "IMPROVISE" or (g.brick_id in prior and prior[g.brick_id].state == "SUPERSEDED"))
    ]
    superseded_by: dict[str, str] = {}
    if candidates:
        # Normalized texts only while the search runs: most syncs have no candidate at all.
        wanted = {g.brick_id for g in candidates}
        texts = [_Text(g.brick_id, normalize(g.canonical.content)) for g in groups if g.brick_id not in retired]
        superseded_by = _smallest_supersets([t for t in texts if t.brick_id in wanted], texts)
        del texts
    del candidates
    for bid in superseded_by:
        states[bid] = "SUPERSEDED"

    # A sealed order never changes: FINAL bricks keep their places and anything newer follows them.
    frozen = {bid: b.order_index for bid, b in prior.items() if b.state == "FINAL" and b.order_index is not None}
    visible = [g for g in groups if states[g.brick_id] != "SUPERSEDED"]
    kept = sorted((g for g in visible if g.brick_id in frozen), key=lambda g: frozen[g.brick_id])
    def ranked(g: _Group) -> bytes:
        # The place keys are made once, here, and kept on the group for the vault: their bytes sort
        # exactly as the rule's tuples do (`key_bytes`).
        g.keys = group_keys(g, ordering_rule, ingestion_seq)
        return g.keys[1] or g.keys[0]

    fresh = sorted((g for g in visible if g.brick_id not in frozen), key=ranked)
    order: list[_Group | None] = [*kept, *fresh, *(g for g in groups if states[g.brick_id] == "SUPERSEDED")]
    del groups, visible, kept, fresh
    return _bricks(topic_id, order, states, superseded_by, prior, stale_addresses, ordering_rule, ingestion_seq)


def rank_key(g: _Group, ordering_rule: OrderingRule, ingestion_seq: Mapping[str, int]) -> tuple:
    return brick_sort_key(g.first, ordering_rule, first_ingestion([s.run_id for s in g.sources], ingestion_seq))


def group_keys(g: _Group, ordering_rule: OrderingRule, ingestion_seq: Mapping[str, int]) -> tuple[bytes, bytes | None]:
    """(first_key, rank_key) of a group, as `Keyed` holds them."""
    first = key_bytes(occurrence_key(g.first))
    if ordering_rule == "chronological":
        return first, None
    return first, key_bytes(rank_key(g, ordering_rule, ingestion_seq))


def _bricks(
    topic_id: str,
    order: list[_Group | None],
    states: Mapping[str, BrickState],
    superseded_by: Mapping[str, str],
    prior: Mapping[str, Brick | PriorState],
    stale_addresses: frozenset[SourceAddress] | set[SourceAddress],
    ordering_rule: OrderingRule,
    ingestion_seq: Mapping[str, int],
) -> Iterator[Keyed]:
    def is_stale(sources: Sequence[SourceAddress]) -> bool:
        # Invariant 14: a brick is stale when its canonical source no longer matches.
        return bool(sources) and sources[0] in stale_addresses

    for index in range(len(order)):
        g, order[index] = order[index], None
        state = states[g.brick_id]
        before = prior.get(g.brick_id)
        keys = g.keys or group_keys(g, ordering_rule, ingestion_seq)
        if state == "SUPERSEDED":
            yield Keyed(_brick(topic_id, g, state, None, superseded_by.get(g.brick_id), is_stale(g.sources)), *keys)
        elif before is not None and before.state == "FINAL":
            yield Keyed(before.model_copy(update={"stale": is_stale(before.sources)}), *keys)
        else:
            yield Keyed(_brick(topic_id, g, state, index, None, is_stale(g.sources)), *keys)


_SEPARATOR = "\x00"


Anchor = tuple[str, ...]


def _anchors(needle: str) -> list[Anchor]:
    """Keys any text containing `needle` must hold whole. Normalized text is words joined by single
    spaces, so wherever the needle occurs its interior words are bounded by spaces: each run of
    adjacent interior words is a run of words of the other text. Runs of three are far rarer than
    pairs (on 100 MB of runs the search took 3.1 s with them, 4.2 s with pairs), so a needle with
    three or more interior words uses triples, one with two its pair, one with one that word, and
    a needle of two words or fewer has none."""
    interior = needle.split(" ")[1:-1]
    return (
        list(zip(interior, interior[1:], interior[2:]))
        or list(zip(interior, interior[1:]))
        or [(word,) for word in interior]
    )


def _held(text: str, triples: set[Anchor], pairs: set[Anchor], words: set[Anchor]) -> list[Anchor]:
    """The wanted anchors `text` holds, looked up in C: no key of the text is built as a string."""
    split = text.split(" ")
    held: list[Anchor] = []
    if triples:
        held += triples.intersection(zip(split, split[1:], split[2:]))
    if pairs:
        held += pairs.intersection(zip(split, split[1:]))
    if words:
        held += words.intersection(zip(split))
    return held


class _Text(NamedTuple):
    brick_id: str
    normalized: str


def _smallest_supersets(candidates: list[_Text], groups: list[_Text], order: Mapping[str, Any] | None = None) -> dict[str, str]:
    """brick_id -> the smallest brick whose normalized text strictly contains it (ties: canonical
    order: `groups`' own, or `order`'s keys).

    A candidate is looked for only among the bricks that hold the rarest of its anchors, so the
    search does not grow with (candidates × every text in the topic). Needles too short to have an
    anchor are found in one haystack of all texts, a few C-level `str.find` calls each.
    """
    if order is None:
        order = {g.brick_id: i for i, g in enumerate(groups)}  # groups are in canonical order
    anchors = {g.brick_id: _anchors(g.normalized) for g in candidates}
    holders: dict[Anchor, list[_Text]] = {a: [] for keys in anchors.values() for a in keys}
    if holders:
        wanted = [{key for key in holders if len(key) == size} for size in (3, 2, 1)]
        for g in groups:
            for key in _held(g.normalized, *wanted):
                holders[key].append(g)
    haystack = None
    found: dict[str, str] = {}
    for g in candidates:
        needle = g.normalized
        if not needle or _SEPARATOR in needle:
            continue
        keys = anchors[g.brick_id]
        if keys:
            rarest = min((holders[k] for k in keys), key=len)
            supersets = (o for o in rarest if len(o.normalized) > len(needle) and needle in o.normalized)
        else:
            if haystack is None:
                haystack = _Haystack(groups)
            supersets = haystack.containing(needle)
        best = min(supersets, key=lambda o: (len(o.normalized), order[o.brick_id]), default=None)
        if best is not None:
            found[g.brick_id] = best.brick_id
    return found


class _Haystack:
    """Every group's text joined into one string, for needles too short to have an anchor."""

    def __init__(self, groups: list[_Text]):
        self.groups = groups
        self.starts, offset = [], 0
        for g in groups:
            self.starts.append(offset)
            offset += len(g.normalized) + 1
        self.text = _SEPARATOR.join(g.normalized for g in groups)

    def containing(self, needle: str):
        """Every longer group whose text contains `needle`, a few C-level `str.find` calls each."""
        pos = self.text.find(needle)
        while pos >= 0:
            at = bisect_right(self.starts, pos) - 1
            other = self.groups[at]
            if len(other.normalized) > len(needle):
                yield other
                # Skip the rest of this brick: one hit per brick is enough.
                pos = self.text.find(needle, self.starts[at] + len(other.normalized) + 1)
            else:
                pos = self.text.find(needle, pos + 1)


def _brick(topic_id: str, g: _Group, state: BrickState, order_index: int | None, superseded_by: str | None, stale: bool) -> Brick:
    return trusted(
        Brick,
        brick_id=g.brick_id,
        topic_id=topic_id,
        content=g.canonical.content,
        fingerprint=g.canonical.fingerprint,
        state=state,
        order_index=order_index,
        superseded_by=superseded_by,
        stale=stale,
        sources=g.sources,
    )
