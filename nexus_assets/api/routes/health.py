from __future__ import annotations

from fastapi import APIRouter

from nexus_assets.api.deps import ConfigDep
from nexus_assets.queries import open_read
from nexus_assets.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/v1/health", response_model=Health)
def health(config: ConfigDep) -> Health:
    """The server answers; the vault it serves and its schema version (0: no vault yet)."""
    from nexus_assets.queries import NotFound
    from nexus_assets.vault.migrations import schema_version

    try:
        with open_read(config.db) as vault:
            version = schema_version(vault.conn)
    except NotFound:
        version = 0
    return Health(status="ok", vault=str(config.db), schema_version=version)
