"""Invariant 6 (the uniqueness gate: LINK, SUPERSEDE, APPEND) and invariant 7 (lifecycle).

Per topic, over all occurrences that passed the hallucination gate:
- same fingerprint → LINK: one brick, one more source; content = the canonical first occurrence's text.
- normalized text a strict substring of another brick's, and the smaller one IMPROVISE →
  SUPERSEDED by the smallest such superset (ties by canonical order), whatever the arrival order;
  still stored and traceable; permanent.
- anything else → APPEND. No merging, ever.
Lifecycle: IMPROVISE while any source run is OPEN, FORMING when all are CLOSED, FINAL once sealed;
FINAL bricks are immutable.
"""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from nexus_assets.core.fingerprint import fingerprint, normalize
from nexus_assets.publish.manifest import manifest_entries
from nexus_assets.resolve.rules import resolve_topic
from nexus_assets_tests.strategies import TOPIC, make_run, occ, statuses


def by_content(bricks):
    return {b.content: b for b in bricks}


def prior_of(bricks):
    return {b.brick_id: b for b in bricks}


def slice_at(runs, source):
    node = runs[source.run_id].document["messages"][int(source.json_path.split("][")[1])]["content"]
    return node[source.start : source.end]


# --- LINK ------------------------------------------------------------------------------------

LATE = make_run("run-late", "Sync is nightly.", status="OPEN", started_at="2024-01-02T00:00:00Z")
EARLY = make_run("run-early", ["Hello.", "sync  IS\tnightly."], status="CLOSED", started_at="2024-01-01T00:00:00Z")
LINK_RUNS = {r.run_id: r for r in (LATE, EARLY)}


def test_link_same_fingerprint_from_two_runs_is_one_brick_with_two_sources():
    late, early = occ(LATE, "Sync is nightly."), occ(EARLY, "sync  IS\tnightly.", 1)
    assert late.fingerprint == early.fingerprint
    for arrival in ([late, early], [early, late]):
        [brick] = resolve_topic(TOPIC, arrival, run_status=statuses(LATE, EARLY))
        assert brick.brick_id == hashlib.sha256(f"{TOPIC}:{late.fingerprint}".encode()).hexdigest()
        # canonical first source = earliest by the canonical order key, even though it arrived later
        assert brick.sources == (early.address, late.address)
        assert brick.content == "sync  IS\tnightly."
        assert brick.state == "IMPROVISE"  # run-late is still open
        # every linked address slices to that occurrence's own verbatim text, same fingerprint
        assert [slice_at(LINK_RUNS, s) for s in brick.sources] == ["sync  IS\tnightly.", "Sync is nightly."]
        assert {fingerprint(slice_at(LINK_RUNS, s)) for s in brick.sources} == {brick.fingerprint}


def test_link_canonical_source_uses_message_timestamp_before_run_start():
    a = make_run("a", "Sync is nightly.", started_at="2024-01-01T00:00:00Z", timestamps=["2024-06-01T00:00:00Z"])
    b = make_run("b", "SYNC IS NIGHTLY.", started_at="2024-03-01T00:00:00Z")
    [brick] = resolve_topic(TOPIC, [occ(a, "Sync is nightly."), occ(b, "SYNC IS NIGHTLY.")], run_status=statuses(a, b))
    assert brick.content == "SYNC IS NIGHTLY."
    assert [s.run_id for s in brick.sources] == ["b", "a"]


def test_link_the_same_address_twice_is_one_source():
    run = make_run("r1", "Sync is nightly.")
    [brick] = resolve_topic(TOPIC, [occ(run, "Sync is nightly."), occ(run, "Sync is nightly.")], run_status=statuses(run))
    assert len(brick.sources) == 1


def test_link_within_one_run_orders_sources_by_document_position():
    run = make_run("r1", ["Sync is nightly.", "As I said: sync is nightly."])
    later, earlier = occ(run, "sync is nightly.", 1), occ(run, "Sync is nightly.", 0)
    [brick] = resolve_topic(TOPIC, [later, earlier], run_status=statuses(run))
    assert brick.content == "Sync is nightly."
    assert brick.sources == (earlier.address, later.address)


