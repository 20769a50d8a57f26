"""A throwaway Nexus project on disk (runs, topics, vault) for tests that use real files."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# The test package and its data, wherever a test module sits below it.
TESTS = REPO / "nexus_assets_tests"
FIXTURES = TESTS / "fixtures"
SAMPLE_RUNS = REPO / "data" / "runs"
SAMPLE_TOPICS = REPO / "data" / "topics"
SAMPLE_GOLD = REPO / "data" / "gold"  # named by the sample topics' `quality:` as ../gold/


@dataclass
class Project:
    root: Path
    # A PostgreSQL vault's address; None: the embedded DuckDB file inside the project.
    vault_url: str | None = None

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def topics(self) -> Path:
        return self.root / "topics"

    @property
    def db(self) -> Path | str:
        return self.vault_url or self.root / "vault.duckdb"

    def cli_args(self) -> list[str]:
        return ["--db", str(self.db)]

    def sync_args(self, *topics: str) -> list[str]:
        args = ["--db", str(self.db), "sync", "--runs-dir", str(self.runs), "--topics-dir", str(self.topics)]
        for t in topics:
            args += ["--topic", t]
        return args

    def write_run(self, name: str, document: object) -> Path:
        path = self.runs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, ensure_ascii=False, indent=1), encoding="utf-8")
        return path

    def write_bytes(self, name: str, data: bytes) -> Path:
        path = self.runs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    def write_topic(self, topic_id: str, *, keywords: list[str], state: str = "ACTIVE", ordering_rule: str = "chronological",
                    node_types: list[str] | None = None, min_relevance: float | None = 0.0, include_hidden: bool = False) -> Path:
        """A topic file. `min_relevance` 0 keeps every keyword statement: the tests that use this
        helper are about other things, on generated text; relevance has its own (test_worth_keeping)."""
        self.topics.mkdir(parents=True, exist_ok=True)
        policy: dict = {"scope_description": f"Everything about {topic_id}.", "required_keywords": keywords}
        if node_types:
            policy["target_node_types"] = node_types
        path = self.topics / f"{topic_id}.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "topic_id": topic_id,
                    "display_name": topic_id.replace("-", " ").title(),
                    "extraction_policy": policy,
                    "ordering_rule": ordering_rule,
                    "state": state,
                    **({"min_relevance": min_relevance} if min_relevance is not None else {}),
                    **({"include_hidden": True} if include_hidden else {}),
                }
            ),
            encoding="utf-8",
        )
        return path


def sample_project(root: Path, vault_url: str | None = None) -> Project:
    project = Project(root, vault_url)
    shutil.copytree(SAMPLE_RUNS, project.runs)
    shutil.copytree(SAMPLE_TOPICS, project.topics)
    if SAMPLE_GOLD.is_dir():
        shutil.copytree(SAMPLE_GOLD, project.root / "gold")
    return project


def nexus_run(run_id: str, messages: list[tuple[str, str]], *, status: str = "CLOSED", start: str = "2026-01-01T00:00:00Z") -> dict:
    return {
        "run_id": run_id,
        "status": status,
        "started_at": start,
        "messages": [
            {"role": role, "content": text, "timestamp": f"{start[:10]}T00:{i:02d}:00Z"} for i, (role, text) in enumerate(messages)
        ],
    }
