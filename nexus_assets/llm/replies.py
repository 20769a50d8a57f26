"""Reading a model's reply: the JSON it carries, however it is wrapped, and the response_format
ladder a request tries, strictest first."""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from nexus_assets.llm.config import ReplyNotJSON
from nexus_assets.llm.prompt import POINTER_SCHEMA

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\r?\n?(.*?)```", re.DOTALL)


def _pointer_list(value: Any) -> list[Any] | None:
    """The pointer list a decoded JSON value carries, or None when it is not a pointer reply."""
    if isinstance(value, dict):
        if "extracted_pointers" in value:
            pointers = value["extracted_pointers"]
            if pointers is None:
                return []
            if isinstance(pointers, list):
                return pointers
            raise ReplyNotJSON(f"'extracted_pointers' is a {type(pointers).__name__}, not a list")
        # Small models often answer one pointer without the envelope.
        if ("node" in value or "json_path" in value) and "verbatim_quote" in value:
            return [value]
        return None
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return value
    return None


def parse_json_reply(
    text: str | None, *, extract: Callable[[Any], list[Any] | None], embedded: Callable[[Any], bool], what: str
) -> list[Any]:
    """The items a model reply carries, read tolerantly: plain JSON, JSON in ``` fences (after any
    <think> block), or the first JSON value in prose that `embedded` accepts. `extract` maps a
    decoded value to its items (None: not this kind of reply). Items come back unchecked; anything
    else raises ReplyNotJSON. Used for pointer replies and topic-discovery replies alike."""
    if text is None or not text.strip():
        raise ReplyNotJSON("the reply is empty")
    body = _THINK.sub("", text).strip()  # reasoning models prepend their thoughts
    for candidate in [body] + [m.group(1).strip() for m in _FENCE.finditer(body)]:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        found = extract(value)
        if found is not None:
            return found
    # JSON embedded in prose: raw_decode from each "{" or "[" copes with brackets inside strings.
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[{\[]", body):
        try:
            value, _ = decoder.raw_decode(body, match.start())
        except ValueError:
            continue
        if embedded(value):
            found = extract(value)
            if found is not None:
                return found
    snippet = " ".join(body.split())[:120]
    raise ReplyNotJSON(f"the reply holds no {what} JSON: {snippet!r}")


def _embedded_pointers(value: Any) -> bool:
    if isinstance(value, dict):
        return "extracted_pointers" in value
    return isinstance(value, list) and bool(value) and all(isinstance(i, dict) and ("node" in i or "json_path" in i) for i in value)


def parse_reply(text: str | None) -> list[Any]:
    """The raw pointers in a model reply: a JSON object, JSON in ``` fences, the first JSON object
    with `extracted_pointers` embedded in prose, or a bare list of pointer objects. Items are
    returned as they came (the gate judges them); anything else raises ReplyNotJSON."""
    return parse_json_reply(text, extract=_pointer_list, embedded=_embedded_pointers, what="pointer")


def response_formats(schema: dict[str, Any], name: str) -> tuple[tuple[str, dict[str, Any] | None], ...]:
    """Ladder of output constraints for `schema`, strictest first; servers that refuse one get the next."""
    return (
        ("json_schema", {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": False}}),
        # llama.cpp takes a schema this way (FACTS.md); other servers ignore the extra key.
        ("json_object", {"type": "json_object", "schema": schema}),
        ("none", None),
    )


_RESPONSE_FORMATS = response_formats(POINTER_SCHEMA, "pointers")

POINTER_FORMATS = _RESPONSE_FORMATS