# --- SUPERSEDE -------------------------------------------------------------------------------

OPEN_FRAGMENT = make_run("run-a", "As agreed, sync is nightly.", status="OPEN", started_at="2024-01-03T00:00:00Z")
SMALL_SUPERSET = make_run("run-b", "Sync is nightly and fast.", status="CLOSED", started_at="2024-01-02T00:00:00Z")
LARGE_SUPERSET = make_run("run-c", "The sync is nightly and fast, always.", status="OPEN", started_at="2024-01-01T00:00:00Z")
UNRELATED = make_run("run-d", "Bricks are verbatim.", status="OPEN", started_at="2024-01-04T00:00:00Z")
SUPERSEDE_STATUS = statuses(OPEN_FRAGMENT, SMALL_SUPERSET, LARGE_SUPERSET, UNRELATED)
FRAGMENT = occ(OPEN_FRAGMENT, "sync is nightly")
SMALL = occ(SMALL_SUPERSET, "Sync is nightly and fast.")
LARGE = occ(LARGE_SUPERSET, "The sync is nightly and fast, always.")
OTHER = occ(UNRELATED, "Bricks are verbatim.")
SUPERSEDE_OCCURRENCES = [FRAGMENT, SMALL, LARGE, OTHER]


def test_supersede_fragment_by_the_smallest_superset():
    bricks = resolve_topic(TOPIC, SUPERSEDE_OCCURRENCES, run_status=SUPERSEDE_STATUS)
    got = by_content(bricks)
    fragment = got["sync is nightly"]
    small, large = got["Sync is nightly and fast."], got["The sync is nightly and fast, always."]
    assert fragment.state == "SUPERSEDED"
    assert fragment.superseded_by == small.brick_id
    assert small.state == "FORMING" and small.superseded_by is None  # run-b is closed: not superseded
    assert large.state == "IMPROVISE" and large.superseded_by is None
    assert got["Bricks are verbatim."].state == "IMPROVISE"


def test_superseded_brick_stays_stored_and_traceable_but_hidden():
    bricks = resolve_topic(TOPIC, SUPERSEDE_OCCURRENCES, run_status=SUPERSEDE_STATUS)
    fragment = by_content(bricks)["sync is nightly"]
    assert bricks[-1] == fragment  # visible ones first, then the superseded ones
    assert fragment.order_index is None
    assert fragment.content == "sync is nightly"
    assert fragment.sources == (FRAGMENT.address,)
    node = OPEN_FRAGMENT.document["messages"][0]["content"]
    assert node[fragment.sources[0].start : fragment.sources[0].end] == fragment.content
    visible = [b for b in bricks if b.state != "SUPERSEDED"]
    assert [b.order_index for b in visible] == list(range(len(visible)))
    assert fragment.brick_id not in {e.brick_id for e in manifest_entries(bricks)}


@settings(max_examples=60, deadline=None)
@given(arrival=st.permutations(SUPERSEDE_OCCURRENCES), cut=st.integers(0, len(SUPERSEDE_OCCURRENCES)))
def test_supersede_holds_in_any_arrival_order_and_any_split(arrival, cut):
    reference = resolve_topic(TOPIC, SUPERSEDE_OCCURRENCES, run_status=SUPERSEDE_STATUS)
    assert resolve_topic(TOPIC, arrival, run_status=SUPERSEDE_STATUS) == reference
    first = resolve_topic(TOPIC, arrival[:cut], run_status=SUPERSEDE_STATUS)
    assert resolve_topic(TOPIC, arrival, run_status=SUPERSEDE_STATUS, prior=prior_of(first)) == reference


