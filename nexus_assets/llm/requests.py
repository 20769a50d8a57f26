"""Which requests a set of runs needs (docs/openai.md "At scale"). Pure: sends and stores nothing.

A run's text is cut into windows that depend on the run alone (its text nodes, in document
order, packed up to the token budget), never on the topics. Windows that need asking are then
packed into requests in (run id, window) order, several small ones to a request. A topic's *share* of a window is the
window's nodes in that topic's scope; it is the unit an answer is stored and replayed by, keyed by
the model, the prompt version, the topic's own part of the prompt and the share's text. So:
- a window is sent once, with every topic that has a share in it and no stored answer;
- adding a topic asks only for that topic's shares; editing one topic's policy changes only that
  topic's keys; the other topics' stored answers are replayed as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.core.models import Node, Run, Topic
from nexus_assets.ingest.scope import Scope, in_scope_nodes, node_text
from nexus_assets.ingest.formats.limits import max_node_chars
from nexus_assets.llm.chunking import QUOTED_SHARE, chunk_nodes, estimate_tokens, pack_windows, window_bytes
from nexus_assets.llm.prompt import (
    PROMPT_VERSION,
    build_fragment,
    render_request,
    shown_fragment,
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
    """One or more windows (of different runs), asked once for every topic in their `shares`
    (by window, then topic id). `run_id`, `window_index` and `window_count` are the first
    window's; `handles` maps each node handle the request shows to (run_id, json_path)."""

    run_id: str
    window_index: int
    window_count: int
    shares: tuple[Share, ...]
    messages: list[dict[str, Any]]
    key: str
    prompt_hash: str
    input_tokens_est: int
    output_tokens_est: int
    handles: dict[str, tuple[str, str]] = field(default_factory=dict)
    text_chars: int = 0  # characters of run text the request carries

    @property
    def topic_ids(self) -> list[str]:
        return sorted({s.topic.topic_id for s in self.shares})

    @property
    def run_ids(self) -> list[str]:
        return list(dict.fromkeys(s.run_id for s in self.shares))

    @property
    def chars(self) -> int:
        """Characters the model reads: every message's content."""
        return sum(len(m["content"]) for m in self.messages)

    @property
    def prefix_chars(self) -> int:
        """Characters of the stable prefix (the system message), the same in every request of a sync."""
        return len(self.messages[0]["content"])


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


def build_request(
    parts: list[tuple[Run, list[Share]]], *, model: str, max_output_tokens: int, prefix_topics: Iterable[Topic] | None = None
) -> Request:
    """The request that asks some windows (each a run and its shares there, in the order given)
    for their shares. `prefix_topics`: every topic of the sync's requests (the stable prefix)."""
    topic_ids = sorted({s.topic.topic_id for _, shares in parts for s in shares})
    topics = {s.topic.topic_id: s.topic for _, shares in parts for s in shares}
    shown: list[tuple[Run, list[Node]]] = []
    topics_of: dict[tuple[str, str], list[str]] = {}
    all_shares: list[Share] = []
    for run, shares in parts:
        shares = sorted(shares, key=lambda s: s.topic.topic_id)
        all_shares += shares
        admitted: dict[str, list[str]] = {}
        for s in shares:
            for n in s.nodes:
                admitted.setdefault(n.path, []).append(s.topic.topic_id)
        shown.append((run, [n for n in run.nodes if n.path in admitted]))  # document order, each node once
        topics_of |= {(run.run_id, path): ids for path, ids in admitted.items() if len(ids) < len(topic_ids)}
    fragment, handles = shown_fragment(shown, topics_of)
    messages = render_request([topics[t] for t in topic_ids], fragment, prefix_topics=prefix_topics)
    fragment_tokens = estimate_tokens(messages[-1]["content"])
    first = all_shares[0]
    return Request(
        run_id=first.run_id,
        window_index=first.window_index,
        window_count=first.window_count,
        shares=tuple(all_shares),
        messages=messages,
        key=call_key(model, PROMPT_VERSION, messages),
        prompt_hash=prompt_hash(messages),
        input_tokens_est=sum(estimate_tokens(m["content"]) + TOKENS_PER_MESSAGE for m in messages),
        # Every topic's quotes come back in one reply, which max_output_tokens bounds as a whole.
        output_tokens_est=min(max_output_tokens, output_estimate(fragment_tokens, max_output_tokens) * len(topic_ids)),
        handles=handles,
        text_chars=sum(len(node_text(run, n) or "") for run, nodes in shown for n in nodes),
    )


def plan_jobs(
    jobs: Iterable[tuple[Run, Iterable[Topic]]],
    *,
    model: str,
    token_budget: int,
    max_output_tokens: int,
    answered: Callable[[str], bool],
) -> tuple[list[Share], list[Request]]:
    """(shares whose answer is stored, requests for the rest) for several runs, each with its
    topics. Every window with a share to ask is asked once for all its topics, and small windows
    share a request (`pack_windows`), in (run id, window) order: the requests depend on the runs,
    the topics, the settings and what is stored, never on the order the jobs came in."""
    stored: list[Share] = []
    missing: dict[tuple[str, int], list[Share]] = {}
    runs: dict[str, Run] = {}
    everyone: dict[str, Topic] = {}
    for run, topics in jobs:
        runs[run.run_id] = run
        topics = list(topics)
        everyone |= {t.topic_id: t for t in topics}
        for share in run_shares(run, topics, model=model, token_budget=token_budget):
            if answered(share.key):
                stored.append(share)
            else:
                missing.setdefault((share.run_id, share.window_index), []).append(share)
    order = sorted(missing)
    # The stable prefix names every topic of the jobs, asked or replayed: the same for every
    # request, whichever topics a request (or a batch of runs) happens to need.
    prefix_topics = [everyone[t] for t in sorted(everyone)]
    asked = {s.topic.topic_id for w in order for s in missing[w]}
    # A node lists its topics when fewer than all of a request's admit it: counted whenever fewer
    # than all the topics asked do, so a window's size is an upper bound wherever it is packed.
    sizes = [window_bytes(runs[r], *_window_nodes(missing[(r, i)], len(asked))) for r, i in order]
    requests = [
        build_request(
            [(runs[order[i][0]], missing[order[i]]) for i in group],
            model=model,
            max_output_tokens=max_output_tokens,
            prefix_topics=prefix_topics,
        )
        for group in pack_windows(sizes, token_budget=packing_budget(token_budget, max_output_tokens, len(asked)))
    ]
    return stored, requests


def packing_budget(token_budget: int, max_output_tokens: int, topic_count: int) -> int:
    """How full a request of several windows may get: the token budget, but no more than one reply
    can quote a quarter of for each topic asked (a reply holds every topic's quotes, and one cut
    off at max_output_tokens fails the whole request). A window is never cut by this: one that is
    fuller goes alone."""
    return max(1, min(token_budget, QUOTED_SHARE * max_output_tokens // max(1, topic_count)))


def _window_nodes(shares: list[Share], topic_count: int) -> tuple[list[Node], dict[str, list[str]]]:
    seen: dict[str, Node] = {}
    admitted: dict[str, list[str]] = {}
    for s in sorted(shares, key=lambda s: s.topic.topic_id):
        for n in s.nodes:
            seen.setdefault(n.path, n)
            admitted.setdefault(n.path, []).append(s.topic.topic_id)
    return list(seen.values()), {path: ids for path, ids in admitted.items() if len(ids) < topic_count}


