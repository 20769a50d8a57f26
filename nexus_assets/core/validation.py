"""One way to say what pydantic found wrong with input a person gave us (a run file, an export
conversation, a topic file): `where: what`, `where` written like a path into that input."""

from __future__ import annotations

import re

from pydantic import ValidationError

# pydantic names our private models ("or instance of _Message"); users never see those.
_PRIVATE_MODEL = re.compile(r" or instance of \w+")


def explain(exc: ValidationError, *, whole: str, limit: int = 5) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
        what = _PRIVATE_MODEL.sub("", err["msg"][:1].lower() + err["msg"][1:])
        parts.append(f"{where or whole}: {what}")
    more = f" (+{exc.error_count() - limit} more)" if exc.error_count() > limit else ""
    return "; ".join(parts) + more
