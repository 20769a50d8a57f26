"""The pointer prompt (DESIGN §5): the model points at verbatim text, code decides the rest.

Everything the model sees is rendered here, deterministically, so the rendered messages can be
hashed into a call's materialization key. Bump PROMPT_VERSION whenever the wording changes in a
way that should invalidate stored replies (the prompt hash changes anyway).
"""

from __future__ import annotations

from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict

from nexus_assets.core.fingerprint import canonical_json
from nexus_assets.core.models import Node, Run, Topic
from nexus_assets.extract.scope import node_text
from nexus_assets.llm.schema import reply_schema

# v2: one request carries every topic that needs a chunk (DESIGN §5 "At scale").
PROMPT_VERSION = "pointer-v2"
# The single-topic prompt of earlier releases: extractions it made are still replayed.
LEGACY_PROMPT_VERSIONS = ("pointer-v1",)

# The reply as the model must write it (no docstrings: they would become schema descriptions). The
# gate, not these models, decides whether a pointer holds.
class PointedQuote(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic_id: str
    json_path: str
    verbatim_quote: str


class PointerReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    extracted_pointers: list[PointedQuote]


POINTER_SCHEMA: dict[str, Any] = reply_schema(PointerReply)


def node_entry(run: Run, node: Node) -> dict[str, str] | None:
    """One node as the model sees it; None for a node that is not (or no longer) a string."""
    text = node_text(run, node)
    if text is None:
        return None
    return {"json_path": node.path, "type": node.node_type, "text": text}


def build_fragment(run: Run, nodes: Iterable[Node], topics_of: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The source JSON fragment of one chunk. Paths stay relative to the whole run document,
    so a pointer into chunk 3 resolves against the run exactly like one into chunk 1.
    `topics_of`: for a request with several topics, the topics each node may be quoted for
    (by path); a node every topic of the request admits carries no list."""
    entries = []
    for node in nodes:
        entry = node_entry(run, node)
        if entry is None:
            continue
        if topics_of is not None and node.path in topics_of:
            entry["topics"] = topics_of[node.path]
        entries.append(entry)
    return {"run_id": run.run_id, "nodes": entries}


def render_fragment(fragment: dict[str, Any]) -> str:
    # canonical_json: the same chunk renders to the same bytes whatever dict order the caller used.
    return canonical_json(fragment)


def topic_block(*, topic_id: str, display_name: str, scope_description: str, exclusion_criteria: Iterable[str]) -> str:
    """One topic as the model reads it; also what a stored answer for that topic is keyed on."""
    exclusions = list(exclusion_criteria)
    excluded = "\n".join(f"  - {c}" for c in exclusions) if exclusions else "  - (none beyond the scope)"
    return (
        f"- Topic id: {topic_id}\n"
        f"  Topic name: {display_name}\n"
        f"  In scope: {scope_description}\n"
        f"  Out of scope (never point at these):\n{excluded}\n"
    )


def topic_block_of(topic: Topic) -> str:
    policy = topic.extraction_policy
    return topic_block(
        topic_id=topic.topic_id,
        display_name=topic.display_name,
        scope_description=policy.scope_description,
        exclusion_criteria=policy.exclusion_criteria,
    )


def _user_prompt(*, blocks: list[str], topic_ids: list[str], run_id: str, fragment: dict[str, Any]) -> str:
    ids = ", ".join(f'"{t}"' for t in topic_ids)
    return (
        "Topics:\n"
        + "".join(blocks)
        + f"Run id: {run_id}\n"
        "\n"
        "Source JSON fragment (each node's json_path is its address in the whole run document):\n"
        f"{render_fragment(fragment)}\n"
        "\n"
        f'Reply with the JSON object {{"extracted_pointers": [...]}}; each pointer\'s topic_id is one of: {ids}.'
    )


_EXAMPLE_FRAGMENT = {
    "run_id": "run-42",
    "nodes": [
        {
            "json_path": "$['messages'][0]['content']",
            "type": "user_message",
            "text": "Thanks a lot! One more question about the build cache.",
        },
        {
            "json_path": "$['messages'][1]['content']",
            "type": "assistant_message",
            "text": "Sure. The cache key includes the compiler version, so upgrading the compiler "
            "invalidates every entry. Entries older than 30 days are evicted nightly. Hope that helps!",
        },
    ],
}
_EXAMPLE_REPLY = {
    "extracted_pointers": [
        {
            "topic_id": "build-cache",
            "json_path": "$['messages'][1]['content']",
            "verbatim_quote": "The cache key includes the compiler version, so upgrading the compiler "
            "invalidates every entry.",
        },
        {
            "topic_id": "build-cache",
            "json_path": "$['messages'][1]['content']",
            "verbatim_quote": "Entries older than 30 days are evicted nightly.",
        },
    ]
}

# The example is rendered with the same code as real requests, so its layout cannot drift.
SYSTEM_PROMPT = f"""You are a pointer, not an author. You read a fragment of one conversation and point at the exact text in it that belongs to each of the topics you are given. Code copies the text you point at; you never write it.

Rules:
1. Quote verbatim. Copy the characters exactly as they appear in the node's "text": same words, case, punctuation, spacing and typos. No paraphrasing, summarising, translating, correcting, ellipses or added words.
2. One quote comes from one node. Never merge or join text from different nodes.
3. No inference. Point only at text that itself states something within the topic's scope; never at what is merely implied. Skip anything that is out of scope or matches an exclusion.
4. Use the smallest verbatim quote that still holds the whole fact, usually one sentence or clause. Several facts in one node give several pointers.
5. json_path: copy the node's "json_path" exactly as given. Never invent, shorten or renumber a path.
6. Return only the path and the verbatim quote. Never return character offsets, positions or line numbers.
7. topic_id: the id of the topic the quote belongs to. A node that lists "topics" may be quoted only for those topics. Text that belongs to several topics gets one pointer per topic.
8. Reply with one JSON object and nothing else: {{"extracted_pointers": [{{"topic_id": "...", "json_path": "...", "verbatim_quote": "..."}}]}}. When nothing in the fragment is in scope, reply {{"extracted_pointers": []}}.

Example request:
{_user_prompt(
    blocks=[
        topic_block(
            topic_id="build-cache",
            display_name="Build cache policy",
            scope_description="How and when build cache entries are invalidated or evicted.",
            exclusion_criteria=["General pleasantries"],
        )
    ],
    topic_ids=["build-cache"],
    run_id="run-42",
    fragment=_EXAMPLE_FRAGMENT,
)}

Example reply:
{canonical_json(_EXAMPLE_REPLY)}"""


def render_request(topics: list[Topic], run_id: str, fragment: dict[str, Any]) -> list[dict[str, str]]:
    """The chat messages for one chunk asked for several topics (sorted by id)."""
    ordered = sorted(topics, key=lambda t: t.topic_id)
    user = _user_prompt(
        blocks=[topic_block_of(t) for t in ordered], topic_ids=[t.topic_id for t in ordered], run_id=run_id, fragment=fragment
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def render_messages(topic: Topic, run_id: str, fragment: dict[str, Any]) -> list[dict[str, str]]:
    """The chat messages for one chunk and one topic."""
    return render_request([topic], run_id, fragment)
