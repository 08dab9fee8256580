"""``create_app``: the dashboard and the API as one ASGI application."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp

from rsched import Client, InvalidArgument, RschedError, Settings, __version__
from rsched._core.errors import CsrfError
from rsched.web import _api, _calendar_pages, _pages, _schedule_form
from rsched.web._errors import error_body, status_of
from rsched.web._sdk import Sdk
from rsched.web._security import Auth, Guard, Policy

_STATIC = Path(__file__).parent / "static"


def create_app(
    client: Client | None = None,
    *,
    settings: Settings | None = None,
    read_only: bool = False,
    base_path: str = "",
    auth: str | None = None,
    token: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
    refresh_s: float = 5.0,
    dependencies: Sequence[Any] = (),
) -> ASGIApp:
    """The rsched dashboard and HTTP API (``/api/v1``) as an ASGI app.

    ``client`` is used as it is (the caller closes it); without one, the app opens its own
    from ``settings`` (default: ``RSCHED_*`` variables) and closes it when the server stops.
    ``read_only`` hides every action and answers 403 to every write. ``base_path`` serves
    everything under that path (``/rsched``); to mount the app inside another ASGI app, leave
    it empty and mount it (``parent.mount("/rsched", create_app(...))``): links follow the
    mount point. ``auth`` (``"user:password"``) and/or ``token`` (bearer) require
    authentication; ``allowed_hosts`` limits the accepted ``Host`` names (None: any).
    ``refresh_s`` is how often an open page reloads its live part. ``dependencies``
    (``Depends(...)`` of the application the app is mounted in) guard every page and route, as
    FastAPI runs them for the application's own (``rsched.contrib.fastapi``).
    Raises ValueError for a malformed ``auth`` or ``base_path``.
    """
    credentials = Auth(basic=auth, token=token)
    base = base_path.rstrip("/")
    if base and (not base.startswith("/") or "//" in base):
        raise ValueError(f"base_path must start with '/', e.g. /rsched (got {base_path!r})")
    owns = client is None
    sdk = Sdk(client if client is not None else Client.from_settings(settings or Settings()))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if owns:
            await sdk.client.aclose()

    app = FastAPI(
        title="rsched",
        version=__version__,
        description="Schedules, queues, dead letters and jobs of one rsched deployment.",
        openapi_url="/api/v1/openapi.json",
        docs_url=None,  # Swagger UI and ReDoc load their assets from a CDN
        redoc_url=None,
        separate_input_output_schemas=False,
        lifespan=lifespan,
        dependencies=list(dependencies),
    )
    app.state.sdk = sdk
    app.state.read_only = read_only
    app.state.refresh_s = refresh_s
    app.state.auth = credentials
    app.state.cache = _pages._Cache(ttl_s=2.0)
    app.state.older_runs = _pages.OlderRuns()
    app.include_router(_api.router)
    app.include_router(_pages.router)
    app.include_router(_schedule_form.router)
    app.include_router(_calendar_pages.router)
    app.mount("/static", StaticFiles(directory=_STATIC), name="static")

    @app.exception_handler(RschedError)
    async def rsched_error(request: Request, exc: RschedError) -> Response:
        if isinstance(exc, CsrfError):
            status = 403
            body: dict[str, Any] = {
                "error": "CSRFError",
                "message": str(exc),
                "field": "csrf_token",
            }
        else:
            status, body = status_of(exc), error_body(exc)
        if _is_api(request):
            return JSONResponse(body, status_code=status)
        return _pages.render(request, "error.html", status, error=body)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        err = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        names = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
        field = ".".join(names) or "body"
        return await rsched_error(request, InvalidArgument(field, str(err.get("msg"))))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        names = {404: "NotFound", 405: "MethodNotAllowed"}
        error = names.get(exc.status_code, "HTTPError")
        body = {"error": error, "message": str(exc.detail), "field": None}
        if _is_api(request):
            return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)
        return _pages.render(request, "error.html", exc.status_code, error=body)

    app.add_middleware(
        Guard,
        policy=Policy(
            credentials,
            read_only,
            tuple(allowed_hosts) if allowed_hosts is not None else None,
        ),
    )
    if not base:
        return app
    outer = FastAPI(openapi_url=None, docs_url=None, redoc_url=None, lifespan=lifespan)

    @outer.get("/", include_in_schema=False)
    async def to_base() -> Response:
        return RedirectResponse(base + "/", status_code=307)

    outer.mount(base, app)
    return outer


def _is_api(request: Request) -> bool:
    root = str(request.scope.get("root_path", ""))
    return request.url.path[len(root) :].startswith("/api/")
