"""Where the project's Dagster instance lives, for the CLI and for forgetting alike."""

from __future__ import annotations

import os
from pathlib import Path


def project_dagster_home(db: str | Path) -> Path | None:
    """The Dagster instance `nexus sync` shares with `dagster dev`: $DAGSTER_HOME, else the
    project's `dagster_home/` (it ships a dagster.yaml) beside the vault or its data folder, so a
    sync run in the project shows in the UI. None: an ephemeral instance (a vault elsewhere)."""
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"])
    vault = Path(db).resolve()
    for root in (vault.parent, vault.parent.parent):
        if (root / "dagster_home" / "dagster.yaml").is_file():
            return root / "dagster_home"
    return None
