"""The pointer prompt (docs/openai.md): the model points at verbatim text, code decides the rest.

Everything the model sees is rendered here, deterministically, so the rendered messages can be
hashed into a call's materialization key. Bump PROMPT_VERSION whenever the wording changes in a
way that should invalidate stored replies (the prompt hash changes anyway).

Since v4 the rules say what a note is (what a person would re-read in six months: their own
constraints and decisions first; never tool output, code, harness text or the assistant narrating
itself) and each topic in the prefix shows its `examples` (docs/inputs.md), the person's own judgement.
Since v3 a request is laid out for what it costs: the system message (the rules, the example and
every topic the sync asks about) is the same bytes in every request of a sync, so a provider that
caches prompt prefixes bills it once; the user message holds only the source text, each node named
by a short handle (`llm.handles`) that code maps back to its run and exact `json_path`.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from nexus_assets.core.fingerprint import canonical_json
from nexus_assets.core.models import Node, Run, Topic
from nexus_assets.ingest.scope import node_text
from nexus_assets.llm.handles import handle
from nexus_assets.llm.schema import reply_schema

# v4: the rules say what a note is, and each topic shows its examples. v3: nodes shown by handle,
# several runs in one request, the rules and topics a stable prefix.
PROMPT_VERSION = "pointer-v4"
# Earlier prompts (v3: no note rules nor examples; v2: a request per chunk of one run with every
# topic; v1: one topic per request): the extractions they made are still replayed, never asked again.
LEGACY_PROMPT_VERSIONS = ("pointer-v3", "pointer-v2", "pointer-v1")


# The reply as the model must write it (no docstrings: they would become schema descriptions). The
# gate, not these models, decides whether a pointer holds.
class PointedQuote(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic_id: str
    node: str
    verbatim_quote: str


class PointerReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    extracted_pointers: list[PointedQuote]


POINTER_SCHEMA: dict[str, Any] = reply_schema(PointerReply)


def node_entry(run: Run, node: Node) -> dict[str, str] | None:
    """One node as a stored answer is keyed by (its address, type and text); None for a node that
    is not (or no longer) a string. What the model is shown is `shown_entry`."""
    text = node_text(run, node)
    if text is None:
        return None
    return {"json_path": node.path, "type": node.node_type, "text": text}


def build_fragment(run: Run, nodes: Iterable[Node], topics_of: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """One run's nodes with their addresses: what a share's key is computed over."""
    entries = []
    for node in nodes:
        entry = node_entry(run, node)
        if entry is None:
            continue
        if topics_of is not None and node.path in topics_of:
            entry["topics"] = topics_of[node.path]
        entries.append(entry)
    return {"run_id": run.run_id, "nodes": entries}


def shown_fragment(
    parts: Sequence[tuple[Run, Sequence[Node]]], topics_of: dict[tuple[str, str], list[str]] | None = None
) -> tuple[dict[str, Any], dict[str, tuple[str, str]]]:
    """The source fragment of one request, and its handles: each part (one run's nodes) is a list
    of {"node": handle, "type", "text"} in document order; `topics_of` ((run_id, path) -> topic
    ids) restricts a node to some of the request's topics. Handles map to (run_id, json_path)."""
    runs, handles = [], {}
    for r, (run, nodes) in enumerate(parts, 1):
        entries = []
        n = 0
        for node in nodes:
            text = node_text(run, node)
            if text is None:
                continue
            n += 1
            h = handle(r, n)
            handles[h] = (run.run_id, node.path)
            entry: dict[str, Any] = {"node": h, "type": node.node_type, "text": text}
            if topics_of is not None and (run.run_id, node.path) in topics_of:
                entry["topics"] = topics_of[(run.run_id, node.path)]
            entries.append(entry)
        runs.append(entries)
    return {"runs": runs}, handles


def render_fragment(fragment: dict[str, Any]) -> str:
    # canonical_json: the same chunk renders to the same bytes whatever dict order the caller used.
    return canonical_json(fragment)


def topic_block(
    *,
    topic_id: str,
    display_name: str,
    scope_description: str,
    exclusion_criteria: Iterable[str],
    keep: Iterable[str] = (),
    drop: Iterable[str] = (),
    node_types: Iterable[str] = (),
) -> str:
    """One topic as the model reads it; also what a stored answer for that topic is keyed on. Its
    examples (a person's judgement) and the node types it asks for are shown when it has them, so a
    topic without them reads as it did."""
    exclusions = list(exclusion_criteria)
    excluded = "\n".join(f"  - {c}" for c in exclusions) if exclusions else "  - (none beyond the scope)"
    block = (
        f"- Topic id: {topic_id}\n"
        f"  Topic name: {display_name}\n"
        f"  In scope: {scope_description}\n"
        f"  Out of scope (never point at these):\n{excluded}\n"
    )
    types = list(node_types)
    if types:
        block += f"  Reads only nodes of type: {', '.join(types)}\n"
    for label, texts in (("Kept as notes", list(keep)), ("Not notes", list(drop))):
        if texts:
            listed = "\n".join(f"  - {canonical_json(t)}" for t in texts)
            block += f"  {label} for this topic (examples a person chose):\n{listed}\n"
    return block


def topic_block_of(topic: Topic) -> str:
    policy = topic.extraction_policy
    examples = topic.examples
    return topic_block(
        topic_id=topic.topic_id,
        display_name=topic.display_name,
        scope_description=policy.scope_description,
        exclusion_criteria=policy.exclusion_criteria,
        keep=examples.keep if examples is not None else (),
        drop=examples.drop if examples is not None else (),
        node_types=policy.target_node_types or (),
    )


ASKED_PREFIX = "Topics asked: "
FRAGMENT_PREFIX = "Fragment (one list per conversation):"


def _user_prompt(*, topic_ids: list[str], fragment: dict[str, Any]) -> str:
    ids = ", ".join(f'"{t}"' for t in topic_ids)
    return f"{ASKED_PREFIX}{ids}\n{FRAGMENT_PREFIX}\n{render_fragment(fragment)}"


_EXAMPLE_FRAGMENT = {
    "runs": [
        [
            {"node": "r1n1", "type": "user_message", "text": "Thanks a lot! One more question about the build cache."},
            {
                "node": "r1n2",
                "type": "assistant_message",
                "text": "Sure. The cache key includes the compiler version, so upgrading the compiler "
                "invalidates every entry. Entries older than 30 days are evicted nightly. Hope that helps!",
            },
        ]
    ]
}
_EXAMPLE_REPLY = {
    "extracted_pointers": [
        {
            "topic_id": "build-cache",
            "node": "r1n2",
            "verbatim_quote": "The cache key includes the compiler version, so upgrading the compiler invalidates every entry.",
        },
        {"topic_id": "build-cache", "node": "r1n2", "verbatim_quote": "Entries older than 30 days are evicted nightly."},
    ]
}

# The example is rendered with the same code as real requests, so its layout cannot drift.
RULES = f"""You are a pointer, not an author. You read conversations and point at the exact text in them that belongs to the topics below. Code copies the text you point at; you never write it.

Rules:
1. Quote verbatim: copy the characters exactly as they appear in a node's "text" (same words, case, punctuation, spacing and typos). No paraphrase, summary, translation, correction, ellipsis or added words.
2. One quote comes from one node. Never join text from different nodes.
3. No inference: point only at text that itself states something within a topic's scope. Skip what is out of scope or matches an exclusion.
4. Use the smallest quote that still holds the whole fact, usually one sentence or clause. Several facts in one node give several pointers.
5. Point only at notes: what a person would re-read in six months on that topic. First the person's own requirements, constraints, corrections and decisions (often imperative: "keep the retry count at three, not five"), including their answers to the assistant's questions and the plans they approved; then facts, plans, settings and findings with their reason ("the API only gives hourly data, so ..."). Never point at: tool output (command output, file listings, test-runner lines, "File created successfully at: ..."), code, markup or data dumps, text the tool or IDE wrote into the conversation (<ide_opened_file>, <system-reminder>, <environment_context>, slash-command wrappers), the assistant narrating what it does or did ("I'll create ...", "Let me ...", "Now update ...", "All other functionality remains unchanged") or restating the request, questions, greetings, thanks, headings and labels, boilerplate caveats, transient status ("all tests pass"). A topic that reads tool_message or tool_call nodes asks for tool output: for it, point at the lines that match its scope.
6. A topic's examples show a person's judgement: point at text like its "Kept as notes" examples, never at text like its "Not notes" examples.
7. node: the node's "node" handle, copied exactly. Never invent one. Never return offsets, positions or line numbers.
8. topic_id: one of the topics asked. A node that lists "topics" may be quoted only for those. Text that belongs to several topics gets one pointer per topic.
9. Reply with one JSON object and nothing else: {{"extracted_pointers": [{{"topic_id": "...", "node": "...", "verbatim_quote": "..."}}]}}. When nothing is in scope, reply {{"extracted_pointers": []}}.

Example, for a topic "build-cache" (how build cache entries are invalidated or evicted):
{_user_prompt(topic_ids=["build-cache"], fragment=_EXAMPLE_FRAGMENT)}
Reply:
{canonical_json(_EXAMPLE_REPLY)}

Topics:
"""

# The rules alone (no topics): what `nexus plan` and the benchmarks size the prefix by.
SYSTEM_PROMPT = RULES


def system_prompt(topics: Iterable[Topic]) -> str:
    """The stable prefix of every request of a sync: the rules, then every topic it asks about
    (sorted by id), whichever of them a given request asks."""
    return RULES + "".join(topic_block_of(t) for t in sorted(topics, key=lambda t: t.topic_id))


def render_request(
    topics: list[Topic], fragment: dict[str, Any], *, prefix_topics: Iterable[Topic] | None = None
) -> list[dict[str, str]]:
    """The chat messages of one request: the sync's stable prefix (`prefix_topics`, default the
    request's own topics), then the topics this request asks and its fragment."""
    ordered = sorted(topics, key=lambda t: t.topic_id)
    system = system_prompt(prefix_topics if prefix_topics is not None else ordered)
    user = _user_prompt(topic_ids=[t.topic_id for t in ordered], fragment=fragment)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def render_messages(topic: Topic, run: Run, nodes: Sequence[Node]) -> list[dict[str, str]]:
    """The chat messages for some nodes of one run asked for one topic."""
    fragment, _ = shown_fragment([(run, nodes)])
    return render_request([topic], fragment)
