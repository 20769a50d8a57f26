"""What a topic's definition selects is what it shows (docs/quality.md).

The vault keeps every answer an extractor ever gave (append-only), keyed by the topic's definition
(`backends.extraction_key`). An answer made under another definition (policy, examples) than the
topic's current one, or by another embedded selector version than the one the topic is selected
with (`topic_selectors`, moved by `nexus sync --reselect`), no longer selects: a text that only
such answers pointed at leaves the manifest. Its brick stays in the vault as history (superseded,
`superseded_by` null; `nexus bricks --all` shows it and why), and comes back if a later
definition selects it again. FINAL bricks never leave (resolution keeps them whole).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from nexus_assets.core.fingerprint import canonical_json, fingerprint, sha256_hex
from nexus_assets.core.models import Topic
from nexus_assets.extract.backends import extraction_scope, newest_selector, selector_versions
from nexus_assets.extract.records import ExtractionRecords

if TYPE_CHECKING:  # type-only: a phase names a store above it only as an annotation
    from nexus_assets.gate.records import OccurrenceRecords


class SelectionStores(Protocol):
    extractions: ExtractionRecords
    occurrences: OccurrenceRecords
    teaching: object


def answers_in_force(vault: SelectionStores, topic: Topic, selector: str) -> tuple[list[str], list[str]]:
    """The keys of the topic's stored answers (in force, outdated): outdated is made under another
    definition, or by an embedded selector version other than `selector`."""
    scope = extraction_scope(topic)
    versions = selector_versions()
    current, outdated = [], []
    # `scoped_key` for many run versions: the JSON of [identity, scope] is made once per identity.
    heads: dict[str, str] = {}
    for key, identity, version_id in vault.extractions.answers(topic.topic_id):
        if identity in versions and identity != selector:
            outdated.append(key)
            continue
        head = heads.get(identity)
        if head is None:
            head = heads[identity] = canonical_json([identity, scope, ""])[: -len('""]')]
        (current if key == sha256_hex(head + canonical_json(version_id) + "]") else outdated).append(key)
    return current, outdated


def deselected_fingerprints(vault: SelectionStores, topic: Topic) -> frozenset[str]:
    """The texts of the topic that no answer in force points at (only outdated ones did). The vault
    keeps one occurrence per address, whichever answer found it first, so what an answer selects
    is read from its own pointers' quotes."""
    selector = vault.teaching.selector(topic.topic_id) or newest_selector()
    current, outdated = answers_in_force(vault, topic, selector)
    if not outdated:
        return frozenset()  # the usual case: nothing read but the answers' keys
    selected = {fingerprint(q) for q in vault.extractions.quotes_of(current)}
    return frozenset(vault.occurrences.fingerprints(topic.topic_id) - selected)


def topic_selector(vault: SelectionStores, topic_id: str, *, reselect: bool = False, newest: str | None = None) -> str:
    """The embedded selector version to select `topic_id` with, recorded the first time: the one
    already recorded (a new release never moves a topic by itself), or with `reselect` this
    release's newest. A topic never recorded takes the newest version that has already answered for
    it (a vault from before migration 24 keeps what selected it), else this release's newest.
    `newest`: the version a person chose instead (`NEXUS_EMBEDDED_EXTRACTOR`)."""
    newest = newest or newest_selector()
    pinned = vault.teaching.selector(topic_id)
    if pinned is not None and (not reselect or pinned == newest):
        return pinned
    if reselect and pinned is not None:
        vault.teaching.record_selector(topic_id, newest, f"nexus sync --reselect (from {pinned})")
        return newest
    answered = set(vault.extractions.extractor_identities(topic_id))
    before = [v for v in selector_versions() if v in answered]
    chosen = newest if reselect or not before else before[-1]
    vault.teaching.record_selector(topic_id, chosen, "first sync" if not before else "selected before versions were recorded")
    return chosen


def outdated_selectors(vault: SelectionStores, topic_ids) -> dict[str, str]:
    """topic_id -> the older selector version it is selected with (only topics not on the newest)."""
    newest = newest_selector()
    recorded = vault.teaching.selectors()
    return {t: recorded[t] for t in topic_ids if t in recorded and recorded[t] != newest}
