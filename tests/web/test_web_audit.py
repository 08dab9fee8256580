"""The audit trail through the dashboard and the HTTP API: writes recorded as the signed-in
user's from ``web``, the audit and spec history routes, rollback (API and the schedule page's
button), read-only (docs/audit.md)."""

from __future__ import annotations

import re
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
    with httpx.Client(base_url=base) as browser:  # the page's form too, with its token
        token = browser.get("/schedules/a").cookies["rsched_csrf"]
        r = browser.post("/schedules/a/rollback", data={"generation": "1", "csrf_token": token})
        assert r.status_code == 403
    with rsched.SyncClient.from_settings(settings) as c:
        assert (c.get("a").generation, c.audit("a", limit=1).items[0].action) == (2, "update")


def actions(html: str) -> list[str]:
    """The actions of a page's Changes card, newest first (templates/_audit.html)."""
    return re.findall(r'<td class="action">([a-z_]+)</td>', html)


def test_calendar_and_limit_pages_show_their_own_changes(web: Web, settings: Settings) -> None:
    # A schedule and a calendar named alike: each page shows only its own changes.
    with rsched.SyncClient.from_settings(settings) as c:
        c.add(spec("closing"))
        c.set_calendar("closing", dates=["2026-12-25"])
        c.set_calendar("closing", dates=["2026-12-25", "2026-12-26"], description="year end")
        c.set_limit("customer:1", concurrency=2)
        c.set_limit("customer:1", concurrency=3, rate="10/m")
        c.set_limit("customer:2", concurrency=1)
    base = web(auth="admin:s3cret")
    with httpx.Client(base_url=base, auth=BASIC) as http:
        page = http.get("/calendars/closing")
        assert page.status_code == 200
        assert actions(page.text) == ["calendar_set", "calendar_set"]
        # Each key of the calendar's document before and after, as recorded (JSON).
        assert "description - -&gt; &#34;year end&#34;" in page.text
        assert "/api/v1/calendars/closing/audit" in page.text
        assert "Generation" not in page.text  # a calendar has none
        page = http.get("/limits/customer:1")
        assert actions(page.text) == ["limit_set", "limit_set"]
        assert page.text.count("<td>admin</td>") == 0  # written by the SDK: nobody named
        assert "/api/v1/limits/customer%3A1/audit" in page.text
        assert actions(http.get("/schedules/closing").text) == ["add"]
        assert actions(http.get("/limits/customer:3").text) == []
        assert "no changes recorded" in http.get("/limits/customer:3").text

        # The HTTP API: the same, by target.
        got = http.get("/api/v1/calendars/closing/audit").json()
        assert [r["action"] for r in got["items"]] == ["calendar_set", "calendar_set"]
        assert got["items"][0]["changes"]["description"] == [None, '"year end"']
        got = http.get("/api/v1/limits/customer:1/audit", params={"limit": 1}).json()
        assert [(r["action"], r["id"]) for r in got["items"]] == [("limit_set", "customer:1")]
        more = http.get("/api/v1/limits/customer:1/audit", params={"cursor": got["cursor"]})
        assert [r["action"] for r in more.json()["items"]] == ["limit_set"]
        got = http.get("/api/v1/schedules/closing/audit").json()
        assert [r["action"] for r in got["items"]] == ["add"]
        got = http.get("/api/v1/audit", params={"id": "closing", "kind": "calendar"}).json()
        assert [r["action"] for r in got["items"]] == ["calendar_set", "calendar_set"]
        got = http.get("/api/v1/audit", params={"kind": "limit"}).json()
        assert [r["id"] for r in got["items"]] == ["customer:2", "customer:1", "customer:1"]
        r = http.get("/api/v1/audit", params={"kind": "queue"})
        assert (r.status_code, r.json()["field"]) == (400, "kind")

        # A change made from the dashboard is the signed-in user's, and shows on the page.
        http.get("/calendars/closing")
        token = http.cookies["rsched_csrf"]
        r = http.post(
            "/limits/clear", data={"csrf_token": token, "key": "customer:1", "from": "key"}
        )
        assert r.status_code == 303
        page = http.get("/limits/customer:1")
        assert actions(page.text) == ["limit_clear", "limit_set", "limit_set"]
        assert "<td>admin</td>" in page.text
