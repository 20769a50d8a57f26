"""Topic lifecycle rules (docs/invariants.md §7): DRAFT → ACTIVE → SEALING → LOCKED. Pure: no I/O.

A person writes or reviews a topic file (DRAFT), activates it (the human gate), and seals it once
its sources are closed. Sealing is one-way, and a topic that has been ACTIVE keeps its identity:
its bricks' ids hash its topic_id and its manifests freeze its order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from nexus_assets.core.models import Topic, TopicState

SEALED_STATES: tuple[TopicState, ...] = ("SEALING", "LOCKED")
# States that mean "a person let this topic compile": from then on its identity is fixed.
ACTIVATED_STATES: tuple[TopicState, ...] = ("ACTIVE", "SEALING", "LOCKED")


def has_been_active(states_seen: Iterable[str]) -> bool:
    return any(s in ACTIVATED_STATES for s in states_seen)


class StateLineError(ValueError):
    """The topic file's `state:` line cannot be rewritten safely; a person must edit it."""


# A top-level `state:` key in block style: `state: DRAFT   # comment`, value optionally quoted.
_STATE_LINE = re.compile(
    r"^(?P<key>state[ \t]*:)(?P<gap>[ \t]*)(?P<value>[^#\r\n]*?)(?P<tail>[ \t]*(?:#[^\r\n]*)?)(?P<eol>\r?\n|\Z)",
    re.MULTILINE,
)


def set_state_line(text: str, state: TopicState) -> str:
    """`text` with only its `state:` value replaced (comments, quoting and layout kept).

    A file without a state line (the default is DRAFT) gets one appended.
    """
    matches = list(_STATE_LINE.finditer(text))
    if len(matches) > 1:
        raise StateLineError(f"it has {len(matches)} top-level `state:` lines; keep exactly one")
    if not matches:
        newline = "\r\n" if "\r\n" in text else "\n"
        sep = "" if not text or text.endswith(("\n", "\r")) else newline
        return f"{text}{sep}state: {state}{newline}"
    m = matches[0]
    value = m.group("value")
    quote = value[0] if len(value) >= 2 and value[0] in "'\"" and value[-1] == value[0] else ""
    gap = m.group("gap") or " "
    return text[: m.start("gap")] + gap + f"{quote}{state}{quote}" + text[m.end("value") :]


@dataclass(frozen=True)
class RecordedTopic:
    """What the vault knows about a topic: its current record and every state it has been in."""

    topic: Topic
    source_file: str | None
    states_seen: tuple[str, ...] = field(default=())

    @property
    def was_active(self) -> bool:
        return has_been_active((*self.states_seen, self.topic.state))


def definition_problems(
    file_topic: Topic,
    file_path: str,
    recorded: RecordedTopic | None,
    *,
    previous_id: RecordedTopic | None = None,
) -> list[str]:
    """Why a topic file may not be recorded as it stands; empty when it may.

    `recorded` is the vault's record of the same topic_id; `previous_id` the record of another
    topic that this very file defined before (a topic_id edited in place).
    """
    problems = []
    tid = file_topic.topic_id
    if previous_id is not None and previous_id.was_active and previous_id.topic.topic_id != tid:
        old = previous_id.topic.topic_id
        problems.append(
            f"topic file {file_path} defined topic {old!r}, which has been ACTIVE, and now says topic_id {tid!r}: "
            f"a topic's id cannot change once it has been ACTIVE (its bricks and manifests are keyed by it). "
            f"Restore `topic_id: {old}` in {file_path}, and create a new topic (a new topic file) for {tid!r}"
        )
    if recorded is not None and recorded.was_active and recorded.topic.ordering_rule != file_topic.ordering_rule:
        was = recorded.topic.ordering_rule
        problems.append(
            f"topic {tid!r} has been ACTIVE with ordering_rule {was!r}; its file {file_path} now says "
            f"{file_topic.ordering_rule!r}, but a topic's order cannot change once it has been ACTIVE. "
            f"Restore `ordering_rule: {was}` in {file_path}, or create a new topic (a new topic file with a new "
            f"topic_id) with the other order"
        )
    vault_state = recorded.topic.state if recorded is not None else None
    if file_topic.state in SEALED_STATES and vault_state not in SEALED_STATES:
        problems.append(
            f"topic file {file_path} says `state: {file_topic.state}` but topic {tid!r} was never sealed"
            f" (the vault has it {vault_state or 'unrecorded'}); only `nexus seal {tid}` seals a topic: "
            f"set `state: ACTIVE` in the file, sync, then run `nexus seal {tid}`"
        )
    return problems


def drafts_to_drop(recorded: Iterable[RecordedTopic], defined: set[str], files_present: set[str]) -> list[str]:
    """Topic ids a sync drops from the vault: DRAFT topics that were never compiled, that no topic
    file defines now, and whose own file is gone (a person deleted the proposal: rejected it).

    `defined` are the topic_ids of the current topic files; `files_present` which recorded source
    files still exist. A topic that has been ACTIVE is never dropped: its bricks are history."""
    return sorted(
        r.topic.topic_id
        for r in recorded
        if r.topic.state == "DRAFT"
        and not r.was_active
        and r.topic.topic_id not in defined
        and r.source_file is not None
        and r.source_file not in files_present
    )
