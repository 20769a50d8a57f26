"""Extractor backends behind one interface: given a topic and a run, return raw pointers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from nexus_assets.core.extract_embedded import EXTRACTOR_VERSION, extract_embedded
from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.core.models import Run, Topic


@dataclass
class Extraction:
    pointers: list
    # False when a call failed: nothing is cached, so the next sync tries again.
    complete: bool = True
    notes: list[str] = field(default_factory=list)


class Extractor(Protocol):
    @property
    def identity(self) -> str:
        """Everything that changes what this extractor returns (name, version, model, prompt)."""

    def extract(self, topic: Topic, run: Run) -> Extraction: ...


class EmbeddedExtractor:
    identity = EXTRACTOR_VERSION

    def extract(self, topic: Topic, run: Run) -> Extraction:
        return Extraction(extract_embedded(topic, run))


def extraction_key(extractor: Extractor, topic: Topic, version_id: str) -> str:
    """Same extractor + same topic scope + same run content = same pointers; no need to ask again."""
    scope = {"topic_id": topic.topic_id, "policy": topic.extraction_policy.model_dump(mode="json")}
    return sha256_hex(canonical_json([extractor.identity, scope, version_id]))
