from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter

from nexus_assets.vault.address import is_postgres
from nexus_assets.api.deps import ConfigDep
from nexus_assets.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/v1/health", response_model=Health)
def health(config: ConfigDep) -> Health:
    """The server answers; the vault it serves and its schema version (0: no vault yet)."""
    from nexus_assets.vault.connection import VaultBusy, connect
    from nexus_assets.vault.migrations import LATEST, schema_version

    if is_postgres(config.db):
        from nexus_assets.catalog import Catalog
        from nexus_assets.vault.postgres.migrations import schema_version as postgres_version

        with Catalog.open(config.db, read_only=True) as vault:
            return Health(status="ok", vault=vault.address.shown, schema_version=postgres_version(vault.conn))
    if not Path(config.db).exists():
        return Health(status="ok", vault=str(config.db), schema_version=0)
    try:
        # A short wait: health must answer while a sync writes (that sync leaves the vault at LATEST).
        conn = connect(config.db, read_only=True, wait_s=0.5)
    except VaultBusy:
        return Health(status="ok", vault=str(config.db), schema_version=LATEST)
    try:
        return Health(status="ok", vault=str(config.db), schema_version=schema_version(conn))
    finally:
        conn.close()
