"""rsched in a FastAPI app: one Client for the whole app, and the dashboard mounted under a path
behind the app's own authentication (docs/fastapi.md).

```python
from typing import Annotated
from fastapi import Depends, FastAPI
import rsched
from rsched.contrib.fastapi import Rsched

rs = Rsched()                                   # RSCHED_* settings, or Rsched(settings)
app = FastAPI(lifespan=rs.lifespan)
rs.mount_dashboard(app, "/rsched", dependencies=[Depends(require_admin)])

@app.post("/orders/{order_id}/invoice")
async def invoice(order_id: int, client: Annotated[rsched.Client, Depends(rs.client)]) -> dict:
    done = await client.enqueue("billing.invoice", {"order": order_id})
    return {"job": done.execution_id}
```
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from rsched import Client, Settings
from rsched.web import create_app


class Rsched:
    """One rsched Client for a FastAPI app: opened lazily (no I/O before the first call),
    closed by :meth:`lifespan` when the app stops. Give ``client`` to use one of your own
    (then you close it)."""

    def __init__(self, settings: Settings | None = None, *, client: Client | None = None) -> None:
        self._owns = client is None
        self._client = (
            client if client is not None else Client.from_settings(settings or Settings())
        )

    def client(self) -> Client:
        """The Client, as a FastAPI dependency:
        ``client: Annotated[rsched.Client, Depends(rs.client)]``."""
        return self._client

    @asynccontextmanager
    async def lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        """The app's lifespan (``FastAPI(lifespan=rs.lifespan)``): closes the Client at the
        end. An app with a lifespan of its own enters this one inside it."""
        try:
            yield
        finally:
            if self._owns:
                await self._client.aclose()

    def mount_dashboard(
        self,
        app: FastAPI,
        path: str = "/rsched",
        *,
        dependencies: Sequence[Any] = (),
        read_only: bool = False,
        **options: Any,
    ) -> None:
        """Mount the dashboard and its HTTP API (``<path>/api/v1``) under ``path``, every page
        and route behind ``dependencies`` (the app's own ``Depends(...)``: its login, its
        roles), as FastAPI runs them for the app's own routes. ``read_only`` hides every
        action and refuses every write; ``options`` are those of ``rsched.web.create_app``
        (``auth``, ``token``, ``allowed_hosts``, ``refresh_s``). Raises ValueError for a path
        that does not start with '/'."""
        if not path.startswith("/") or path == "/" or "//" in path:
            raise ValueError(
                f"path must start with '/' and name a path, e.g. /rsched (got {path!r})"
            )
        dashboard = create_app(
            self._client, read_only=read_only, dependencies=dependencies, **options
        )
        app.mount(path.rstrip("/"), dashboard)