def test_supersede_ties_between_equal_length_supersets_go_to_canonical_order():
    fragment_run = make_run("run-z", "sync is nightly", status="OPEN", started_at="2024-01-09T00:00:00Z")
    later = make_run("run-a", "A sync is nightly", status="OPEN", started_at="2024-01-02T00:00:00Z")
    earlier = make_run("run-b", "B sync is nightly", status="OPEN", started_at="2024-01-01T00:00:00Z")
    occs = [occ(fragment_run, "sync is nightly"), occ(later, "A sync is nightly"), occ(earlier, "B sync is nightly")]
    assert len(normalize(occs[1].content)) == len(normalize(occs[2].content))
    for arrival in (occs, occs[::-1], [occs[1], occs[0], occs[2]]):
        got = by_content(resolve_topic(TOPIC, arrival, run_status=statuses(fragment_run, later, earlier)))
        assert got["sync is nightly"].superseded_by == got["B sync is nightly"].brick_id


def test_supersede_compares_normalized_text():
    fragment_run = make_run("r1", "ＳＹＮＣ\tIS  NIGHTLY", status="OPEN")
    superset_run = make_run("r2", "The sync is nightly and fast.", status="CLOSED")
    got = by_content(resolve_topic(
        TOPIC,
        [occ(fragment_run, "ＳＹＮＣ\tIS  NIGHTLY"), occ(superset_run, "The sync is nightly and fast.")],
        run_status=statuses(fragment_run, superset_run),
    ))
    assert got["ＳＹＮＣ\tIS  NIGHTLY"].state == "SUPERSEDED"
    assert got["ＳＹＮＣ\tIS  NIGHTLY"].content == "ＳＹＮＣ\tIS  NIGHTLY"  # never normalised


def test_supersede_chain_each_points_to_its_smallest_superset():
    run = make_run("r1", "The sync engine runs nightly, always.", status="OPEN")
    a, b, c = occ(run, "sync engine"), occ(run, "The sync engine runs"), occ(run, "The sync engine runs nightly, always.")
    got = by_content(resolve_topic(TOPIC, [c, a, b], run_status=statuses(run)))
    assert got["sync engine"].superseded_by == got["The sync engine runs"].brick_id
    assert got["The sync engine runs"].superseded_by == got["The sync engine runs nightly, always."].brick_id
    assert [b.content for b in got.values() if b.state != "SUPERSEDED"] == ["The sync engine runs nightly, always."]


def test_forming_fragment_is_not_superseded():
    closed_fragment = make_run("r1", "sync is nightly", status="CLOSED")
    open_superset = make_run("r2", "The sync is nightly and fast.", status="OPEN")
    bricks = resolve_topic(
        TOPIC,
        [occ(open_superset, "The sync is nightly and fast."), occ(closed_fragment, "sync is nightly")],
        run_status=statuses(closed_fragment, open_superset),
    )
    got = by_content(bricks)
    assert got["sync is nightly"].state == "FORMING"
    assert got["sync is nightly"].superseded_by is None
    assert got["sync is nightly"].order_index is not None


def test_fragment_linked_to_an_open_run_is_improvise_and_superseded():
    closed = make_run("r1", "sync is nightly", status="CLOSED")
    still_open = make_run("r2", "Sync is nightly", status="OPEN")
    superset = make_run("r3", "The sync is nightly and fast.", status="CLOSED")
    got = by_content(resolve_topic(
        TOPIC,
        [occ(closed, "sync is nightly"), occ(still_open, "Sync is nightly"), occ(superset, "The sync is nightly and fast.")],
        run_status=statuses(closed, still_open, superset),
    ))
    fragment = next(b for b in got.values() if b.fingerprint == fingerprint("sync is nightly"))
    assert fragment.state == "SUPERSEDED" and len(fragment.sources) == 2


