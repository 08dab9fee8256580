"""rsched's web dashboard and HTTP API (the ``web`` extra: ``pip install 'rsched[web]'``).

``rsched web`` serves them; :func:`create_app` returns the ASGI app to serve or mount yourself.
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401
    import jinja2  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the installed extras
    raise ModuleNotFoundError(
        f"rsched.web needs the web extra ({exc.name} is not installed): pip install 'rsched[web]'",
        name=exc.name,
    ) from None

from rsched.web._app import create_app

__all__ = ("create_app",)
