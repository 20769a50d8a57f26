"""Runs pushed live (`PUT/POST /v1/runs/...`, the MCP `remember` tool): what an agent says is
written as a run file under the runs folder first (`ingest/push.py`), so the files stay the
source of truth; a sync of the ACTIVE topics that read it follows (docs/agents.md)."""

from __future__ import annotations

from pathlib import Path

from nexus_assets.ingest.push import (  # noqa: F401 (the shells take the push and its refusals from here)
    RUN_ID_RULE,
    BadPush,
    MessageConflict,
    PushError,
    PushResult,
    RunClosed,
    RunNotFound,
    RunTooLarge,
    append_messages,
    close_run,
    put_run,
)
from nexus_assets.topics.selection import SyncInputError, topics_reading


def topics_to_sync(topics_dir: str | Path, pushed: PushResult) -> list[str]:
    """The ACTIVE topics that read a pushed run; none when the topics folder is one a sync cannot
    use (the push is kept, a sync will say why)."""
    try:
        return topics_reading(Path(topics_dir), pushed.run_id, str(pushed.path))
    except SyncInputError:
        return []
