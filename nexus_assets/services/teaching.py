"""Teaching, whichever shell asks (CLI, API, MCP, viewer): `keep` or `drop` a brick. The brick's
verbatim text joins its topic file's `examples` (`topic_file.py`), the vault records who and why
(`teachings`), and the next sync selects with it (docs/quality.md, `extract/selection.py`). The shells
parse and print; every rule is here.

Refused (`TeachingRefused`, HTTP 409 / exit 2) on a sealed topic (its bricks are FINAL and never
leave) or a topic file that cannot be written; an unknown brick is `NotFound`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nexus_assets.services.queries import NotFound, find_brick
from nexus_assets.teaching.topic_file import TopicFileUnwritable, add_example

Verdict = Literal["keep", "drop"]
SEALED = ("SEALING", "LOCKED")


class TeachingRefused(RuntimeError):
    """The judgement cannot be taken: a sealed (FINAL) topic, or a topic file that cannot be written."""


@dataclass(frozen=True)
class Taught:
    topic_id: str
    brick_id: str
    verdict: Verdict
    content: str
    reason: str | None
    actor: str
    topic_file: str
    file_changed: bool  # False: the text was an example of that kind already
    examples: dict[str, int]

    def as_json(self) -> dict:
        return {
            "topic_id": self.topic_id, "brick_id": self.brick_id, "verdict": self.verdict, "content": self.content,
            "reason": self.reason, "actor": self.actor, "topic_file": self.topic_file,
            "file_changed": self.file_changed, "examples": self.examples,
            "next": "the next `nexus sync` selects with it",
        }


def teach(vault, topics_dir: Path | str | None, brick_id: str, verdict: Verdict, *, reason: str | None = None,
          actor: str = "cli") -> Taught:
    """Add the brick's text to its topic's examples and record the judgement. `vault`: a writable
    `Vault`; `topics_dir`: where the topic files are (None: the file the vault recorded)."""
    from nexus_assets.topics.files import find_topic, read_topic_file

    if verdict not in ("keep", "drop"):
        raise ValueError(f"verdict {verdict!r} is not keep or drop")
    if reason is not None and not reason.strip():
        reason = None
    full_id = find_brick(vault, brick_id)
    (brick,) = vault.bricks.select(brick_ids=[full_id])
    topic_id = brick.topic_id
    state = vault.topic_state(topic_id)
    if state in SEALED:
        raise TeachingRefused(
            f"topic {topic_id!r} is {state}: its bricks are FINAL and its definition is sealed; teach a new topic instead"
        )
    found = find_topic(Path(topics_dir), topic_id) if topics_dir is not None else None
    if found is None:
        recorded = vault.topics.topic_source_file(topic_id)
        if recorded and Path(recorded).is_file():
            found = read_topic_file(Path(recorded))
    if found is None or found.topic is None or found.topic.topic_id != topic_id:
        where = f" in {topics_dir}" if topics_dir is not None else ""
        raise TeachingRefused(f"no valid topic file defines {topic_id!r}{where}; the example has nowhere to go")
    try:
        changed = add_example(found.path, verdict, brick.content)
    except TopicFileUnwritable as exc:
        raise TeachingRefused(str(exc)) from None
    now = read_topic_file(found.path)
    if now.topic is None:
        raise TeachingRefused(now.problem or f"topic file {found.path}: no longer a valid topic")
    with vault.transaction():
        # The vault holds the definition the file now says, so `nexus topics` counts the example at once.
        topic = vault.topics.record_topic(now.topic, str(found.path.resolve()), actor=f"{actor}: {verdict}")
        vault.teaching.record_teaching(
            topic_id=topic_id, brick_id=full_id, verdict=verdict, content=brick.content, reason=reason,
            actor=actor, topic_file=str(found.path),
        )
    examples = topic.examples
    counts = {"keep": len(examples.keep) if examples else 0, "drop": len(examples.drop) if examples else 0}
    return Taught(topic_id, full_id, verdict, brick.content, reason, actor, str(found.path), changed, counts)


def teach_in(db: str | Path, topics_dir: Path | str | None, brick_id: str, verdict: Verdict, **kwargs) -> Taught:
    """`teach` on the vault at `db` (opened for writing; it must exist)."""
    from nexus_assets.store import Vault
    from nexus_assets.vault.address import vault_exists

    if not vault_exists(db):
        raise NotFound(f"no vault at {db}; run `nexus sync` first, or pass --db PATH")
    with Vault.open(db) as vault:
        return teach(vault, topics_dir, brick_id, verdict, **kwargs)
