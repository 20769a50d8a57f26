"""`nexus discover`: propose topics from recent runs and write them as DRAFT topic files.

A proposal is only a file for a person to read, edit and activate (`nexus activate`); nothing is
compiled until then. At most a handful are written (MAX_PROPOSALS unless `--max` says), each
with the conversations it was seen in, and only subjects that several conversations share. A file
is never overwritten, and a proposal that repeats an existing topic's id or keywords (or one a
person rejected by deleting its file) is not written, so running discover again writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from nexus_assets.core.fingerprint import canonical_json
from nexus_assets.core.keywords import keyword_pattern
from nexus_assets.core.models import ExtractionPolicy, Run, Topic
from nexus_assets.core.validation import explain
from nexus_assets.discovery.prompt import (
    DISCOVER_PROMPT_VERSION,
    TOPICS_SCHEMA,
    parse_topics_reply,
    render_messages,
)
from nexus_assets.discovery.rules import (
    MAX_PROPOSALS,
    TEXT_NODE_TYPES,
    Proposal,
    covered_runs,
    duplicate_of,
    min_evidence,
    slug,
    survey,
)
from nexus_assets.ingest.scope import node_text
from nexus_assets.llm.client import (
    CallFailed,
    CallRecord,
    CallStore,
    LLMConfig,
    PointerClient,
    ReplyNotJSON,
    call_key,
    prompt_hash,
    response_formats,
)
from nexus_assets.llm.planning import current_runs
from nexus_assets.topics.files import read_topic_files

DEFAULT_RECENT = 200
# Keys of the audit-trail rows of discovery calls in `llm_calls` (they belong to no topic or run yet).
CALL_TOPIC_ID = "(discover)"
CALL_RUN_ID = "(recent runs)"


class DiscoveryError(RuntimeError):
    """The LLM gave no usable answer; nothing was written."""


def run_recency(run: Run) -> str:
    stamps = [n.timestamp for n in run.nodes if n.timestamp] + ([run.started_at] if run.started_at else [])
    return max(stamps) if stamps else ""


def recent_runs(runs_dir: Path, recent: int = DEFAULT_RECENT) -> list[Run]:
    """The `recent` runs with the latest activity, newest first (ties by run_id)."""
    runs = current_runs(runs_dir)
    runs.sort(key=lambda r: r.run_id)
    runs.sort(key=run_recency, reverse=True)
    return runs[:recent]


@dataclass
class DiscoveryReport:
    """What discover wrote and skipped, and what it read and needs (`runs_covered`: runs an existing
    topic's keywords occur in; `needs`: the bar a proposal clears, its `rule` in words; `strongest`:
    the new term most conversations are about, offline only), so "nothing to propose" says why."""

    extractor: str
    runs_considered: int
    written: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    llm_call: dict | None = None
    runs_covered: int = 0
    needs: dict = field(default_factory=dict)
    strongest: dict | None = None

    def as_dict(self) -> dict:
        return {
            "extractor": self.extractor,
            "runs_considered": self.runs_considered,
            "written": self.written,
            "skipped": self.skipped,
            "llm_call": self.llm_call,
            "runs_covered": self.runs_covered,
            "needs": self.needs,
            "strongest": self.strongest,
        }


def render_topic_file(topic: Topic, header: Sequence[str]) -> str:
    body: dict[str, Any] = {
        "topic_id": topic.topic_id,
        "display_name": topic.display_name,
        "extraction_policy": topic.extraction_policy.model_dump(mode="json", exclude_none=True, exclude_defaults=True),
        "ordering_rule": topic.ordering_rule,
        "state": topic.state,
    }
    text = yaml.safe_dump(body, sort_keys=False, allow_unicode=True, default_flow_style=None, width=4096)
    return "".join(f"# {line}\n" if line else "#\n" for line in header) + text


def write_topic_file(topics_dir: Path, topic: Topic, header: Sequence[str]) -> Path | None:
    """Create `<topic_id>.yaml`; None when a file of that name exists (it is never overwritten)."""
    text = render_topic_file(topic, header)
    if Topic.model_validate(yaml.safe_load(text)) != topic:
        raise RuntimeError(f"topic file for {topic.topic_id!r} would not read back as the proposed topic; nothing written")
    topics_dir.mkdir(parents=True, exist_ok=True)
    path = topics_dir / f"{topic.topic_id}.yaml"
    try:
        with path.open("x", encoding="utf-8") as fh:
            fh.write(text)
    except FileExistsError:
        return None
    return path


def _header(topic_id: str, how: str, evidence: Sequence[str], runs_considered: int) -> list[str]:
    lines = [
        f"Proposed by `nexus discover` ({how}) from the {runs_considered} most recent runs.",
        "DRAFT: nothing is compiled until a person reviews this file (edit anything you like),",
        f"then runs `nexus activate {topic_id}`. Delete the file to reject the proposal.",
    ]
    if evidence:
        shown = ", ".join(evidence[:8]) + (f" and {len(evidence) - 8} more" if len(evidence) > 8 else "")
        lines.append(f"Seen in: {shown}")
    return lines


def existing_topics(topics_dir: Path, recorded: Sequence[Topic] = ()) -> tuple[list[Topic], set[str]]:
    """Topics that proposals must not repeat (files and the vault), and the file stems already taken."""
    files = read_topic_files(topics_dir)
    topics = {tf.topic.topic_id: tf.topic for tf in files if tf.topic is not None}
    for t in recorded:
        topics.setdefault(t.topic_id, t)
    return [topics[k] for k in sorted(topics)], {tf.path.stem for tf in files}


def _covering(existing: Sequence[Topic], rejected: Sequence[Topic]) -> list[Topic]:
    """The topics a person has: a rejected proposal is not proposed again, but covers no run."""
    gone = {t.topic_id for t in rejected}
    return [t for t in existing if t.topic_id not in gone]


def _write(report: DiscoveryReport, topics_dir: Path, taken_files: set[str], proposal: Proposal, how: str) -> Topic | None:
    topic = proposal.topic
    if topic.topic_id in taken_files:
        report.skipped.append({"topic_id": topic.topic_id, "reason": f"a file named {topic.topic_id}.yaml already exists"})
        return None
    path = write_topic_file(topics_dir, topic, _header(topic.topic_id, how, proposal.evidence, proposal.runs_considered))
    if path is None:
        report.skipped.append({"topic_id": topic.topic_id, "reason": f"{topics_dir / (topic.topic_id + '.yaml')} already exists"})
        return None
    taken_files.add(topic.topic_id)
    report.written.append(
        {
            "topic_id": topic.topic_id,
            "path": str(path),
            "display_name": topic.display_name,
            "scope_description": topic.extraction_policy.scope_description,
            "required_keywords": list(topic.extraction_policy.required_keywords or ()),
            "evidence": list(proposal.evidence),
            "state": topic.state,
        }
    )
    return topic


def discover_embedded(
    runs: Sequence[Run], topics_dir: Path, *, recorded: Sequence[Topic] = (), rejected: Sequence[Topic] = (),
    max_proposals: int | None = None,
) -> tuple[DiscoveryReport, list[Topic]]:
    """`recorded`: the vault's topics; `rejected`: proposals a person deleted (never proposed again)."""
    existing, taken_files = existing_topics(topics_dir, [*recorded, *rejected])
    proposals, read = survey(runs, existing, max_proposals=max_proposals, covering=_covering(existing, rejected))
    report = DiscoveryReport("embedded", len(runs), runs_covered=read.runs_covered, needs=read.needs(), strongest=read.strongest_dict())
    written = []
    for proposal in proposals:
        topic = _write(report, topics_dir, taken_files, proposal, "keyword clusters")
        if topic is not None:
            written.append(topic)
    return report, written


