"""Each kind of conflict `conflict_between` names, and the one-line reason it gives (issue 51's
mutation benchmark: every branch of the rule is pinned by a pair that takes it)."""

from __future__ import annotations

import pytest

from nexus_assets.relate.rules import conflict_between

PAIRS = [
    ("The sync does not run on weekends.", "The sync does run on weekends.", "negation: first negated, second affirmed"),
    ("The sync does run on weekends.", "The sync does not run on weekends.", "negation: first affirmed, second negated"),
    ("The sync doesn't run on weekends at all.", "The sync runs on weekends at all.", "negation: first negated, second affirmed"),
    ('Name the file "alpha" for the export.', 'Name the file "beta" for the export.', "quoted: alpha ≠ beta"),
    ("Use nexus_sync.v2 for exports.", "Use nexus_sync.v3 for exports.", "identifier: nexus_sync.v2 ≠ nexus_sync.v3"),
    ("Ana prefers Berlin for the team offsite.", "Ana prefers Lisbon for the team offsite.", "name: berlin ≠ lisbon"),
    ("The vault backup is enabled for every topic.", "The vault backup is disabled for every topic.", "antonym: enabled ≠ disabled"),
    # Two items of a list, or two steps of a plan, speak of one thing only under one label.
    ("- Week 11: 16 miles", "- Week 11: 15 miles", "number: 16 ≠ 15"),
    ("1. Week 11 (August 13): 16 miles", "1. Week 11 (August 13): 15 miles", "number: 16 ≠ 15"),
    ("- Week 11: 16 miles", "- Week 12: 15 miles", None),
    ("Week 11 (August 13): 16 miles", "The long run is 15 miles", None),
    # The same words twice, or nothing in common: nothing to disagree about.
    ("The sync runs every 15 minutes.", "The sync runs every 15 minutes.", None),
    ("Tea is 3 dollars.", "Coffee costs 4 euros in Paris.", None),
    # Tool output states nothing.
    ("$ ls -l", "$ ls -la", None),
]


@pytest.mark.parametrize("a, b, why", PAIRS)
def test_each_kind_of_conflict_is_named(a, b, why):
    assert conflict_between(a, b) == why


@pytest.mark.parametrize("a, b, why", [p for p in PAIRS if p[2] is None])
def test_no_conflict_either_way(a, b, why):
    assert conflict_between(b, a) is None
