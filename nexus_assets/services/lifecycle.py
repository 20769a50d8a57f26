"""The topic lifecycle (docs/cli.md): `nexus discover` proposes DRAFT topic files from recent runs,
`nexus activate` is the human gate DRAFT → ACTIVE, `nexus seal` ACTIVE → LOCKED once the gates pass.
The shell opens the vault (writable), parses and prints; what each step does with it is here.

Refusals: `LifecycleRefused` is bad usage or input (exit 2); `DiscoveryFailed` (an LLM reply that
cannot be used) and `SealFailed` (a gate failed, with the failures as data) are work that ran and
was refused (exit 1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from nexus_assets.discovery.records import dropped_topics
from nexus_assets.discovery.step import (
    DiscoveryError,
    DiscoveryReport,
    discover_embedded,
    discover_llm,
    recent_runs,
)
from nexus_assets.extract.registry import extractor_kind
from nexus_assets.lifecycle.step import (
    LifecycleError,
    SealRefused,
    SealResult,
    topic_history,
)
from nexus_assets.lifecycle.step import activate as activate_topic
from nexus_assets.lifecycle.step import seal as seal_topic
from nexus_assets.llm.client import LLMConfig, LLMConfigError, LLMFatalError


class LifecycleRefused(ValueError):
    """Bad usage or input: no runs to look at, an unusable LLM setting, a topic that cannot move."""


class DiscoveryFailed(RuntimeError):
    """The LLM's proposals could not be used; nothing was written."""


class SealFailed(RuntimeError):
    """A seal gate failed; `data` says which, for --json."""

    def __init__(self, refused: SealRefused):
        super().__init__(str(refused))
        self.data = {"topic_id": refused.topic_id, "sealed": False, "failed_gates": [f.as_dict() for f in refused.failures]}


def history(vault, topic_id: str) -> list[dict]:
    """The topic's state transitions, oldest first, their times as text."""
    return [{**h, "changed_at": str(h["changed_at"])} for h in topic_history(vault, topic_id)]


def runs_to_discover(runs_dir: Path, recent: int) -> list:
    """The `recent` most recent readable runs; refused when there are none."""
    runs = recent_runs(runs_dir, recent)
    if not runs:
        raise LifecycleRefused(f"no readable runs in {runs_dir}; nothing to discover topics from")
    return runs


def discover(
    vault, runs: list, topics_dir: Path, *, extractor: str, env: Callable[[], Mapping[str, str]], actor: str,
    max_proposals: int | None = None,
) -> DiscoveryReport:
    """DRAFT topic files proposed from `runs` into `topics_dir`, each recorded in the vault. `env` is
    asked only when the extractor calls an endpoint (the LLM's settings)."""
    # Topics the vault knows, and rejected proposals (a DRAFT whose file was deleted, dropped by
    # a sync or not yet), are never proposed again.
    recorded, rejected = vault.topics.all(), dropped_topics(vault)
    if extractor_kind(extractor).calls_endpoint:
        try:
            config = LLMConfig.from_env(env())
        except LLMConfigError as exc:
            raise LifecycleRefused(str(exc)) from None
        try:
            report, written = discover_llm(
                runs, topics_dir, config=config, store=vault.llm_calls, recorded=recorded, rejected=rejected,
                max_proposals=max_proposals,
            )
        except LLMFatalError as exc:
            raise LifecycleRefused(str(exc)) from None
        except DiscoveryError as exc:
            raise DiscoveryFailed(str(exc)) from None
    else:
        report, written = discover_embedded(runs, topics_dir, recorded=recorded, rejected=rejected, max_proposals=max_proposals)
    by_id = {t.topic_id: t for t in written}
    for row in report.written:
        vault.topics.record_topic(by_id[row["topic_id"]], str(Path(row["path"]).resolve()), actor=actor)
    return report


def activate(vault, topics_dir: Path, topic_id: str, *, actor: str) -> dict:
    """DRAFT → ACTIVE (the file's state line rewritten): the topic, its states and its transitions."""
    try:
        done = activate_topic(vault, topics_dir, topic_id, actor=actor)
    except LifecycleError as exc:
        raise LifecycleRefused(str(exc)) from None
    return {
        "topic_id": done.topic_id,
        "state": done.state,
        "previous_state": done.previous_state,
        "file": done.path,
        "file_rewritten": done.file_rewritten,
        "transitions": history(vault, topic_id),
    }


def seal(vault, topic_id: str, *, actor: str, topics_dir: Path, runs_dir: Path) -> tuple[SealResult, dict]:
    """ACTIVE → LOCKED once every gate passes: the result and its data with the transitions."""
    try:
        result = seal_topic(vault, topic_id, actor=actor, topics_dir=topics_dir, runs_dir=runs_dir)
    except SealRefused as exc:
        raise SealFailed(exc) from None
    except LifecycleError as exc:
        raise LifecycleRefused(str(exc)) from None
    return result, {**result.as_dict(), "transitions": history(vault, topic_id)}
