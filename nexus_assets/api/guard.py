"""The API's door, in front of every route (the docs, the OpenAPI document and /mcp included):
the bearer token when one is set, the Host header on loopback, and bounded requests."""

from __future__ import annotations

import hmac
import json
from http import HTTPStatus

from nexus_assets.api.config import ApiConfig, is_loopback

_BODY_METHODS = {"POST", "PUT", "PATCH"}


def _problem(status: int, detail: str, headers: list[tuple[bytes, bytes]] = ()):
    body = json.dumps({"type": "about:blank", "title": HTTPStatus(status).phrase, "status": status, "detail": detail}).encode()

    async def respond(scope, receive, send) -> None:
        await send({
            "type": "http.response.start", "status": status,
            "headers": [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode()), *headers],
        })
        await send({"type": "http.response.body", "body": body})

    return respond


class Guard:
    """Pure ASGI, so a refused request never reaches a route, and streaming (/mcp) is untouched."""

    def __init__(self, app, config: ApiConfig) -> None:
        self.app = app
        self.config = config
        self._token = config.token.encode("utf-8") if config.token else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        refused = self._refuse(scope, headers)
        if refused is not None:
            await refused(scope, receive, send)
            return
        if scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        limit = self.config.max_body_bytes
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _problem(413, f"the request body is larger than {limit} bytes (NEXUS_API_MAX_BODY_BYTES)")(scope, receive, send)
            return
        # Read the (bounded) body first, then hand it on: a chunked body cannot outgrow the limit either.
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _problem(413, f"the request body is larger than {limit} bytes (NEXUS_API_MAX_BODY_BYTES)")(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _refuse(self, scope, headers: dict[str, str]):
        if self._token is not None:
            given = headers.get("authorization", "")
            scheme, _, credential = given.partition(" ")
            # compare_digest: the time taken says nothing about how much of the token was right.
            if scheme.lower() != "bearer" or not hmac.compare_digest(credential.strip().encode("utf-8"), self._token):
                return _problem(401, "this API needs `Authorization: Bearer <NEXUS_API_TOKEN>`", [(b"www-authenticate", b"Bearer")])
        else:
            # Without a token only this machine may call, and only by a loopback name: a web page
            # that rebinds its own domain to 127.0.0.1 (DNS rebinding) is refused here.
            host = headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if not is_loopback(name):
                return _problem(400, f"Host {host!r} is not this machine's loopback address; set NEXUS_API_TOKEN to serve other hosts")
        if len(scope.get("query_string", b"")) > self.config.max_query_chars:
            return _problem(414, f"the query string is longer than {self.config.max_query_chars} characters")
        return None
