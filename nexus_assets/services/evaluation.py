"""`nexus eval`: extraction quality against a gold file (docs/quality.md). Read-only on the vault; the
shell parses and prints, the rules of which extractors to score and when a figure is too low are here.
It imports neither Dagster nor the LLM client."""

from __future__ import annotations

import json
from pathlib import Path

from nexus_assets.eval.rules import GoldError
from nexus_assets.eval.step import evaluate, gold_lines_for


class EvaluationRefused(ValueError):
    """Bad input (exit 2): an unknown extractor identity, an unusable gold file, a gold file already there,
    or a topic with no bricks to start one from."""


def score(vault, topic_id: str, gold: Path, *, extractor: str | None = None, every: bool = False) -> list[dict]:
    """The topic's bricks (and with `every` each extractor identity seen), or one identity's extractions,
    scored against `gold`: one result per identity, the bricks' first."""
    if every:
        wanted = [None, *vault.extractions.extractor_identities(topic_id)]
    elif extractor:
        known = vault.extractions.extractor_identities(topic_id)
        if extractor not in known:
            raise EvaluationRefused(
                f"no extractions by {extractor!r} for topic {topic_id!r}; "
                f"identities seen: {', '.join(known) or 'none (run `nexus sync` first)'}"
            )
        wanted = [extractor]
    else:
        wanted = [None]
    try:
        return [evaluate(vault, topic_id, gold, extractor=x) for x in wanted]
    except GoldError as exc:
        raise EvaluationRefused(str(exc)) from None


def below(result: dict, min_precision: float | None, min_recall: float | None) -> bool:
    # Thresholds compare the overlap figures, as the `extraction_quality` check does.
    return (min_precision is not None and result["overlap_precision"] < min_precision) or (
        min_recall is not None and result["overlap_recall"] < min_recall
    )


def refuse_existing_gold(path: Path) -> None:
    if path.exists():
        raise EvaluationRefused(f"{path} already exists; eval never overwrites a gold file (remove it or pick another path)")


def write_gold(vault, topic_id: str, path: Path) -> int:
    """The topic's current bricks as a starting gold file at `path` (never overwritten): how many lines."""
    refuse_existing_gold(path)
    lines = gold_lines_for(vault, topic_id)
    if not lines:
        raise EvaluationRefused(f"topic {topic_id!r} has no bricks yet; run `nexus sync --topic {topic_id}` first")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("x", encoding="utf-8") as f:
        f.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    return len(lines)
