"""rsched's web dashboard and HTTP API (the ``web`` extra: ``pip install 'rsched[web]'``).

``rsched web`` serves them; :func:`create_app` returns the ASGI app to serve or mount yourself.
"""

from __future__ import annotations

try:
    from rsched.web._app import create_app
except ModuleNotFoundError as exc:
    if exc.name not in ("fastapi", "starlette", "jinja2", "uvicorn"):
        raise
    raise ModuleNotFoundError(
        f"rsched.web needs the web extra ({exc.name} is not installed): pip install 'rsched[web]'",
        name=exc.name,
    ) from None

__all__ = ("create_app",)
