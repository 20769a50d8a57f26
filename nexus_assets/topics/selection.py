"""Which topics a sync compiles, read from the topic files: the one rule the CLI, the schedule and
the sensor share. Standard library and the topic reader only (the sensor runs it every 30 s)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nexus_assets.core.models import COMPILED_STATES
from nexus_assets.topics.files import read_topic_files, topic_id_conflicts

# Topics that are partitions: everything a person has activated (a LOCKED topic still reports new runs).
PARTITION_STATES = (*COMPILED_STATES, "LOCKED")


class SyncInputError(ValueError):
    """A sync's inputs are not usable (a folder, a topic, an option); nothing was written. The
    message names the input and the fix."""


@dataclass
class TopicSelection:
    """The topic files of a folder, read once: what a sync compiles and what it leaves out, and why."""

    files: list
    defined: dict  # topic_id -> Topic
    selected: list[str]
    skipped: list[str] = field(default_factory=list)  # defined but not compiled (not ACTIVE)
    problems: list[str] = field(default_factory=list)  # topic files that could not be read

    @property
    def warnings(self) -> list[str]:
        """What a person should be told before the sync starts (the shells print or log them)."""
        out = [f"warning: {p}" for p in self.problems]
        if self.skipped:
            out.append(f"not compiled (not ACTIVE): {', '.join(self.skipped)}")
        return out


def broken_topic_files(problems: list[str]) -> str:
    """The closing lines of a sync that could not read some topic files: one line per file."""
    n = len(problems)
    return "\n".join(
        [f"nexus: {n} topic file{'s' if n > 1 else ''} could not be read, so {'their topics were' if n > 1 else 'its topic was'} "
         "not compiled; fix and sync again:"]
        + [f"  {' '.join(line.split())}" for line in problems]  # one line per file, whatever YAML said
    )


def select_topics(topics_dir: Path, wanted: list[str] | None = None) -> TopicSelection:
    """Every compilable topic (ACTIVE or SEALING), or the `wanted` ones (which may also be LOCKED:
    a sealed topic still takes new sources as new bricks). SyncInputError for an ambiguous folder
    or a topic that is unknown or not activated."""
    files = read_topic_files(topics_dir)
    if conflicts := topic_id_conflicts(files):  # ambiguous configuration: nothing is touched
        raise SyncInputError("\n".join(conflicts))
    defined = {tf.topic.topic_id: tf.topic for tf in files if tf.topic is not None}
    # A duplicate topic_id was refused above; every other problem is a file to fix.
    problems = [tf.problem for tf in files if tf.problem and tf.duplicate_of is None]
    if wanted:
        for t in wanted:
            if t not in defined:
                raise SyncInputError(
                    f"unknown topic {t!r}; topic files in {topics_dir} define: {', '.join(sorted(defined)) or 'none'}"
                )
            if defined[t].state not in PARTITION_STATES:
                raise SyncInputError(f"topic {t!r} is {defined[t].state}; activate it first (`nexus activate {t}`)")
        return TopicSelection(files, defined, list(dict.fromkeys(wanted)), problems=problems)
    selected = sorted(t for t, topic in defined.items() if topic.state in COMPILED_STATES)
    skipped = sorted(t for t, topic in defined.items() if topic.state not in COMPILED_STATES)
    return TopicSelection(files, defined, selected, skipped, problems)


def topics_reading(topics_dir: Path, run_id: str, file: str | None, title: str | None = None, started: str | None = None) -> list[str]:
    """The compiled topics that read a run (those without `sources`, or whose sources admit it):
    the topics a pushed run touches, whose sync the push queues."""
    selection = select_topics(topics_dir)
    return [
        t for t in selection.selected
        if (sources := selection.defined[t].sources) is None or sources.admits(run_id, file, title, started)
    ]
