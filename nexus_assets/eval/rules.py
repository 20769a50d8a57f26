"""Extraction quality (docs/quality.md): predicted spans against the spans a person expects.

Pure scoring: span matching, precision / recall / F1 (exact and overlap), per-run grouping. The
vault reads and the gold file's resolution live elsewhere; this module only counts.

Overlap rule: a predicted span and a gold span *match by overlap* when they lie in the same node
(same run_id and normalized json_path) and share at least half of the shorter span's length
(`2 * shared >= min(len_predicted, len_gold)`). Overlap precision counts predicted spans that
match some gold span; overlap recall counts gold spans that some predicted span matches. It is
not one-to-one: one long prediction covering two short gold sentences finds both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable


@dataclass(frozen=True, order=True)
class Span:
    """Characters `[start, end)` of one node: the part of a source address that gold can name."""

    run_id: str
    json_path: str
    start: int
    end: int

    @property
    def node(self) -> tuple[str, str]:
        return (self.run_id, self.json_path)

    def shared(self, other: "Span") -> int:
        if self.node != other.node:
            return 0
        return max(0, min(self.end, other.end) - max(self.start, other.start))

    def overlaps(self, other: "Span") -> bool:
        """The overlap rule: same node, sharing at least half of the shorter span."""
        shared = self.shared(other)
        return shared > 0 and 2 * shared >= min(self.end - self.start, other.end - other.start)

    def as_dict(self) -> dict:
        return {"run_id": self.run_id, "json_path": self.json_path, "start": self.start, "end": self.end}


def ratio(hits: int, total: int, *, empty: float) -> float:
    """hits / total; `empty` when there is nothing to count (defined, so a check can compare it)."""
    return hits / total if total else empty


def f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


@dataclass(frozen=True)
class Figures:
    """Exact-span and overlap precision / recall / F1 over one set of predicted and gold spans."""

    predicted: int
    gold: int
    exact_hits: int  # spans in both sets
    overlap_predicted_hits: int  # predicted spans that overlap some gold span
    overlap_gold_hits: int  # gold spans that some predicted span overlaps

    # No predictions: precision is 1.0 only when nothing was expected either. No gold: recall is
    # 1.0 (nothing was missed), and any prediction is a false positive.
    @property
    def exact_precision(self) -> float:
        return ratio(self.exact_hits, self.predicted, empty=0.0 if self.gold else 1.0)

    @property
    def exact_recall(self) -> float:
        return ratio(self.exact_hits, self.gold, empty=1.0)

    @property
    def exact_f1(self) -> float:
        return f1(self.exact_precision, self.exact_recall)

    @property
    def overlap_precision(self) -> float:
        return ratio(self.overlap_predicted_hits, self.predicted, empty=0.0 if self.gold else 1.0)

    @property
    def overlap_recall(self) -> float:
        return ratio(self.overlap_gold_hits, self.gold, empty=1.0)

    @property
    def overlap_f1(self) -> float:
        return f1(self.overlap_precision, self.overlap_recall)

    def as_dict(self) -> dict:
        return {
            "predicted": self.predicted,
            "gold": self.gold,
            "exact_matches": self.exact_hits,
            "exact_precision": self.exact_precision,
            "exact_recall": self.exact_recall,
            "exact_f1": self.exact_f1,
            "overlap_precision": self.overlap_precision,
            "overlap_recall": self.overlap_recall,
            "overlap_f1": self.overlap_f1,
        }


@dataclass(frozen=True)
class Score:
    """Figures for the whole topic and per run, with the spans behind them."""

    overall: Figures
    per_run: dict[str, Figures]
    misses: tuple[Span, ...]  # gold spans no prediction matches exactly
    false_positives: tuple[Span, ...]  # predicted spans that are not a gold span
    overlap_misses: tuple[Span, ...] = field(default=())  # gold spans no prediction overlaps
    overlap_false_positives: tuple[Span, ...] = field(default=())  # predictions overlapping no gold span


def _figures(predicted: set[Span], gold: set[Span]) -> tuple[Figures, set[Span], set[Span]]:
    gold_by_node: dict[tuple[str, str], list[Span]] = {}
    for g in gold:
        gold_by_node.setdefault(g.node, []).append(g)
    overlapping_gold: set[Span] = set()
    overlapping_predicted: set[Span] = set()
    for p in predicted:
        for g in gold_by_node.get(p.node, ()):
            if p.overlaps(g):
                overlapping_predicted.add(p)
                overlapping_gold.add(g)
    figures = Figures(
        predicted=len(predicted),
        gold=len(gold),
        exact_hits=len(predicted & gold),
        overlap_predicted_hits=len(overlapping_predicted),
        overlap_gold_hits=len(overlapping_gold),
    )
    return figures, overlapping_predicted, overlapping_gold


def score(predicted: Iterable[Span], gold: Iterable[Span]) -> Score:
    """Compare two span sets (duplicates count once) for the topic and for each run in either set."""
    predicted, gold = set(predicted), set(gold)
    overall, overlapping_predicted, overlapping_gold = _figures(predicted, gold)
    runs = sorted({s.run_id for s in predicted | gold})
    per_run = {
        run_id: _figures({s for s in predicted if s.run_id == run_id}, {s for s in gold if s.run_id == run_id})[0]
        for run_id in runs
    }
    return Score(
        overall=overall,
        per_run=per_run,
        misses=tuple(sorted(gold - predicted)),
        false_positives=tuple(sorted(predicted - gold)),
        overlap_misses=tuple(sorted(gold - overlapping_gold)),
        overlap_false_positives=tuple(sorted(predicted - overlapping_predicted)),
    )


def acceptance_rate(accepted: int, rejected: int) -> float:
    """The gate's acceptance rate: accepted pointers / all pointers (1.0 when there were none)."""
    return ratio(accepted, accepted + rejected, empty=1.0)


