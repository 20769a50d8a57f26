"""The topic-discovery prompt for `nexus discover --extractor openai`, and how its reply is read.

The model only *suggests* topics; every suggestion is validated, deduplicated against the
existing topics and written as a DRAFT file that a person must review and activate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from nexus_assets.core.fingerprint import canonical_json
from nexus_assets.core.models import Run, Topic
from nexus_assets.ingest.scope import node_text
from nexus_assets.llm.client import parse_json_reply
from nexus_assets.llm.schema import reply_schema

DISCOVER_PROMPT_VERSION = "discover-v1"
# Source text sent per discovery call (~6k tokens): the most recent runs first, each message cut short.
DIGEST_BUDGET_CHARS = 24_000
MESSAGE_CHARS = 400

# The reply as the model must write it (no docstrings: they would become schema descriptions);
# `suggestion_topic` checks each proposal against the runs.
class ProposedTopic(BaseModel):
    topic_id: str
    display_name: str
    scope_description: str
    required_keywords: list[str]
    exclusion_criteria: list[str] = []


class TopicsReply(BaseModel):
    topics: list[ProposedTopic]


TOPICS_SCHEMA: dict[str, Any] = reply_schema(TopicsReply)


SYSTEM_PROMPT = """You propose topics for Nexus Sync, a compiler that files verbatim quotes from conversations under topics.
A topic is a compilation scope: a recurring subject that several conversations return to.
Read the conversation excerpts and propose up to 5 NEW topics that are not already covered by the existing topics.
For each topic give:
- topic_id: a lowercase slug (letters, digits, hyphens), e.g. "release-process"
- display_name: a short human title
- scope_description: one or two sentences saying what statements belong in the topic
- required_keywords: 2 to 6 words that literally occur in the excerpts and mark the topic's messages
- exclusion_criteria: optional list of what does not belong
Answer with JSON only, in this shape: {"topics": [{"topic_id": "...", "display_name": "...", "scope_description": "...", "required_keywords": ["..."], "exclusion_criteria": ["..."]}]}
Propose nothing (an empty list) when every subject is already covered."""


def digest(runs: Sequence[Run], *, budget_chars: int = DIGEST_BUDGET_CHARS) -> list[dict[str, Any]]:
    """Excerpts of the runs, in the order given, until the budget is spent."""
    out, spent = [], 0
    for run in runs:
        messages = []
        for node in run.nodes:
            if node.node_type not in ("user_message", "assistant_message"):
                continue
            text = node_text(run, node)
            if not text or not text.strip():
                continue
            text = " ".join(text.split())
            messages.append({"role": node.node_type.split("_")[0], "text": text[:MESSAGE_CHARS]})
        if not messages:
            continue
        entry = {"run_id": run.run_id, "messages": messages}
        size = len(canonical_json(entry))
        if out and spent + size > budget_chars:
            break
        out.append(entry)
        spent += size
    return out


def render_messages(runs: Sequence[Run], existing: Sequence[Topic]) -> list[dict[str, str]]:
    covered = [
        {
            "topic_id": t.topic_id,
            "display_name": t.display_name,
            "required_keywords": list(t.extraction_policy.required_keywords or ()),
        }
        for t in sorted(existing, key=lambda t: t.topic_id)
    ]
    user = {"existing_topics": covered, "conversations": digest(runs)}
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        # canonical_json: the same inputs render to the same bytes, so the call key is stable.
        {"role": "user", "content": canonical_json(user)},
    ]


def _topic_list(value: Any) -> list[Any] | None:
    if isinstance(value, dict):
        if isinstance(value.get("topics"), list):
            return value["topics"]
        if "topic_id" in value:
            return [value]
        return None
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return value
    return None


def parse_topics_reply(text: str | None) -> list[Any]:
    """The raw topic suggestions in a reply: plain JSON, JSON in ``` fences, or the first JSON
    object with `topics` embedded in prose. Items come back unchecked; anything else raises ReplyNotJSON."""
    return parse_json_reply(
        text, extract=_topic_list, embedded=lambda v: isinstance(v, dict) and isinstance(v.get("topics"), list), what="topics"
    )
