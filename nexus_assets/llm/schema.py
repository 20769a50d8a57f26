"""Reply JSON schemas derived from the pydantic models that describe the replies, in the form chat
servers take them: nested models inlined (llama.cpp's grammar converter and some proxies do not
follow `$ref`) and pydantic's generated titles left out."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def reply_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any, *, properties: bool = False) -> Any:
        if isinstance(node, list):
            return [inline(v) for v in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return inline(defs[node["$ref"].rsplit("/", 1)[-1]])
        # Under "properties" the keys are field names, so a field called "title" stays.
        return {k: inline(v, properties=k == "properties") for k, v in node.items() if properties or k != "title"}

    return inline(schema)
