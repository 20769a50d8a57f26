"""Where the project's Dagster instance lives, for the CLI and for forgetting alike."""

from __future__ import annotations

from pathlib import Path


def project_dagster_home(db: str | Path, dagster_home: str | None) -> Path | None:
    """The Dagster instance `nexus sync` shares with `dagster dev`: $DAGSTER_HOME, else the
    project's `dagster_home/` (it ships a dagster.yaml) beside the vault or its data folder, so a
    sync run in the project shows in the UI. None: an ephemeral instance (a vault elsewhere).
    `dagster_home`: $DAGSTER_HOME as the shell's settings give it (`settings.dagster_home()`)."""
    if dagster_home:
        return Path(dagster_home)
    vault = Path(db).resolve()
    for root in (vault.parent, vault.parent.parent):
        if (root / "dagster_home" / "dagster.yaml").is_file():
            return root / "dagster_home"
    return None
