"""Exclusion calendars and jitter over HTTP: the API's calendar routes (round trip, bad input,
a calendar in use, read-only, authentication), a schedule's next occurrences with the excluded
ones marked and the jittered ones' fire times, and the dashboard's Calendars page, a calendar's
page, its set and remove forms, and a schedule's page and history under a running scheduler."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

import rsched
from rsched import Settings
from rsched._core.calendars import WEEKDAYS
from rsched._core.humanize import duration
from rsched._core.settings import SchedulerSettings
from tests.support.schedulers import running
from tests.support.waiting import eventually
from tests.support.web import api_error

Web = Callable[..., str]


def flash(r: httpx.Response) -> Any:
    assert r.status_code == 303, r.text
    return orjson.loads(bytes.fromhex(r.cookies["rsched_flash"]))


HOLIDAYS = {
    "dates": ["2026-12-26", "2026-12-25", "2026-12-25"],
    "ranges": ["2026-08-10..2026-08-14", ["2026-12-31T14:00", "2027-01-01T08:00"]],
    "weekdays": ["Sunday"],
    "description": "<b>office</b> closed",
}


async def test_put_get_list_and_delete(web: Web) -> None:
    async with httpx.AsyncClient(base_url=web() + "/api/v1") as http:
        assert (await http.get("/calendars")).json() == {"items": []}
        r = await http.put("/calendars/holidays", json=HOLIDAYS)
        assert r.status_code == 200, r.text
        stored = r.json()
        assert stored["updated_at"]
        assert {k: v for k, v in stored.items() if k != "updated_at"} == {
            "name": "holidays",
            "dates": ["2026-12-25", "2026-12-26"],  # sorted, each once
            "ranges": [
                ["2026-08-10", "2026-08-14"],
                ["2026-12-31T14:00:00", "2027-01-01T08:00:00"],
            ],
            "weekdays": ["sun"],
            "description": "<b>office</b> closed",
        }
        assert (await http.get("/calendars/holidays")).json() == stored
        await http.put("/calendars/weekend", json={"weekdays": ["sat", "sun"]})
        items = (await http.get("/calendars")).json()["items"]
        assert [i["name"] for i in items] == ["holidays", "weekend"]
        assert items[0] == stored

        # What GET answers goes back as it is; what is left out or null is empty.
        r = await http.put("/calendars/holidays", json=stored)
        assert r.status_code == 200, r.text
        assert r.json()["dates"] == stored["dates"]
        r = await http.put("/calendars/holidays", json={"dates": None, "weekdays": ["mon"]})
        assert (r.json()["dates"], r.json()["weekdays"]) == ([], ["mon"])
        body = api_error(
            await http.put("/calendars/holidays", json={"name": "other"}),
            400,
            "InvalidArgument",
            "name",
        )
        assert "'other' is not the path's" in body["message"]

        r = await http.delete("/calendars/holidays")
        assert (r.status_code, r.content) == (204, b"")
        body = api_error(await http.get("/calendars/holidays"), 404, "CalendarNotFound", "name")
        assert body["message"] == (
            "calendar 'holidays' does not exist; create it first with PUT "
            "/api/v1/calendars/holidays or the dashboard's Calendars page"
        )
        api_error(await http.delete("/calendars/holidays"), 404, "CalendarNotFound", "name")
        assert [i["name"] for i in (await http.get("/calendars")).json()["items"]] == ["weekend"]


async def test_an_invalid_calendar_is_422_naming_each_field(web: Web) -> None:
    async with httpx.AsyncClient(base_url=web() + "/api/v1") as http:
        bad = {
            "dates": ["2026-12-25", "2026-13-01"],
            "ranges": ["2026-12-26..2026-12-24"],
            "weekdays": ["sat", "funday"],
        }
        body = api_error(
            await http.put("/calendars/c", json=bad), 422, "InvalidCalendar", "dates[1]"
        )
        for field in ("dates[1]: ", "ranges[0]: ", "weekdays[1]: 'funday' is not a weekday"):
            assert field in body["message"], body
        cases: list[tuple[str, Any, str]] = [
            ("/calendars/c", {"dates": "2026-12-25"}, "dates"),
            ("/calendars/c", {"days": ["2026-12-25"]}, "days"),
            ("/calendars/c", {"description": 3}, "description"),
            ("/calendars/c", {"ranges": [["2026-12-24T10:00Z", "2026-12-25T10:00"]]}, "ranges[0]"),
            ("/calendars/a{b", {"weekdays": ["sat"]}, "name"),
        ]
        for path, data, field in cases:
            api_error(await http.put(path, json=data), 422, "InvalidCalendar", field)
        body = api_error(
            await http.put("/calendars/c", json={"days": []}), 422, "InvalidCalendar", "days"
        )
        assert "unknown field; give dates, ranges, weekdays or description" in body["message"]
        api_error(await http.put("/calendars/c", json=["sat"]), 400, "InvalidArgument", "body")
        api_error(await http.get("/calendars/a{b"), 400, "InvalidArgument", "name")
        assert (await http.get("/calendars")).json() == {"items": []}  # nothing was written


async def test_a_calendar_in_use_is_409_naming_every_schedule(
    web: Web, client: rsched.Client
) -> None:
    await client.set_calendar("closed", weekdays=["sun"])
    ids = [f"s{i:02d}" for i in range(12)]  # more than the message shows
    for sid in ids:
        await client.add({"id": sid, "task": "t", "every": 3600, "exclude": ["closed"]})
    await client.add({"id": "free", "task": "t", "every": 3600})
    assert await client.calendar_users("closed") == ids
    assert await client.calendar_users("nobody") == []
    async with httpx.AsyncClient(base_url=web() + "/api/v1") as http:
        body = api_error(await http.delete("/calendars/closed"), 409, "CalendarInUse", "name")
        assert body["schedule_ids"] == ids
        assert "in the exclude of 12 schedule(s) ('s00', 's01'," in body["message"]
        assert "and 2 more" in body["message"]
        assert (await http.get("/calendars/closed")).status_code == 200  # nothing removed
        r = await http.post(
            "/schedules", json={"id": "x", "task": "t", "every": 60, "exclude": ["nope"]}
        )
        body = api_error(r, 422, "InvalidSchedule", "exclude")
        assert "no exclusion calendar named 'nope'" in body["message"]
        for sid in ids:
            assert (await http.patch(f"/schedules/{sid}", json={"exclude": []})).status_code == 200
        assert (await http.delete("/calendars/closed")).status_code == 204


def test_read_only_refuses_calendar_writes(web: Web, settings: Settings) -> None:
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.set_calendar("closed", weekdays=["sun"])
    base = web(read_only=True)
    api = base + "/api/v1/calendars/closed"
    api_error(httpx.put(api, json={"weekdays": ["sat"]}), 403, "ReadOnly")
    api_error(httpx.delete(api), 403, "ReadOnly")
    assert httpx.get(api).json()["weekdays"] == ["sun"]
    assert len(httpx.get(base + "/api/v1/calendars").json()["items"]) == 1
    with httpx.Client(base_url=base) as browser:
        for page in ("/calendars", "/calendars/closed"):
            r = browser.get(page)
            assert r.status_code == 200
            assert '<form method="post"' not in r.text
        token = browser.cookies["rsched_csrf"]
        data = {"csrf_token": token, "name": "closed", "weekdays": "sat"}
        assert browser.post("/calendars/set", data=data).status_code == 403
        assert browser.post("/calendars/remove", data=data).status_code == 403
    assert httpx.get(api).json()["weekdays"] == ["sun"]


def test_calendar_writes_need_authentication_and_the_csrf_token(web: Web) -> None:
    base = web(token="tok-123")
    api = base + "/api/v1/calendars/closed"
    api_error(httpx.put(api, json={"weekdays": ["sun"]}), 401, "Unauthorized")
    api_error(httpx.get(base + "/api/v1/calendars"), 401, "Unauthorized")
    bearer = {"Authorization": "Bearer tok-123"}
    assert httpx.put(api, json={"weekdays": ["sun"]}, headers=bearer).status_code == 200
    r = httpx.delete(api, headers={**bearer, "Origin": "http://evil.example"})
    api_error(r, 403, "CrossSite")
    with httpx.Client(base_url=base) as browser:
        browser.get("/login")
        token = browser.cookies["rsched_csrf"]
        browser.post("/login", data={"csrf_token": token, "token": "tok-123"})
        api_error(browser.delete("/api/v1/calendars/closed"), 403, "CSRFError")
        assert browser.post("/calendars/remove", data={"name": "closed"}).status_code == 403
        r = browser.delete("/api/v1/calendars/closed", headers={"X-CSRF-Token": token})
        assert r.status_code == 204


def test_openapi_lists_the_calendar_routes(web: Web) -> None:
    doc = httpx.get(web() + "/api/v1/openapi.json").json()
    paths = doc["paths"]
    assert set(paths["/api/v1/calendars"]) == {"get"}
    assert set(paths["/api/v1/calendars/{name}"]) == {"get", "put", "delete"}
    body = paths["/api/v1/calendars/{name}"]["put"]["requestBody"]["content"]["application/json"]
    assert set(body["schema"]["properties"]) == {"dates", "ranges", "weekdays", "description"}
    assert not any(p.startswith("/calendars") for p in paths)  # the pages are not API


async def test_next_occurrences_mark_the_excluded_and_the_jittered(
    web: Web, client: rsched.Client
) -> None:
    # Every weekday but one is excluded: of the next ten noons, those on that day run.
    today = datetime.now(UTC).date()
    runs_on = WEEKDAYS[(today + timedelta(days=3)).weekday()]
    await client.set_calendar("mostly-closed", weekdays=[w for w in WEEKDAYS if w != runs_on])
    await client.add(
        {"id": "noon", "task": "t", "cron": "0 12 * * *", "exclude": ["mostly-closed"]}
    )
    await client.add({"id": "spread", "task": "t", "every": 3600, "jitter": "30m"})
    base = web()
    async with httpx.AsyncClient(base_url=base) as http:
        items = (await http.get("/api/v1/schedules/noon/next", params={"n": 10})).json()["items"]
        assert len(items) == 10
        for item in items:
            at = datetime.fromisoformat(item["at"])
            runs = WEEKDAYS[at.weekday()] == runs_on
            assert item["excluded_by"] == (None if runs else "mostly-closed"), item
            assert (item["fires_at"], item["utc"]) == (item["at"], at.isoformat())
            assert (item["utc_offset"], item["transition"]) == ("UTC+00:00", "")
        kept = [i["fires_at"] for i in items if not i["excluded_by"]]
        assert kept == [t.isoformat() for t in await client.next_runs("noon", len(kept))]

        spread = (await http.get("/api/v1/schedules/spread/next")).json()["items"]
        delays = [
            datetime.fromisoformat(i["fires_at"]) - datetime.fromisoformat(i["at"]) for i in spread
        ]
        assert all(timedelta(0) <= d < timedelta(minutes=30) for d in delays), delays
        assert any(delays)  # ten delays of 0 in [0, 30m): about never
        assert all(i["excluded_by"] is None for i in spread)

        page = (await http.get("/schedules/noon")).text
        link = '<a href="/calendars/mostly-closed"><code>mostly-closed</code></a>'
        assert f'<dd id="exclude">{link}</dd>' in page
        assert page.count(f"excluded by {link}") == sum(1 for i in items if i["excluded_by"])
        assert page.count('<li class="excluded"><s><time') == page.count("excluded by")
        assert "jitter" not in page

        page = (await http.get("/schedules/spread")).text
        assert "+ up to 30m jitter" in page
        shown = [d for d in delays if d]
        first = int(shown[0] / timedelta(milliseconds=1))
        assert f"(+{duration(first)} jitter)</span>" in page
        assert page.count(" jitter)</span>") == len(shown)
        assert '<dd id="exclude"><span class="muted">none</span></dd>' in page

        edit = (await http.get("/schedules/spread/edit")).text
        assert "&#34;jitter&#34;: 1800.0" in edit
        assert '<code>"exclude": ["bank-holidays"]</code>' in edit
        assert '<code>"jitter": "5m"</code>' in edit


async def test_history_shows_excluded_and_jittered_runs(
    web: Web, client: rsched.Client, settings: Settings
) -> None:
    fast = settings.model_copy(
        update={
            "scheduler": SchedulerSettings(lease_ttl_ms=1000, lease_renew_ms=200, max_idle_ms=500)
        }
    )
    await client.set_calendar("always", weekdays=list(WEEKDAYS))
    await client.add({"id": "ex", "task": "t", "every": 1, "exclude": ["always"]})
    # Overlap allow: every occurrence fires (no worker takes the jobs), each with its delay.
    await client.add({"id": "jit", "task": "t", "every": 1, "jitter": "900ms", "overlap": "allow"})
    base = web()
    async with running(fast), httpx.AsyncClient(base_url=base) as http:

        async def executions(sid: str) -> list[dict[str, Any]]:
            r = await http.get(f"/api/v1/schedules/{sid}/executions")
            items: list[dict[str, Any]] = r.json()["items"]
            return items

        async def excluded() -> list[dict[str, Any]]:
            return [r for r in await executions("ex") if r["excluded_by"]]

        async def jittered() -> list[dict[str, Any]]:
            return [r for r in await executions("jit") if r["jitter_ms"]]

        skipped = (await eventually(excluded))[0]
        assert (skipped["status"], skipped["excluded_by"]) == ("skipped (excluded)", "always")
        fired = (await eventually(jittered))[0]
        assert 0 < fired["jitter_ms"] < 900
        assert fired["excluded_by"] is None

    link = '<a href="/calendars/always"><code>always</code></a>'
    async with httpx.AsyncClient(base_url=base) as http:
        page = (await http.get("/schedules/ex")).text
        assert (
            f'<span class="outcome o-skipped">skipped</span> <span class="small">excluded by {link}'
            in page
        )
        assert "skipped (excluded)" not in page
        runs = (await http.get("/runs", params={"schedule": "ex"})).text
        assert f"excluded by {link}" in runs
        page = (await http.get("/schedules/jit")).text
        assert f"+{duration(fired['jitter_ms'])} jitter</span>" in page
        calendar = (await http.get("/calendars/always")).text
        assert '<a href="/schedules/ex">ex</a>' in calendar
        assert '<a href="/schedules/jit">' not in calendar


async def test_the_calendars_pages_and_their_forms(web: Web, client: rsched.Client) -> None:
    await client.set_calendar(
        "holidays", dates=["2026-12-25", "2026-12-26"], ranges=["2026-08-10..2026-08-14"],
        weekdays=["sun"], description="<b>office</b> closed",
    )  # fmt: skip
    await client.add({"id": "s", "task": "t", "every": 60})
    await client.add({"id": "uses", "task": "t", "every": 60, "exclude": ["holidays"]})
    async with httpx.AsyncClient(base_url=web()) as browser:
        page = await browser.get("/calendars")
        assert page.status_code == 200
        assert 'href="/calendars" aria-current="page">Calendars</a>' in page.text
        (row,) = [r for r in page.text.split("<tr>") if "<code>holidays</code>" in r]
        cells = [c.split(">", 1)[1].rsplit("</td>", 1)[0] for c in row.split("<td")[1:]]
        assert cells[0] == '<a href="/calendars/holidays"><code>holidays</code></a>'
        assert cells[1:4] == ["2", "1", "sun"]
        assert "<time datetime=" in cells[4]
        assert cells[5] == "&lt;b&gt;office&lt;/b&gt; closed"
        assert "<b>office</b>" not in page.text

        page = await browser.get("/calendars/holidays")
        assert page.status_code == 200
        assert '<h1><span class="muted">calendar</span> holidays</h1>' in page.text
        assert "<code>2026-12-25</code> <code>2026-12-26</code>" in page.text
        assert "<code>2026-08-10</code> .. <code>2026-08-14</code>" in page.text
        assert '<li><a href="/schedules/uses">uses</a></li>' in page.text
        assert '<a href="/schedules/s">' not in page.text
        # The set form holds the calendar as it is, one entry a line.
        assert (
            'name="dates" rows="6" spellcheck="false">2026-12-25\n2026-12-26</textarea>'
            in page.text
        )
        assert '<input type="checkbox" name="weekdays" value="sun" checked>' in page.text
        assert '<input type="checkbox" name="weekdays" value="sat">' in page.text
        assert (await browser.get("/calendars/nope")).status_code == 404

        token = browser.cookies["rsched_csrf"]
        data: dict[str, Any] = {
            "name": "office",
            "dates": "2026-12-24\n\n 2026-12-31 \n",
            "ranges": "2026-08-01..2026-08-02",
            "weekdays": ["sat", "sun"],
            "description": "",
        }
        assert (await browser.post("/calendars/set", data=data)).status_code == 403  # no token
        r = await browser.post("/calendars/set", data={**data, "csrf_token": token})
        assert r.headers["location"] == "/calendars/office"
        assert flash(r) == {
            "ok": True,
            "text": "set calendar 'office': 2 dates, 1 range, sat, sun",
        }
        stored = await client.calendar("office")
        assert ([d.isoformat() for d in stored.dates], stored.weekdays) == (
            ["2026-12-24", "2026-12-31"],
            ("sat", "sun"),
        )

        # A refusal shows the form again as posted, with the fields named, on the same page.
        r = await browser.post(
            "/calendars/set",
            data={**data, "csrf_token": token, "name": "new", "dates": "2026-12-24\n24/12/2026"},
        )
        assert r.status_code == 400
        assert "invalid calendar &#39;new&#39;: dates[1]: &#39;24/12/2026&#39;" in r.text
        assert ">2026-12-24\n24/12/2026</textarea>" in r.text
        assert '<input name="name" value="new"' in r.text
        assert "<h1>Calendars</h1>" in r.text
        with pytest.raises(rsched.CalendarNotFound):
            await client.calendar("new")
        r = await browser.post(
            "/calendars/set",
            data={"csrf_token": token, "name": "holidays", "from": "calendar", "ranges": "x..y"},
        )
        assert r.status_code == 400
        assert "ranges[0]: " in r.text
        assert '<h1><span class="muted">calendar</span> holidays</h1>' in r.text
        assert ">x..y</textarea>" in r.text
        assert len((await client.calendar("holidays")).dates) == 2  # unchanged
        r = await browser.post(
            "/calendars/set",
            data={"csrf_token": token, "name": "holidays", "from": "calendar", "weekdays": "sat"},
        )
        assert flash(r)["text"] == "set calendar 'holidays': 0 dates, 0 ranges, sat"

        # Removing one that a schedule names is refused, naming it.
        r = await browser.post("/calendars/remove", data={"csrf_token": token, "name": "holidays"})
        assert r.headers["location"] == "/calendars/holidays"
        message = flash(r)
        assert not message["ok"]
        assert "calendar 'holidays' is in the exclude of 1 schedule(s) ('uses')" in message["text"]
        r = await browser.post("/calendars/remove", data={"csrf_token": token, "name": "office"})
        assert r.headers["location"] == "/calendars"
        assert flash(r) == {"ok": True, "text": "removed calendar 'office'"}
        r = await browser.post("/calendars/remove", data={"csrf_token": token, "name": "office"})
        assert flash(r)["text"].startswith("calendar 'office' does not exist; create it first")
        assert [c.name for c in await client.calendars()] == ["holidays"]