def test_superseded_is_permanent_when_the_fragment_run_closes_later():
    first = resolve_topic(TOPIC, SUPERSEDE_OCCURRENCES, run_status=SUPERSEDE_STATUS)
    before = by_content(first)["sync is nightly"]
    assert before.state == "SUPERSEDED"
    closed = {**SUPERSEDE_STATUS, "run-a": "CLOSED"}
    # Without history the fragment would be FORMING now …
    fresh = by_content(resolve_topic(TOPIC, SUPERSEDE_OCCURRENCES, run_status=closed))
    assert fresh["sync is nightly"].state == "FORMING"
    # … but with the vault's earlier result it stays SUPERSEDED.
    later = by_content(resolve_topic(TOPIC, SUPERSEDE_OCCURRENCES, run_status=closed, prior=prior_of(first)))
    assert later["sync is nightly"].state == "SUPERSEDED"
    assert later["sync is nightly"].superseded_by == before.superseded_by
    assert later["sync is nightly"].sources == before.sources
    # and sealing does not bring it back either
    sealed = by_content(resolve_topic(TOPIC, SUPERSEDE_OCCURRENCES, run_status=closed, sealed=True, prior=prior_of(first)))
    assert sealed["sync is nightly"].state == "SUPERSEDED"


# --- APPEND ----------------------------------------------------------------------------------


def test_append_partial_overlap_is_two_bricks_never_merged():
    run = make_run("r1", "The sync is nightly and fast.", status="OPEN")
    bricks = resolve_topic(TOPIC, [occ(run, "sync is nightly"), occ(run, "nightly and fast")], run_status=statuses(run))
    assert [(b.content, b.state, b.order_index) for b in bricks] == [
        ("sync is nightly", "IMPROVISE", 0),
        ("nightly and fast", "IMPROVISE", 1),
    ]


def test_append_contradiction_is_two_bricks():
    a = make_run("a", "Sync runs nightly.", status="OPEN", started_at="2024-01-01T00:00:00Z")
    b = make_run("b", "Sync runs hourly.", status="OPEN", started_at="2024-01-02T00:00:00Z")
    bricks = resolve_topic(TOPIC, [occ(b, "Sync runs hourly."), occ(a, "Sync runs nightly.")], run_status=statuses(a, b))
    assert [b.content for b in bricks] == ["Sync runs nightly.", "Sync runs hourly."]
    assert len({b.brick_id for b in bricks}) == 2
    assert all(b.state == "IMPROVISE" and len(b.sources) == 1 for b in bricks)


def test_superset_keeps_its_own_content_when_it_supersedes():
    bricks = resolve_topic(TOPIC, SUPERSEDE_OCCURRENCES, run_status=SUPERSEDE_STATUS)
    runs = {r.run_id: r for r in (OPEN_FRAGMENT, SMALL_SUPERSET, LARGE_SUPERSET, UNRELATED)}
    # Each brick is exactly its own occurrence's text, at its own address: the superset's content is
    # its own sentence (nothing of the fragment merged in), and the fragment keeps its own words.
    expected = {
        "run-a": "sync is nightly",
        "run-b": "Sync is nightly and fast.",
        "run-c": "The sync is nightly and fast, always.",
        "run-d": "Bricks are verbatim.",
    }
    assert len(bricks) == len(expected)
    for b in bricks:
        (source,) = b.sources  # nothing merged into anything
        assert b.content == expected[source.run_id] == slice_at(runs, source)
        assert b.fingerprint == hashlib.sha256(" ".join(b.content.casefold().split()).encode("utf-8")).hexdigest()
    superset = next(b for b in bricks if b.sources[0].run_id == "run-b")
    assert next(b for b in bricks if b.sources[0].run_id == "run-a").superseded_by == superset.brick_id
    assert superset.content == "Sync is nightly and fast." and superset.state == "FORMING"


# --- lifecycle (invariant 7) -----------------------------------------------------------------


def test_improvise_while_any_source_run_is_open_forming_when_all_closed():
    a = make_run("a", "Sync is nightly.", status="OPEN")
    b = make_run("b", "sync is nightly.", status="CLOSED")
    occs = [occ(a, "Sync is nightly."), occ(b, "sync is nightly.")]
    [brick] = resolve_topic(TOPIC, occs, run_status={"a": "OPEN", "b": "CLOSED"})
    assert brick.state == "IMPROVISE"
    [brick] = resolve_topic(TOPIC, occs, run_status={"a": "CLOSED", "b": "CLOSED"})
    assert brick.state == "FORMING"
    [brick] = resolve_topic(TOPIC, occs, run_status={"a": "CLOSED", "b": "CLOSED"}, sealed=True)
    assert brick.state == "FINAL"


