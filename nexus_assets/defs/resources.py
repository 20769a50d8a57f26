"""Resources: where the inputs live, which extractor points, and the vault connection."""


import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Literal

import dagster as dg
from dagster_duckdb import DuckDBResource
from pydantic import Field

from nexus_assets.extractors import EmbeddedExtractor, Extractor
from nexus_assets.runfiles import Limits
from nexus_assets.vault import Vault


class NexusSettings(dg.ConfigurableResource):
    """Where run files and topic files live."""

    runs_dir: str = "data/runs"
    topics_dir: str = "data/topics"
    open_after: str | None = Field(
        default=None,
        description="Export conversations updated at or after this ISO time are treated as OPEN.",
    )
    max_run_file_bytes: int | None = Field(default=None, description="Default: NEXUS_MAX_RUN_FILE_BYTES or 32 MiB.")
    max_json_depth: int | None = Field(default=None, description="Default: NEXUS_MAX_JSON_DEPTH or 64.")
    progress: bool = Field(default=False, description="Print one-line progress to stderr (the CLI sets it).")

    @property
    def limits(self) -> Limits:
        given = {"max_file_bytes": self.max_run_file_bytes, "max_depth": self.max_json_depth}
        return Limits(**{k: v for k, v in given.items() if v is not None})

    def say(self, context: dg.OpExecutionContext | dg.AssetCheckExecutionContext, message: str) -> None:
        context.log.info(message)
        if self.progress:
            print(f"  {message}", file=sys.stderr, flush=True)

    def path(self, which: str) -> Path:
        return Path(getattr(self, which))


class ExtractorResource(dg.ConfigurableResource):
    """Which extractor points at text. `embedded` is offline and deterministic."""

    backend: Literal["embedded", "openai"] = "embedded"

    def build(self) -> Extractor:
        if self.backend == "embedded":
            return EmbeddedExtractor()
        raise dg.Failure(f"extractor backend {self.backend!r} is not available in this build")


class VaultResource(dg.ConfigurableResource):
    """The DuckDB vault, through dagster-duckdb (which retries while another writer holds the lock)."""

    duckdb: dg.ResourceDependency[DuckDBResource]

    @contextmanager
    def open(self) -> Iterator[Vault]:
        Path(self.duckdb.database).parent.mkdir(parents=True, exist_ok=True)
        with self.duckdb.get_connection() as conn:
            # get_connection does not close on error; a leaked handle would block later opens.
            try:
                yield Vault(conn)
            finally:
                conn.close()
