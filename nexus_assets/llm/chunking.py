"""How much run text one request carries, and how run text is cut and packed into requests.

Token counts are estimates: ceil(UTF-8 bytes / 4). About four bytes per token holds for English
text and JSON under the common BPE tokenizers; counting bytes rather than characters keeps the
estimate from collapsing on non-Latin text (a CJK character is three bytes and roughly one token).
No tokenizer is needed, and the estimate is the same on every machine, so chunk boundaries (and
therefore call keys) never depend on which tokenizer happens to be installed.

Everything here is a pure function of the runs and the settings: the same runs and settings cut
and pack the same way on every machine and every re-run, so stored answers replay by their keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from nexus_assets.core.fingerprint import canonical_json
from nexus_assets.core.models import Node, Run
from nexus_assets.ingest.scope import node_text

# The context window assumed when NEXUS_LLM_CONTEXT_TOKENS is not set: today's hosted models
# (GPT-4o/4.1, Claude, Gemini, Llama 3.1 and its kin) read at least 128k tokens.
DEFAULT_CONTEXT_TOKENS = 128_000
# The most source text one request carries, whatever the context: beyond it the fixed prefix is
# already under 5% of what is read, and one failed request would waste more.
MAX_FRAGMENT_TOKENS = 16_000
# A reply must have room to quote this share of what its request reads (a catch-all topic quotes
# much of a dense conversation): a reply cut off at max_output_tokens fails the whole request.
QUOTED_SHARE = 4
# Kept free of source text in the context: the system prompt with its topics, and the framing.
PREFIX_RESERVE_TOKENS = 2_000
# What a chunk was capped at before prompt v3 (NEXUS_LLM_TOKEN_BUDGET's old default); extractions
# made under it are still replayed (`OpenAIExtractor.legacy_identities`).
LEGACY_TOKEN_BUDGET = 3000
# A reply's length limit when NEXUS_LLM_MAX_OUTPUT_TOKENS is not set (LLMConfig.max_output_tokens).
DEFAULT_MAX_OUTPUT_TOKENS = 2048


def budget_for_context(context_tokens: int, max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS) -> int:
    """Source tokens per request for a model that reads `context_tokens` and answers up to
    `max_output_tokens`: what the context leaves once the prefix and the reply are reserved, no
    more than a reply can quote a quarter of (QUOTED_SHARE x max_output_tokens), and no more than
    MAX_FRAGMENT_TOKENS; at least 256."""
    room = context_tokens - max_output_tokens - PREFIX_RESERVE_TOKENS
    return max(256, min(MAX_FRAGMENT_TOKENS, QUOTED_SHARE * max_output_tokens, room))


DEFAULT_TOKEN_BUDGET = budget_for_context(DEFAULT_CONTEXT_TOKENS)


def _whole(environ: Mapping[str, str], name: str) -> int | None:
    text = environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{name}={text!r} is not a whole number of at least 1")
    return value


def token_budget_from_env(environ: Mapping[str, str]) -> int:
    """Source tokens per request from `environ` (`Settings.as_env()`): NEXUS_LLM_TOKEN_BUDGET when
    set, else what the model's context (NEXUS_LLM_CONTEXT_TOKENS, default 128000) and reply limit
    (NEXUS_LLM_MAX_OUTPUT_TOKENS, default 2048) allow (`budget_for_context`). ValueError unless
    each is a whole number of at least 1."""
    explicit = _whole(environ, "NEXUS_LLM_TOKEN_BUDGET")
    context = _whole(environ, "NEXUS_LLM_CONTEXT_TOKENS")
    output = _whole(environ, "NEXUS_LLM_MAX_OUTPUT_TOKENS")
    if explicit is not None:
        return explicit
    return budget_for_context(context or DEFAULT_CONTEXT_TOKENS, output or DEFAULT_MAX_OUTPUT_TOKENS)


# Runs asked together: the extract step hands the extractor this many runs at a time, and
# requests are packed within them (`nexus plan` packs the same way, so it counts what is sent).
RUNS_PER_EXTRACTION = 200


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 4)


def _bytes(value: object) -> int:
    return len(canonical_json(value).encode("utf-8", "surrogatepass"))


# A node's handle ("r12n345") is at most this long in a request: sizes are counted with it, so a
# window's size never depends on where in a request it lands.
HANDLE_BYTES = 10
# One run's list in a fragment, with its separator: [...],
RUN_ENVELOPE_BYTES = len("[],")
# The fragment's own envelope: {"runs":[...]}
FRAGMENT_ENVELOPE_BYTES = len('{"runs":[]}')


def entry_bytes(node_type: str, text: str) -> int:
    """Bytes of one node as a request shows it ({"node", "text", "type"}), with its separator."""
    return _bytes({"node": "", "text": text, "type": node_type}) + HANDLE_BYTES + 1


def chunk_nodes(run: Run, nodes: list[Node], *, token_budget: int) -> list[list[Node]]:
    """Consecutive groups of `nodes` (order kept) whose rendered fragment stays within
    `token_budget` estimated tokens. A node is never split; a node too large on its own
    becomes a chunk by itself. Nodes that are not strings in the run are dropped, as the
    fragment would drop them anyway.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget must be at least 1, got {token_budget}")
    sizes, kept = [], []
    for node in nodes:
        text = node_text(run, node)
        if text is None:
            continue
        kept.append(node)
        sizes.append(entry_bytes(node.node_type, text))
    capacity = token_budget * 4 - FRAGMENT_ENVELOPE_BYTES - RUN_ENVELOPE_BYTES
    return [[kept[i] for i in group] for group in pack(sizes, capacity)]


def window_bytes(run: Run, nodes: Sequence[Node], topics_of: Mapping[str, Sequence[str]] | None = None) -> int:
    """Bytes one window takes in a request's fragment (its run's list included). `topics_of` (by
    path): the topics a node may be quoted for, where it lists them (`,"topics":[...]`)."""
    total = RUN_ENVELOPE_BYTES
    for n in nodes:
        text = node_text(run, n)
        if text is None:
            continue
        total += entry_bytes(n.node_type, text)
        if topics_of is not None and n.path in topics_of:
            total += len(',"topics":') + _bytes(list(topics_of[n.path]))
    return total


def pack_windows(sizes: Sequence[int], *, token_budget: int) -> list[list[int]]:
    """Windows (by their `window_bytes`, in the order given) grouped into requests: several small
    ones share a request up to `token_budget`; a full window has one to itself."""
    return pack(sizes, token_budget * 4 - FRAGMENT_ENVELOPE_BYTES)


def pack(sizes: Sequence[int], capacity: int) -> list[list[int]]:
    """Consecutive groups of the indices of `sizes`, in order, each group's total at most
    `capacity` (an item larger than `capacity` is a group by itself). Greedy and pure: the
    groups depend on the sizes and the capacity alone."""
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, size in enumerate(sizes):
        if current and total + size > capacity:
            groups.append(current)
            current, total = [], 0
        current.append(i)
        total += size
    if current:
        groups.append(current)
    return groups
