"""What the API and the MCP server are started with: the vault and its folders, the security
settings and the rest of the settings they hand down, made once by the shell that starts the
server (`nexus api`, `nexus mcp`: cli/api.py) from its `Settings` (nexus_assets/settings.py)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from nexus_assets.vault.address import parse_address

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class InsecureBind(ValueError):
    """Asked to listen beyond this machine without a token."""


@dataclass(frozen=True)
class ApiConfig:
    db: str
    runs_dir: str
    topics_dir: str
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = 1_000_000
    max_query_chars: int = 4096  # the whole query string; single parameters have their own bounds
    extractor: str = "embedded"
    no_recall: bool = False
    env: dict = field(default_factory=dict)  # settings by variable (rerank, answer endpoints, NEXUS_VIEWER_URL)
    max_run_bytes: int | None = None  # NEXUS_MAX_RUN_FILE_BYTES for a pushed run (None: the default)
    user: str = "nexus-api"
    mcp: bool = True  # the MCP tools at /mcp
    warm: bool = True  # load the embedding model and each topic's index at start

    def __post_init__(self) -> None:
        # The vault address is parsed once, here where it enters the API and the MCP server.
        object.__setattr__(self, "db", parse_address(self.db))
        if not self.token and not is_loopback(self.host):
            raise InsecureBind(
                f"refusing to listen on {self.host} without a token: anyone who can reach it could read the vault; "
                "set NEXUS_API_TOKEN, or bind 127.0.0.1"
            )
