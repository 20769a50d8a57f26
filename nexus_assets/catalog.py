"""`Catalog`: the vault's listings (plain rows, no models), opened with every upgrade an old vault
may need: what the shells open for `nexus topics` and the like."""

from __future__ import annotations

from nexus_assets.upgrades import BACKFILLS
from nexus_assets.vault.catalog import BaseCatalog


class Catalog(BaseCatalog):
    backfills = BACKFILLS
