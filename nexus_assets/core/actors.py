"""Who did something, as the history records it (`topic_transitions`, tombstones, verdicts)."""

from __future__ import annotations

import getpass


def user_actor(how: str, user: str | None = None) -> str:
    """Who did it and through what, for `topic_transitions`: e.g. "alice (nexus activate)".
    `user`: $USER as the shell's settings give it (`settings.user()`), else the login name."""
    try:
        user = user or getpass.getuser()
    except (KeyError, OSError):
        user = "unknown user"
    return f"{user} ({how})"
