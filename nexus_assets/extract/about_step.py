"""The topic's record (DESIGN §3.1): which of the runs its `sources` admit it is about, judged once
per run version and topic definition. The `raw_runs` asset and a push call it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from nexus_assets.core.models import Topic
from nexus_assets.extract.about import HiddenOnly, about_run, definition_digest, hidden_messages
from nexus_assets.extract.step import admitted
from nexus_assets.vault.records import RunVersion

if TYPE_CHECKING:
    from nexus_assets.extract.about_records import AboutRecords
    from nexus_assets.ingest.records import RunRecords
    from nexus_assets.topics.records import TopicRecords

RUNS_PER_CHUNK = 200


class AboutStores(Protocol):
    topics: TopicRecords
    runs: RunRecords
    about: AboutRecords


@dataclass
class RecordReport:
    runs_admitted: int = 0
    judged_now: int = 0
    runs_about: int = 0
    runs_reading_tools: int = 0
    # Why runs were left out, counted ("a required keyword occurs only in 3 hidden message(s)…").
    left_out: Counter = field(default_factory=Counter)
    hidden_only: int = 0  # runs left out because the keywords are only in hidden messages
    hidden_messages: int = 0  # and those hidden messages


def judge_record(vault: AboutStores, topic: Topic) -> RecordReport:
    """Judge every admitted latest run version not yet judged under the topic's definition."""
    report = RecordReport()
    digest = definition_digest(topic)
    versions = admitted(vault, topic, [RunVersion(r, v) for r, v in sorted(vault.runs.latest_versions().items())])
    report.runs_admitted = len(versions)
    judged = vault.about.judged(topic.topic_id, digest, versions)  # once: asked per run it made a push O(runs²)
    todo = [rv for rv in versions if rv not in judged]
    for start in range(0, len(todo), RUNS_PER_CHUNK):
        chunk = todo[start : start + RUNS_PER_CHUNK]
        runs = vault.runs.load_run_nodes(chunk)
        verdicts = []
        for rv in chunk:
            verdict = about_run(topic, runs[rv]) if rv in runs else None
            if verdict is not None:
                verdicts.append((rv, verdict.about, verdict.reads_tools, verdict.why))
        with vault.transaction():
            vault.about.record(topic.topic_id, digest, verdicts)
        report.judged_now += len(verdicts)
        del runs
    for _, about, tools, why in vault.about.verdicts(topic.topic_id, digest):
        if about:
            report.runs_about += 1
            report.runs_reading_tools += tools
        else:
            report.left_out[why.split(";")[0]] += 1
            report.hidden_only += (hidden := hidden_messages(why)) > 0
            report.hidden_messages += hidden
    return report


def keywords_only_hidden(vault: AboutStores, topic: Topic) -> HiddenOnly | None:
    """The runs (and their hidden messages) that hold the topic's keywords only in hidden messages,
    from the verdicts stored for its definition; None when there are none or the topic reads
    hidden messages. A sync and a push both say it (`keywords_only_hidden`)."""
    if topic.include_hidden:
        return None
    return vault.about.keywords_only_hidden(topic.topic_id, definition_digest(topic))
