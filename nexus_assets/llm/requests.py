"""Which requests a set of runs needs (DESIGN §5 "At scale"). Pure: sends and stores nothing.

A run's text is cut into windows that depend on the run alone (its text nodes, in document
order, packed up to the token budget), never on the topics. A topic's *share* of a window is the
window's nodes in that topic's scope; it is the unit an answer is stored and replayed by, keyed by
the model, the prompt version, the topic's own part of the prompt and the share's text. So:
- a window is sent once, with every topic that has a share in it and no stored answer;
- adding a topic asks only for that topic's shares; editing one topic's policy changes only that
  topic's keys; the other topics' stored answers are replayed as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.core.models import Node, Run, Topic
from nexus_assets.extract.scope import Scope, in_scope_nodes, node_text
from nexus_assets.ingest.formats.limits import max_node_chars
from nexus_assets.llm.chunking import chunk_nodes, estimate_tokens
from nexus_assets.llm.prompt import (
    PROMPT_VERSION,
    build_fragment,
    render_request,
    topic_block_of,
)

# Chat templates add a few tokens of framing per message.
TOKENS_PER_MESSAGE = 4


def prompt_hash(messages: list[dict[str, Any]]) -> str:
    # surrogatepass: JSON input may carry lone surrogates ("\\ud800"); hash them rather than crash.
    return sha256_hex(canonical_json(messages).encode("utf-8", "surrogatepass"))


def call_key(model: str, prompt_version: str, messages: list[dict[str, Any]]) -> str:
    """The materialization key of one request: same model + prompt version + rendered prompt = same reply."""
    return sha256_hex(canonical_json([model, prompt_version, prompt_hash(messages)]))


def share_key(model: str, topic: Topic, run: Run, nodes: Iterable[Node], prompt_version: str = PROMPT_VERSION) -> str:
    """The key one topic's answer for some nodes of a run is stored and replayed by."""
    entries = build_fragment(run, nodes)["nodes"]
    payload = [model, prompt_version, topic_block_of(topic), run.run_id, entries]
    return sha256_hex(canonical_json(payload).encode("utf-8", "surrogatepass"))


def output_estimate(fragment_tokens: int, max_output_tokens: int) -> int:
    # Quotes are substrings of the input plus ~25 tokens of path and framing each; a quarter of
    # the fragment is a generous guess for a selective topic, capped by what a reply may hold.
    return min(max_output_tokens, 16 + -(-fragment_tokens // 4))


@dataclass(frozen=True)
class Share:
    """One topic's part of one window: the nodes in its scope there, and the key of its answer."""

    topic: Topic
    run_id: str
    window_index: int
    window_count: int
    nodes: tuple[Node, ...]
    key: str


@dataclass(frozen=True)
class Request:
    """One window of one run, asked once for every topic in `shares` (sorted by topic id)."""

    run_id: str
    window_index: int
    window_count: int
    shares: tuple[Share, ...]
    messages: list[dict[str, Any]]
    key: str
    prompt_hash: str
    input_tokens_est: int
    output_tokens_est: int

    @property
    def topic_ids(self) -> list[str]:
        return [s.topic.topic_id for s in self.shares]


def _window_scope() -> Scope:
    # Every usable text node, whatever a topic asks for: windows must not depend on the topics.
    return Scope(node_types=None, include_hidden=True, current_only=False, pattern=None, longest=max_node_chars())


def windows(run: Run, token_budget: int) -> list[list[Node]]:
    """The run's text nodes in document order, packed into windows of at most `token_budget`."""
    scope = _window_scope()
    usable = [n for n in run.nodes if scope.excludes_text(node_text(run, n)) is None]
    return chunk_nodes(run, usable, token_budget=token_budget)


def run_shares(run: Run, topics: Iterable[Topic], *, model: str, token_budget: int) -> list[Share]:
    """Every topic's share of every window of `run` (windows in order, topics by id); a topic with
    nothing in scope in a window has no share there."""
    ordered = sorted(topics, key=lambda t: t.topic_id)
    in_scope = {t.topic_id: {n.path for n, _ in in_scope_nodes(t.extraction_policy, run, t)} for t in ordered}
    cut = windows(run, token_budget)
    shares = []
    for i, window in enumerate(cut):
        for topic in ordered:
            nodes = tuple(n for n in window if n.path in in_scope[topic.topic_id])
            if nodes:
                shares.append(Share(topic, run.run_id, i, len(cut), nodes, share_key(model, topic, run, nodes)))
    return shares


def build_request(run: Run, shares: list[Share], *, model: str, max_output_tokens: int) -> Request:
    """The request that asks one window for `shares` (all of the same window)."""
    shares = sorted(shares, key=lambda s: s.topic.topic_id)
    first = shares[0]
    wanted = {n.path for s in shares for n in s.nodes}
    nodes = [n for n in run.nodes if n.path in wanted]  # document order, each node once
    topics_of: dict[str, list[str]] | None = None
    if len(shares) > 1:
        admitted: dict[str, list[str]] = {}
        for s in shares:
            for n in s.nodes:
                admitted.setdefault(n.path, []).append(s.topic.topic_id)
        topics_of = {path: ids for path, ids in admitted.items() if len(ids) < len(shares)}
    messages = render_request([s.topic for s in shares], run.run_id, build_fragment(run, nodes, topics_of))
    fragment_tokens = estimate_tokens(messages[-1]["content"])
    return Request(
        run_id=run.run_id,
        window_index=first.window_index,
        window_count=first.window_count,
        shares=tuple(shares),
        messages=messages,
        key=call_key(model, PROMPT_VERSION, messages),
        prompt_hash=prompt_hash(messages),
        input_tokens_est=sum(estimate_tokens(m["content"]) + TOKENS_PER_MESSAGE for m in messages),
        output_tokens_est=output_estimate(fragment_tokens, max_output_tokens) * len(shares),
    )


def plan_requests(
    run: Run,
    topics: Iterable[Topic],
    *,
    model: str,
    token_budget: int,
    max_output_tokens: int,
    answered: Callable[[str], bool],
) -> tuple[list[Share], list[Request]]:
    """(shares whose answer is stored, requests for the rest: one per window that has any)."""
    stored, missing_by_window = [], {}
    for share in run_shares(run, topics, model=model, token_budget=token_budget):
        if answered(share.key):
            stored.append(share)
        else:
            missing_by_window.setdefault(share.window_index, []).append(share)
    requests = [
        build_request(run, missing_by_window[i], model=model, max_output_tokens=max_output_tokens)
        for i in sorted(missing_by_window)
    ]
    return stored, requests
