"""The audit trail through the dashboard and the HTTP API: writes recorded as the signed-in
user's from ``web``, the audit and spec history routes, rollback (API and the schedule page's
button), read-only (docs/audit.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

import rsched
from rsched import Settings

Web = Callable[..., str]
BASIC = ("admin", "s3cret")


def spec(sid: str, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "task": "reports.build", "cron": "0 2 * * *", **extra}


def test_writes_are_the_signed_in_users(web: Web) -> None:
    base = web(auth="admin:s3cret", token="tok-123")
    api = base + "/api/v1"
    assert httpx.post(api + "/schedules", json=spec("a"), auth=BASIC).status_code == 201
    bearer = {"Authorization": "Bearer tok-123"}
    r = httpx.patch(api + "/schedules/a", json={"cron": "0 3 * * *"}, headers=bearer)
    assert r.status_code == 200, r.text
    with httpx.Client(base_url=base) as browser:
        browser.get("/login")
        token = browser.cookies["rsched_csrf"]
        browser.post("/login", data={"csrf_token": token, "user": "admin", "password": "s3cret"})
        r = browser.post("/schedules/a/pause", data={"csrf_token": token, "note": "x"})
        assert r.status_code == 303
    got = httpx.get(api + "/schedules/a/audit", auth=BASIC).json()["items"]
    assert [(r["action"], r["actor"], r["source"]) for r in got] == [
        ("pause", "admin", "web"),
        ("update", "token", "web"),
        ("add", "admin", "web"),
    ]
    assert got[1]["changes"] == {"cron": ["0 2 * * *", "0 3 * * *"]}
    everything = httpx.get(api + "/audit", params={"actor": "token"}, auth=BASIC).json()
    assert [r["action"] for r in everything["items"]] == ["update"]
    assert httpx.get(api + "/audit", params={"cursor": "x"}, auth=BASIC).status_code == 400


def test_specs_rollback_and_the_page(web: Web, settings: Settings) -> None:
    base = web()
    api = base + "/api/v1/schedules/a"
    httpx.post(base + "/api/v1/schedules", json=spec("a"))
    assert httpx.get(api + "/specs").json() == {"items": []}
    httpx.patch(api, json={"cron": "0 5 * * *"})
    specs = httpx.get(api + "/specs").json()["items"]
    assert [s["generation"] for s in specs] == [2, 1]
    assert specs[1]["spec"]["cron"] == "0 2 * * *"
    r = httpx.post(api + "/rollback", json={"generation": 7})
    assert r.status_code == 400
    assert r.json()["field"] == "generation"
    r = httpx.post(api + "/rollback", json={"generation": 1})
    assert r.status_code == 200, r.text
    assert (r.json()["cron"], r.json()["generation"]) == ("0 2 * * *", 3)
    (last,) = httpx.get(api + "/audit", params={"limit": 1}).json()["items"]
    assert (last["action"], last["actor"], last["source"]) == ("rollback", None, "web")

    with httpx.Client(base_url=base) as browser:
        page = browser.get("/schedules/a")
        assert page.status_code == 200
        assert "Changes" in page.text
        assert "rollback" in page.text
        assert "Roll back to 2" in page.text
        token = browser.cookies["rsched_csrf"]
        r = browser.post("/schedules/a/rollback", data={"generation": "2"})
        assert r.status_code == 403  # no CSRF token
        r = browser.post("/schedules/a/rollback", data={"generation": "2", "csrf_token": token})
        assert r.status_code == 303
    with rsched.SyncClient.from_settings(settings) as c:
        assert (c.get("a").cron, c.get("a").generation) == ("0 5 * * *", 4)


def test_read_only_shows_changes_without_rollback(web: Web, settings: Settings) -> None:
    with rsched.SyncClient.from_settings(settings) as c:
        c.add(spec("a"))
        c.update("a", cron="0 4 * * *")
    base = web(read_only=True)
    page = httpx.get(base + "/schedules/a")
    assert "Changes" in page.text
    assert "Roll back to" not in page.text
    r = httpx.post(base + "/api/v1/schedules/a/rollback", json={"generation": 1})
    assert r.status_code == 403
