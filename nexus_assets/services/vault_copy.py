"""Copy a vault into an empty one on any backend and prove it arrived whole.

1. The destination is marked unusable (`unfinished_copy`) and emptied of what an earlier,
   unfinished copy left; every open but a copy's refuses it from then on.
2. Every table's rows are copied.
3. On arrival every manifest of every topic is re-hashed from the rows as the destination holds
   them and compared with the source's stored hash, the chains are checked, and each table's row
   count is compared.
4. Only then is the mark removed. A copy killed at any point leaves the mark: never half-trusted.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from typing import Callable

from nexus_assets import settings
from nexus_assets.publish.manifest import chain_problems
from nexus_assets.store import Vault
from nexus_assets.vault.address import parse_address
from nexus_assets.vault.transfer import CopyRefused, copy_rows, empty, holds_rows, mark_unfinished, row_count, unmark


@dataclass
class CopyReport:
    source: str
    destination: str
    rows: dict[str, int] = field(default_factory=dict)
    manifests_checked: int = 0
    topics: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {
            "source": self.source, "destination": self.destination, "rows": self.rows,
            "topics": self.topics, "manifests_checked": self.manifests_checked,
            "verified": self.verified, "problems": self.problems,
        }


def _crash_point(name: str) -> None:
    # Tests kill a copy with a real SIGKILL at a named point, to prove the destination stays marked.
    if settings.kill_copy_at() == name:
        os.kill(os.getpid(), signal.SIGKILL)


def copy_vault(source: str, destination: str, *, on_table: Callable[[str, int], None] | None = None) -> CopyReport:
    src, dst = parse_address(source), parse_address(destination)
    if src == dst or (not src.is_postgres and not dst.is_postgres and src.path.resolve() == dst.path.resolve()):
        raise CopyRefused(f"the source and the destination are the same vault ({src.shown})")
    report = CopyReport(src.shown, dst.shown)
    with Vault.open(source, read_only=True) as a, Vault.open(destination, unfinished_ok=True) as b:
        if not b.unfinished_copy() and (full := holds_rows(b)):
            raise CopyRefused(
                f"the destination {dst.shown} already holds a vault ({', '.join(full[:3])}…); copy into a new, empty one"
            )
        mark_unfinished(b, f"a copy from {src.shown} has not finished")
        _crash_point("marked")
        with b.transaction():
            empty(b)
            report.rows = copy_rows(a, b, on_table=on_table)
            _crash_point("copied")
        _crash_point("arrived")
        report.problems = _arrival_problems(a, b, report)
        if report.verified:
            unmark(b)
    return report


def _arrival_problems(a: Vault, b: Vault, report: CopyReport) -> list[str]:
    """Every manifest re-hashed at the destination equals the source's; chains intact; counts equal."""
    problems = []
    for table, n in report.rows.items():
        if (m := row_count(b, table)) != n:
            problems.append(f"{table}: {n} rows sent, {m} arrived")
    topics = [t["topic_id"] for t in a.topic_summaries()]
    report.topics = len(topics)
    for topic_id in topics:
        sent = [m.manifest_hash for m in a.bricks.manifests(topic_id)]
        arrived = b.bricks.manifests(topic_id)
        report.manifests_checked += len(arrived)
        if [m.manifest_hash for m in arrived] != sent:
            problems.append(f"{topic_id}: the manifests that arrived are not the ones sent")
        problems += chain_problems(arrived)
    return problems
