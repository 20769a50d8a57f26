"""`nexus explain`: why the selector kept a brick, or why a run's (or one node's) sentences were not
kept (docs/quality.md). Read-only; the shell parses and prints."""

from __future__ import annotations

from nexus_assets.extract.explain import ExplainError, explain_brick, explain_run
from nexus_assets.extract.selector.model import SelectorWeightsError


class ExplainRefused(ValueError):
    """Nothing to explain (an unknown run or node) or selector weights that cannot be read: exit 2."""


def brick(vault, brick_id: str) -> dict:
    """Why the brick `brick_id` (a full id) was kept, with its nearest taught examples."""
    try:
        return explain_brick(vault, brick_id)
    except (ExplainError, SelectorWeightsError) as exc:
        raise ExplainRefused(str(exc)) from None


def run(vault, run_id: str, *, node: str | None = None, topics: list[str] | None = None) -> dict:
    """Every sentence of the run (or of one node), kept or not and why, per compiled topic."""
    try:
        return explain_run(vault, run_id, node=node, topics=topics)
    except (ExplainError, SelectorWeightsError) as exc:
        raise ExplainRefused(str(exc)) from None