# The LLM path


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [v.strip() for v in value if isinstance(v, str) and v.strip()]


def suggestion_topic(item: Any, corpus: str) -> tuple[Topic | None, str | None, str]:
    """(topic, None, id) for a usable suggestion; (None, reason, id) otherwise."""
    if not isinstance(item, dict):
        return None, f"not an object: {str(item)[:60]!r}", "?"
    given = item.get("topic_id") if isinstance(item.get("topic_id"), str) else ""
    name = item.get("display_name") if isinstance(item.get("display_name"), str) else ""
    topic_id = slug([given]) or slug([name])
    label = topic_id or given or "?"
    if not topic_id:
        return None, "no usable topic_id", label
    scope = item.get("scope_description")
    if not isinstance(scope, str) or not scope.strip():
        return None, "no scope_description", label
    keywords = list(dict.fromkeys(_strings(item.get("required_keywords"))))
    # A keyword that never occurs in the runs would make the pre-filter match nothing.
    found = [k for k in keywords if (p := keyword_pattern((k,))) is not None and p.search(corpus)]
    if not found:
        return None, f"none of its keywords {keywords[:6]} occur in the recent runs", label
    try:
        topic = Topic(
            topic_id=topic_id[:64],
            display_name=name.strip() or topic_id.replace("-", " ").title(),
            extraction_policy=ExtractionPolicy(
                scope_description=" ".join(scope.split()),
                target_node_types=TEXT_NODE_TYPES,
                required_keywords=tuple(found),
                exclusion_criteria=tuple(_strings(item.get("exclusion_criteria"))),
            ),
            ordering_rule="chronological",
            state="DRAFT",
        )
    except ValidationError as exc:
        return None, f"not a valid topic: {explain(exc, whole='topic', limit=1)}", label
    return topic, None, label


