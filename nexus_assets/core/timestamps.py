"""The one reading of a timestamp: every reader of a format stores it so, and canonical order
(resolve/order.py) sorts by it as a string. Below both, so a reader never imports the resolver."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def normalize_timestamp(value: Any) -> str | None:
    """ISO 8601 UTC with microseconds, so timestamps from every format sort as strings.

    Accepts ISO strings (with or without offset; naive ones are taken as UTC) and epoch seconds.
    Anything unreadable is treated as missing rather than guessed.
    """
    if value is None or isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            moment = datetime.fromtimestamp(float(value), tz=timezone.utc)
        elif isinstance(value, str) and value.strip():
            text = value.strip()
            if text.endswith(("Z", "z")):
                text = text[:-1] + "+00:00"
            moment = datetime.fromisoformat(text)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=timezone.utc)
        else:
            return None
        moment = moment.astimezone(timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None
    # Zero-padded year by hand: strftime("%Y") gives "999" for year 999, which sorts after "2024".
    return f"{moment.year:04d}-{moment:%m-%dT%H:%M:%S.%f}Z"