# Gold files: JSONL, one expected span per line.


class GoldError(ValueError):
    """A gold file that cannot be used; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class GoldLine:
    """One parsed gold line, before its path and quote are resolved against the run's nodes."""

    line: int
    topic_id: str | None
    run_id: str
    json_path: str
    start: int | None = None
    end: int | None = None
    quote: str | None = None


def parse_gold(text: str, source: str) -> list[GoldLine]:
    """Every non-blank line of a gold file, checked for shape. `source` names the file in errors."""
    import json

    out: list[GoldLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue

        def bad(why: str) -> GoldError:
            return GoldError(f"gold file {source}, line {number}: {why}")

        try:
            item = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise bad(f"not valid JSON ({exc.msg} at column {exc.colno}); write one JSON object per line") from None
        if not isinstance(item, dict):
            raise bad("not a JSON object; write {topic_id, run_id, json_path, start, end} or {…, quote}")
        for key in ("run_id", "json_path"):
            if not isinstance(item.get(key), str) or not item[key]:
                raise bad(f"{key!r} is missing or not a non-empty string")
        topic_id = item.get("topic_id")
        if topic_id is not None and not isinstance(topic_id, str):
            raise bad("'topic_id' is not a string")
        has_quote, has_offsets = "quote" in item, "start" in item or "end" in item
        if has_quote == has_offsets:
            raise bad("give either 'quote' or both 'start' and 'end'")
        if has_quote:
            if not isinstance(item["quote"], str) or not item["quote"].strip():
                raise bad("'quote' is empty or not a string")
            out.append(GoldLine(number, topic_id, item["run_id"], item["json_path"], quote=item["quote"]))
            continue
        start, end = item.get("start"), item.get("end")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)) or not 0 <= start < end:
            raise bad(f"'start' and 'end' must be integers with 0 <= start < end (got {start!r}, {end!r})")
        out.append(GoldLine(number, topic_id, item["run_id"], item["json_path"], start=start, end=end))
    return out


def resolve_gold_line(line: GoldLine, node_text: str, json_path: str, source: str) -> Span:
    """The span a gold line names in its node's text (the gate's rule: a quote's first occurrence)."""
    where = f"gold file {source}, line {line.line}"
    if line.quote is not None:
        start = node_text.find(line.quote)
        if start < 0:
            raise GoldError(
                f"{where}: quote {line.quote[:60]!r} is not a verbatim substring of {line.run_id} {json_path}; "
                "copy it exactly from the node (`nexus trace` shows node text)"
            )
        return Span(line.run_id, json_path, start, start + len(line.quote))
    assert line.start is not None and line.end is not None
    if line.end > len(node_text):
        raise GoldError(
            f"{where}: end {line.end} is past the end of {line.run_id} {json_path} ({len(node_text)} characters)"
        )
    return Span(line.run_id, json_path, line.start, line.end)