def _corpus(runs: Sequence[Run]) -> str:
    return "\n".join(
        text for run in runs for node in run.nodes if node.node_type in TEXT_NODE_TYPES and (text := node_text(run, node))
    )


def discover_llm(
    runs: Sequence[Run],
    topics_dir: Path,
    *,
    config: LLMConfig,
    store: CallStore,
    recorded: Sequence[Topic] = (),
    rejected: Sequence[Topic] = (),
    max_proposals: int | None = None,
) -> tuple[DiscoveryReport, list[Topic]]:
    existing, taken_files = existing_topics(topics_dir, [*recorded, *rejected])
    need = min_evidence(len(runs))
    report = DiscoveryReport(
        "openai", len(runs), runs_covered=covered_runs(runs, _covering(existing, rejected)),
        needs={"min_conversations": need,
               "rule": f"a topic the model suggests needs its keywords in at least {need} of the {len(runs)} conversations"},
    )
    text = _topics_reply(report, render_messages(runs, existing), config, store)
    try:
        suggestions = parse_topics_reply(text)
    except ReplyNotJSON as exc:
        raise DiscoveryError(f"the stored reply holds no topics: {exc}") from None

    corpus = _corpus(runs)
    taken_ids = {t.topic_id for t in existing}
    accepted: list[Topic] = []
    written = []
    limit = MAX_PROPOSALS if max_proposals is None else max_proposals
    for item in suggestions:
        if len(written) >= limit:
            break
        topic, reason, label = suggestion_topic(item, corpus)
        if topic is None:
            report.skipped.append({"topic_id": label, "reason": reason})
            continue
        if topic.topic_id in taken_ids:
            report.skipped.append({"topic_id": topic.topic_id, "reason": f"topic {topic.topic_id!r} already exists"})
            continue
        twin = duplicate_of(topic.extraction_policy.required_keywords or (), [*existing, *accepted])
        if twin is not None:
            report.skipped.append({"topic_id": topic.topic_id, "reason": f"repeats the keywords of topic {twin!r}"})
            continue
        evidence = _evidence(runs, topic)
        if len(evidence) < need:
            # One conversation is an episode, not a subject people return to.
            report.skipped.append(
                {"topic_id": topic.topic_id, "reason": f"its keywords occur in {len(evidence)} of {len(runs)} recent conversations; "
                 f"a topic needs at least {need}"}
            )
            continue
        taken_ids.add(topic.topic_id)
        accepted.append(topic)
        written_topic = _write(report, topics_dir, taken_files, Proposal(topic, evidence, len(runs)), f"model {config.model}")
        if written_topic is not None:
            written.append(written_topic)
    return report, written


def _topics_reply(report: DiscoveryReport, messages: list, config: LLMConfig, store: CallStore) -> str:
    """The model's reply to the discovery prompt: the stored one when this prompt was asked before
    (replayed free), else asked now and stored, a failed call or a reply without topics too."""
    key = call_key(config.model, DISCOVER_PROMPT_VERSION, messages)
    stored = store.get(key)
    if stored is not None:
        text = stored.raw_response
        report.llm_call = {"call_key": key, "model": config.model, "cached": True}
    else:
        base = dict(
            key=key,
            topic_id=CALL_TOPIC_ID,
            run_id=CALL_RUN_ID,
            model=config.model,
            prompt_version=DISCOVER_PROMPT_VERSION,
            prompt_hash=prompt_hash(messages),
            request_json=canonical_json(messages),
        )
        with PointerClient(config) as client:
            try:
                reply = client.complete(messages, formats=response_formats(TOPICS_SCHEMA, "topics"))
            except CallFailed as exc:
                store.put(CallRecord(**base, status="failed", error=str(exc), attempts=exc.attempts))
                raise DiscoveryError(f"the model gave no answer: {exc}") from None
        text = reply.text
        fields = reply.record_fields()
        try:
            parse_topics_reply(text)
        except ReplyNotJSON as exc:
            store.put(CallRecord(**base, **fields, status="failed", error=str(exc)))
            raise DiscoveryError(f"the model's reply holds no topics: {exc}; nothing was written") from None
        store.put(CallRecord(**base, **fields, status="ok"))
        report.llm_call = {
            "call_key": key,
            "model": config.model,
            "cached": False,
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
        }
    return text


def _evidence(runs: Sequence[Run], topic: Topic) -> tuple[str, ...]:
    pattern = topic.keyword_pattern()
    return tuple(
        sorted(
            run.run_id
            for run in runs
            if pattern is not None
            and any(node.node_type in TEXT_NODE_TYPES and pattern.search(node_text(run, node) or "") for node in run.nodes)
        )
    )