def test_promotion_flips_state_only():
    a = make_run("a", ["Sync is nightly.", "Bricks are verbatim."], status="OPEN")
    occs = [occ(a, "Sync is nightly."), occ(a, "Bricks are verbatim.", 1)]
    improvise = resolve_topic(TOPIC, occs, run_status={"a": "OPEN"})
    forming = resolve_topic(TOPIC, occs, run_status={"a": "CLOSED"}, prior=prior_of(improvise))
    final = resolve_topic(TOPIC, occs, run_status={"a": "CLOSED"}, sealed=True, prior=prior_of(forming))
    assert [b.state for b in improvise] == ["IMPROVISE"] * 2
    assert [b.state for b in forming] == ["FORMING"] * 2
    assert [b.state for b in final] == ["FINAL"] * 2
    strip = lambda bricks: [b.model_dump(exclude={"state"}) for b in bricks]  # noqa: E731
    assert strip(improvise) == strip(forming) == strip(final)


def test_final_brick_in_prior_is_returned_unchanged():
    a = make_run("a", "Sync is nightly.", status="CLOSED", started_at="2024-02-01T00:00:00Z")
    sealed = resolve_topic(TOPIC, [occ(a, "Sync is nightly.")], run_status=statuses(a), sealed=True)
    [final] = sealed
    assert final.state == "FINAL"
    # Later a canonically *earlier* linked occurrence (would change content and source order) and a
    # superset (would supersede an IMPROVISE brick) turn up in an open run.
    b = make_run("b", ["SYNC IS NIGHTLY.", "Sync is nightly and fast."], status="OPEN", started_at="2024-01-01T00:00:00Z")
    occs = [occ(a, "Sync is nightly."), occ(b, "SYNC IS NIGHTLY."), occ(b, "Sync is nightly and fast.", 1)]
    for is_sealed in (False, True):
        bricks = resolve_topic(TOPIC, occs, run_status=statuses(a, b), sealed=is_sealed, prior=prior_of(sealed))
        after = by_content(bricks)["Sync is nightly."]
        assert after == final
        assert (after.content, after.sources, after.order_index, after.state) == (
            final.content, final.sources, final.order_index, "FINAL")


def test_final_bricks_keep_their_order_when_everything_visible_is_final():
    late = make_run("late", "Sync is nightly.", status="CLOSED", started_at="2024-03-01T00:00:00Z")
    early = make_run("early", "Bricks are verbatim.", status="CLOSED", started_at="2024-01-01T00:00:00Z")
    occs = [occ(late, "Sync is nightly."), occ(early, "Bricks are verbatim.")]
    sealed = resolve_topic(TOPIC, occs, run_status=statuses(late, early), sealed=True)
    order = [(b.content, b.order_index) for b in sealed]
    for rule in ("chronological", "source-run-order", "ingestion-order"):
        again = resolve_topic(TOPIC, occs, run_status=statuses(late, early), sealed=True, prior=prior_of(sealed),
                              ordering_rule=rule, ingestion_seq={"late": 0, "early": 1})
        assert [(b.content, b.order_index) for b in again] == order


