"""rsched.contrib.fastapi: one Client for a FastAPI app (its lifespan closes it) and the dashboard
mounted under a path behind the app's own dependencies, through the ASGI interface."""

from __future__ import annotations

from typing import Annotated

import httpx
import pytest
from fastapi import Depends, FastAPI, Header, HTTPException

import rsched
from rsched._core.settings import Settings
from rsched.contrib.fastapi import Rsched


def require_admin(x_user: Annotated[str | None, Header()] = None) -> str:
    if x_user != "admin":
        raise HTTPException(status_code=401, detail="log in as admin")
    return x_user


def make_app(rs: Rsched) -> FastAPI:
    app = FastAPI(lifespan=rs.lifespan)
    rs.mount_dashboard(app, "/ops/rsched", dependencies=[Depends(require_admin)])

    @app.post("/orders/{order_id}/invoice")
    # The dependency's default form: an Annotated one would name ``rs``, a local, which FastAPI
    # cannot resolve from a string annotation.
    async def invoice(
        order_id: int,
        client: rsched.Client = Depends(rs.client),  # noqa: B008
    ) -> dict[str, str]:
        done = await client.enqueue("billing.invoice", {"order": order_id})
        return {"job": done.execution_id}

    return app


async def test_one_client_and_the_dashboard_behind_the_app_s_dependency(
    settings: Settings,
) -> None:
    rs = Rsched(settings)
    app = make_app(rs)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        job = (await http.post("/orders/42/invoice")).json()["job"]
        for path in ("/ops/rsched/", "/ops/rsched/api/v1/stats", "/ops/rsched/schedules"):
            assert (await http.get(path)).status_code == 401, path
            assert (await http.get(path, headers={"X-User": "someone"})).status_code == 401
            assert (await http.get(path, headers={"X-User": "admin"})).status_code == 200, path
        got = await http.get(f"/ops/rsched/api/v1/jobs/{job}", headers={"X-User": "admin"})
        assert got.json()["task"] == "billing.invoice"
        assert got.json()["payload"] == {"order": 42}
        # The dashboard's links follow the mount point.
        page = (await http.get("/ops/rsched/", headers={"X-User": "admin"})).text
        assert 'href="/ops/rsched/schedules' in page


async def test_the_lifespan_closes_the_client_it_opened_only(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[rsched.Client] = []

    async def aclose(self: rsched.Client) -> None:
        closed.append(self)

    monkeypatch.setattr(rsched.Client, "aclose", aclose)
    rs = Rsched(settings)
    app = make_app(rs)
    async with app.router.lifespan_context(app):
        assert await rs.client().server_time()
    assert closed == [rs.client()]
    async with rsched.Client.from_settings(settings) as mine:
        theirs = Rsched(client=mine)
        async with theirs.lifespan(FastAPI()):
            pass
        assert closed == [rs.client()]  # a client given is the caller's to close


def test_a_bad_path_is_refused(settings: Settings) -> None:
    rs = Rsched(settings)
    with pytest.raises(ValueError, match="path must start with '/'"):
        rs.mount_dashboard(FastAPI(), "rsched")
