"""The semantic veto's prompt and reply (docs/conflicts.md, Tier 2). Pure: rendered deterministically, so
the messages hash into the call's key and a re-run replays the stored answer.

The model is asked one thing: does the new statement add information its related statements do
not hold? It may answer keep, discard or unsure, never text; anything else reads as unsure, and
unsure keeps the brick.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Sequence

from nexus_assets.core.models import Topic
from nexus_assets.llm.config import ReplyNotJSON
from nexus_assets.llm.replies import parse_json_reply, response_formats

VETO_PROMPT_VERSION = "veto-v1"
MAX_RELATED_SHOWN = 5  # the nearest related bricks the model compares the new one with

Verdict = Literal["keep", "discard", "unsure"]

VETO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["keep", "discard", "unsure"]},
        "reason": {"type": "string"},
    },
    "required": ["verdict"],
    "additionalProperties": False,
}
VETO_FORMATS = response_formats(VETO_SCHEMA, "veto")

SYSTEM = (
    "You review a knowledge base of verbatim statements. You never write or rewrite statements. "
    "Given a new statement and statements already kept that are related to it, answer only whether "
    "the new statement adds information that the kept statements do not already hold. "
    'Reply with JSON: {"verdict": "keep" | "discard" | "unsure", "reason": "<one short sentence>"}. '
    '"discard" only when every fact of the new statement is already stated; a different value, '
    'a contradiction, a new detail or a different scope is "keep"; if in doubt, "unsure".'
)


def render_veto(topic: Topic, new_text: str, related: Sequence[str]) -> list[dict[str, str]]:
    kept = "\n".join(f"{i}. {json.dumps(text, ensure_ascii=False)}" for i, text in enumerate(related, 1))
    user = (
        f"Topic: {topic.display_name} ({topic.topic_id})\n"
        f"Scope: {topic.extraction_policy.scope_description}\n\n"
        f"Statements already kept:\n{kept}\n\n"
        f"New statement:\n{json.dumps(new_text, ensure_ascii=False)}\n\n"
        "Does the new statement add information not present in the statements already kept?"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def _verdicts(value: Any) -> list[Any] | None:
    if isinstance(value, dict) and "verdict" in value:
        return [value]
    return None


def parse_verdict(text: str | None) -> Verdict:
    """The verdict a reply carries; anything that is not exactly keep or discard is unsure.
    Raises ReplyNotJSON when the reply holds no verdict object at all (a failed call)."""
    (item,) = parse_json_reply(text, extract=_verdicts, embedded=lambda v: isinstance(v, dict) and "verdict" in v, what="verdict")
    verdict = item.get("verdict")
    verdict = verdict.strip().lower() if isinstance(verdict, str) else ""
    return verdict if verdict in ("keep", "discard") else "unsure"


__all__ = ["MAX_RELATED_SHOWN", "ReplyNotJSON", "VETO_FORMATS", "VETO_PROMPT_VERSION", "Verdict", "parse_verdict", "render_veto"]
