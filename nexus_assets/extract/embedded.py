"""The embedded extractor (DESIGN §5): offline and deterministic.

It returns whole sentences of in-scope nodes that contain a required keyword. It speaks the same
untrusted pointer language an LLM does and goes through the same gate.
"""

from __future__ import annotations

from nexus_assets.core.models import Run, Topic
from nexus_assets.extract.scope import in_scope_nodes, keyword_pattern
from nexus_assets.extract.sentences import sentence_spans

EXTRACTOR_VERSION = "embedded-v1"


def extract_embedded(topic: Topic, run: Run) -> list[dict]:
    policy = topic.extraction_policy
    pattern = keyword_pattern(policy.required_keywords or ())
    pointers = []
    for node, text in in_scope_nodes(policy, run, topic):
        for start, end in sentence_spans(text):
            sentence = text[start:end]
            if pattern is None or pattern.search(sentence):
                pointers.append({"topic_id": topic.topic_id, "json_path": node.path, "verbatim_quote": sentence})
    return pointers