def test_a_correction_after_sealing_does_not_take_a_final_bricks_place():
    """A new brick that sorts before the FINAL ones must not share an order_index with one of them."""
    sealed_run = make_run("r1", "Bricks are verbatim. Sync is nightly.", status="CLOSED", started_at="2024-01-02T00:00:00Z")
    sealed = resolve_topic(
        TOPIC, [occ(sealed_run, "Bricks are verbatim."), occ(sealed_run, "Sync is nightly.")],
        run_status=statuses(sealed_run), sealed=True,
    )
    assert [(b.content, b.order_index) for b in sealed] == [("Bricks are verbatim.", 0), ("Sync is nightly.", 1)]
    correction_run = make_run("r0", "Earlier text here.", status="CLOSED", started_at="2024-01-01T00:00:00Z")
    occs = [occ(sealed_run, "Bricks are verbatim."), occ(sealed_run, "Sync is nightly."), occ(correction_run, "Earlier text here.")]
    bricks = resolve_topic(TOPIC, occs, run_status=statuses(sealed_run, correction_run), prior=prior_of(sealed))
    finals = [b for b in bricks if b.state == "FINAL"]
    assert [(b.content, b.order_index) for b in finals] == [("Bricks are verbatim.", 0), ("Sync is nightly.", 1)]
    visible = [b.order_index for b in bricks if b.state != "SUPERSEDED"]
    assert len(set(visible)) == len(visible), f"duplicate order_index among visible bricks: {visible}"


# Words that are prefixes, suffixes and infixes of each other, so partial-word matches happen.
_WORDS = st.sampled_from(["a", "ab", "abc", "b", "bc", "c", "sync", "async", "syncs", "vault", "🔒", "同步"])
_TEXTS = st.lists(_WORDS, min_size=1, max_size=7).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(_TEXTS, min_size=1, max_size=25), picks=st.lists(st.integers(0, 24), max_size=12))
def test_superset_search_finds_exactly_the_smallest_containing_text(texts, picks):
    """The anchor-word index is a shortcut: it must give what a scan of every text gives, for
    needles of every length, including texts that hold the needle inside a longer word."""
    from types import SimpleNamespace

    from nexus_assets.resolve.rules import _smallest_supersets

    groups = [SimpleNamespace(brick_id=f"b{i}", normalized=t) for i, t in enumerate(texts)]
    candidates = [groups[i % len(groups)] for i in picks]
    expected = {}
    for c in candidates:
        longer = [(len(o.normalized), i, o) for i, o in enumerate(groups) if len(o.normalized) > len(c.normalized) and c.normalized in o.normalized]
        if longer:
            expected[c.brick_id] = min(longer, key=lambda t: t[:2])[2].brick_id
    assert _smallest_supersets(candidates, groups) == expected


# --- versions of one node at one place --------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.permutations(range(3)),
    st.permutations(["keep the vault.", "Keep the vault.", "KEEP the vault.", "keep the\tvault."]),
    st.booleans(),
)
def test_the_oldest_version_of_a_node_is_canonical_whatever_its_text_and_arrival(arrival, texts, oldest_drifted):
    """Versions of one run can hold a sentence at one place, differing in case (or elsewhere in the
    node). Their text decides nothing: the oldest version is canonical, so an edit makes the brick
    stale (invariant 9) and a restore current (invariant 14); the brick's place never moves."""
    versions = [make_run("run-a", [texts[v]]) for v in range(3)]
    occurrences = [occ(run, run.document["messages"][0]["content"]).model_copy(update={"version_seq": v + 1}) for v, run in enumerate(versions)]
    assert len({o.address for o in occurrences}) == 3 and len({o.fingerprint for o in occurrences}) == 1
    stale = {occurrences[0].address} if oldest_drifted else set()
    [brick] = resolve_topic(TOPIC, [occurrences[i] for i in arrival], run_status={"run-a": "CLOSED"}, stale_addresses=stale)
    assert brick.content == texts[0] and brick.sources == tuple(o.address for o in occurrences)
    assert brick.stale is oldest_drifted


def test_versions_of_unknown_age_at_one_place_are_ranked_by_their_text_then_checksum():
    a, b = (occ(make_run("run-a", [t]), t) for t in ("Keep the vault.", "keep the vault."))
    for arrival in ([a, b], [b, a]):
        [brick] = resolve_topic(TOPIC, arrival, run_status={"run-a": "CLOSED"})
        assert brick.content == "Keep the vault." and brick.sources == (a.address, b.address)
