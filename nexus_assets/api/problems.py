"""Errors as RFC 9457 problem details (`application/problem+json`), never a stack trace."""

from __future__ import annotations

import logging
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from nexus_assets.services.pushing import MessageConflict, PushError, RunClosed, RunNotFound, RunTooLarge
from nexus_assets.services.queries import BadQuery, NotFound
from nexus_assets.services.sync import SyncInputError

MEDIA_TYPE = "application/problem+json"
log = logging.getLogger("nexus.api")


def problem(status: int, detail: str | None = None, *, headers: dict | None = None, **extra) -> JSONResponse:
    body = {"type": "about:blank", "title": HTTPStatus(status).phrase, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def _validation_errors(exc: RequestValidationError) -> list[dict]:
    # Location and message only: pydantic's `input` would echo a (possibly huge) body back.
    return [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()][:20]


def install(app: FastAPI) -> None:
    from nexus_assets.vault.connection import VaultBusy, VaultUnusable

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return problem(exc.status_code, str(exc.detail) if exc.detail else None, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        errors = _validation_errors(exc)
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors)
        return problem(422, detail, errors=errors)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound):
        return problem(404, str(exc))

    @app.exception_handler(BadQuery)
    async def bad_query(request: Request, exc: BadQuery):
        return problem(422, str(exc))

    @app.exception_handler(SyncInputError)
    async def bad_sync(request: Request, exc: SyncInputError):
        return problem(422, str(exc))

    from nexus_assets.services.teaching import TeachingRefused

    @app.exception_handler(TeachingRefused)
    async def refused_teaching(request: Request, exc: TeachingRefused):
        return problem(409, str(exc))

    @app.exception_handler(PushError)
    async def refused_push(request: Request, exc: PushError):
        status = 409 if isinstance(exc, (RunClosed, MessageConflict)) else 413 if isinstance(exc, RunTooLarge) else 404 if isinstance(exc, RunNotFound) else 422
        return problem(status, str(exc))

    @app.exception_handler(VaultBusy)
    async def busy(request: Request, exc: VaultBusy):
        return problem(503, str(exc), headers={"Retry-After": "5"})

    @app.exception_handler(VaultUnusable)
    async def unusable(request: Request, exc: VaultUnusable):
        return problem(503, str(exc))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        # The traceback goes to the server's log; the client gets one line and no internals.
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return problem(500, "the server failed on this request; its log has the details")
