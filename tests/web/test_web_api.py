"""The HTTP API and the dashboard's HTTP behaviour, over real HTTP against the real servers:
every endpoint, every error status, authentication, CSRF, read-only, headers, base path."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

import rsched
from rsched import Scheduler, Settings
from rsched._core.settings import SchedulerSettings
from rsched._devtools.embedded import free_port
from rsched._redis.connection import connect
from tests.support.fake_servers import Canned
from tests.support.waiting import WAIT_S, eventually
from tests.support.web import (
    apublish_event,
    make_dead_letters,
    publish_event,
    run_app,
    serve,
)
from tests.support.worker_app import fast_settings

Web = Callable[..., str]


def spec(sid: str, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "task": "reports.build", "cron": "0 2 * * *", **extra}


def error(r: httpx.Response, status: int, name: str, field: str | None = None) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == name, body
    assert body["message"]
    if field is not None:
        assert body["field"] == field, body


async def test_schedule_create_read_change_delete(web: Web) -> None:
    base = web() + "/api/v1"
    async with httpx.AsyncClient(base_url=base) as http:
        r = await http.post("/schedules", json=spec("a", timezone="Europe/Rome"))
        assert r.status_code == 201, r.text
        assert r.json()["next_run"] is not None
        error(await http.post("/schedules", json=spec("a")), 409, "ScheduleExists", "id")
        error(await http.post("/schedules", json={"id": "b"}), 422, "InvalidSchedule", "task")
        bad = spec("b", cron="61 * * * *")
        error(await http.post("/schedules", json=bad), 422, "InvalidSchedule", "cron")
        error(await http.post("/schedules", content=b"[1]"), 400, "InvalidArgument", "body")
        error(await http.post("/schedules", content=b"{nope"), 400, "InvalidArgument", "body")

        got = (await http.get("/schedules/a")).json()
        assert got["timezone"] == "Europe/Rome"
        assert got["generation"] == 1
        error(await http.get("/schedules/zz"), 404, "ScheduleNotFound", "id")

        r = await http.put("/schedules/a", json={"task": "reports.other", "every": 60})
        assert r.status_code == 200, r.text
        assert (r.json()["task"], r.json()["every"], r.json()["cron"]) == (
            "reports.other",
            60,
            None,
        )
        error(await http.put("/schedules/a", json=spec("b")), 400, "InvalidArgument", "id")
        assert (await http.put("/schedules/new1", json=spec("new1"))).status_code == 200

        r = await http.patch("/schedules/a", json={"description": "<b>hi</b>"})
        assert r.json()["description"] == "<b>hi</b>"
        assert r.json()["every"] == 60
        same = await http.patch("/schedules/a", json={"description": "<b>hi</b>", "every": "1m"})
        assert same.json() == r.json()  # nothing to change: nothing written
        error(await http.patch("/schedules/a", json={"every": -1}), 422, "InvalidSchedule", "every")
        error(await http.patch("/schedules/a", json={"runs": 3}), 422, "InvalidSchedule", "runs")
        error(await http.patch("/schedules/zz", json={"every": 5}), 404, "ScheduleNotFound")

        assert (await http.delete("/schedules/a")).status_code == 204
        error(await http.delete("/schedules/a"), 404, "ScheduleNotFound")


async def test_messages_name_json_fields_and_endpoints(web: Web, client: rsched.Client) -> None:
    base = web() + "/api/v1"
    cases = [
        (
            spec("b", cron=None, every=300, at="2030-01-01T00:00:00Z", max_runs=0),
            'give exactly one trigger: "cron": "0 2 * * *", "every": 300 or "at": '
            '"2030-01-01T09:00:00Z" (given: every, at)',
        ),
        (spec("b", every="soon", cron=None), 'give seconds (300) or text such as "90s", "5m"'),
        (spec("b", buffer_limit=0), 'held back by "overlap": "buffer_all"'),
        (spec("b", retry_base_s="2h", retry_max_s="1h"), "retry_max_s must be at least"),
        (spec("b", at="2001-01-01T00:00:00Z", cron=None), "use POST /api/v1/jobs to run a job"),
        (spec("b", colour=1), "check the spelling against the Schedule schema"),
        (spec("b", payload=[1]), "payload: must be a JSON object, got list"),
        (spec("a"), "use PUT /api/v1/schedules/a to replace its whole spec or PATCH"),
    ]
    async with httpx.AsyncClient(base_url=base) as http:
        assert (await http.post("/schedules", json=spec("a"))).status_code == 201
        for body, message in cases:
            r = await http.post("/schedules", json=body)
            assert r.status_code in (409, 422), r.text
            assert message in r.json()["message"], r.json()
            for python in ("()", "timedelta", "a dict", "='", "=<", "rsched.Schedule"):
                assert python not in r.json()["message"], r.json()
        r = await http.post("/jobs", json={"task": "t", "max_retries": 5000})
        error(r, 422, "InvalidJob", "max_retries")
        assert r.json()["message"].startswith("max_retries: must be a whole number")
        # The dashboard words a schedule's retries as rsched show does.
        page = (await http.get(base.removesuffix("/api/v1") + "/schedules/a")).text
        assert "3 retries, backoff 30s x2 up to 1h" in page
    # The SDK in the same process keeps its own words.
    with pytest.raises(rsched.ScheduleExists, match=r"use upsert\(\) to replace it"):
        await client.add(spec("a"))


async def test_list_pages_filters_and_search(web: Web, client: rsched.Client) -> None:
    for i in range(7):
        await client.add(spec(f"job-{i}", queue="mail" if i % 2 else "default"))
    await client.add(spec("other"))
    await client.pause("job-3", "maintenance")
    base = web() + "/api/v1"
    async with httpx.AsyncClient(base_url=base) as http:
        seen: list[str] = []
        cursor = None
        while True:
            params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
            page = (await http.get("/schedules", params=params)).json()
            assert len(page["items"]) <= 3
            seen += [s["id"] for s in page["items"]]
            cursor = page["cursor"]
            if cursor is None:
                break
        assert sorted(seen) == sorted([f"job-{i}" for i in range(7)] + ["other"])

        def ids(r: httpx.Response) -> list[str]:
            return sorted(s["id"] for s in r.json()["items"])

        assert ids(await http.get("/schedules", params={"queue": "mail"})) == [
            "job-1",
            "job-3",
            "job-5",
        ]
        assert ids(await http.get("/schedules", params={"state": "paused"})) == ["job-3"]
        assert "job-3" not in ids(await http.get("/schedules", params={"state": "active"}))
        assert ids(await http.get("/schedules", params={"state": "completed"})) == []
        assert ids(await http.get("/schedules", params={"q": "OTH"})) == ["other"]
        # An exact id is the whole first page, read directly; the cursor goes on to substrings.
        exact = (await http.get("/schedules", params={"q": "job-1"})).json()
        assert [s["id"] for s in exact["items"]] == ["job-1"]
        rest = await http.get("/schedules", params={"q": "job-1", "cursor": exact["cursor"]})
        assert ids(rest) == ["job-1"]
        assert ids(await http.get("/schedules", params={"q": "job-", "queue": "mail"})) == [
            "job-1",
            "job-3",
            "job-5",
        ]
        # A search pages too: its cursor carries on where it stopped.
        found: list[str] = []
        cursor = None
        while True:
            params = {"q": "job", "limit": 2, **({"cursor": cursor} if cursor else {})}
            page = (await http.get("/schedules", params=params)).json()
            found += [s["id"] for s in page["items"]]
            cursor = page["cursor"]
            if cursor is None:
                break
        assert sorted(found) == [f"job-{i}" for i in range(7)]

        error(await http.get("/schedules", params={"limit": 0}), 400, "InvalidArgument", "limit")
        error(await http.get("/schedules", params={"limit": "x"}), 400, "InvalidArgument")
        r = await http.get("/schedules", params={"cursor": "nope"})
        error(r, 400, "InvalidArgument", "cursor")
        r = await http.get("/schedules", params={"q": "x", "cursor": "nope"})
        error(r, 400, "InvalidArgument", "cursor")
        error(await http.get("/schedules", params={"state": "odd"}), 400, "InvalidArgument")


async def test_schedule_actions(web: Web, client: rsched.Client) -> None:
    await client.add(spec("a", timezone="America/New_York", overlap="allow"))
    base = web() + "/api/v1"
    async with httpx.AsyncClient(base_url=base) as http:
        r = await http.post("/schedules/a/pause", json={"note": "db migration"})
        assert (r.json()["paused"], r.json()["pause_note"]) == (True, "db migration")
        r = await http.post("/schedules/a/pause", json={"note": "x" * 501})
        error(r, 422, "InvalidSchedule", "pause_note")
        error(await http.post("/schedules/a/pause", json={"nope": 1}), 400, "InvalidArgument")
        error(await http.post("/schedules/zz/pause"), 404, "ScheduleNotFound")
        r = await http.post("/schedules/a/resume")
        assert r.json()["paused"] is False
        error(await http.post("/schedules/zz/resume"), 404, "ScheduleNotFound")

        r = await http.post("/schedules/a/trigger")
        assert r.json()["status"] == "fired"
        fired_id = r.json()["execution_id"]
        error(await http.post("/schedules/zz/trigger"), 404, "ScheduleNotFound")
        runs = (await http.get("/schedules/a/executions")).json()["items"]
        assert runs[0]["execution_id"] == fired_id
        assert (runs[0]["status"], runs[0]["origin"]) == ("queued", "manual")
        r = await http.get("/schedules/a/executions", params={"status": "completed"})
        assert r.json()["items"] == []
        error(await http.get("/schedules/zz/executions"), 404, "ScheduleNotFound")
        r = await http.get("/schedules/a/executions", params={"limit": 0})
        error(r, 400, "InvalidArgument", "limit")

        end = datetime.now(UTC) - timedelta(hours=1)
        body = {"start": (end - timedelta(days=3)).isoformat(), "end": end.isoformat()}
        r = await http.post("/schedules/a/backfill", json=body)
        assert r.json()["counts"]["fired"] == 3, r.text
        again = await http.post("/schedules/a/backfill", json=body)
        assert again.json()["counts"]["already_fired"] == 3
        future = {**body, "end": (datetime.now(UTC) + timedelta(days=1)).isoformat()}
        error(await http.post("/schedules/a/backfill", json=future), 400, "InvalidArgument", "end")
        r = await http.post("/schedules/a/backfill", json={"start": "x", "end": "y"})
        error(r, 400, "InvalidArgument", "start")
        error(await http.post("/schedules/zz/backfill", json=body), 404, "ScheduleNotFound")

        nxt = (await http.get("/schedules/a/next", params={"n": 3})).json()["items"]
        assert len(nxt) == 3
        assert nxt[0]["at"][-6:] in ("-05:00", "-04:00")  # New York
        assert nxt[0]["utc"].endswith("+00:00")
        error(await http.get("/schedules/a/next", params={"n": 0}), 400, "InvalidArgument", "n")
        error(await http.get("/schedules/zz/next"), 404, "ScheduleNotFound")


async def test_completed_schedule_is_a_conflict(web: Web, client: rsched.Client) -> None:
    await client.add({"id": "once", "task": "t.x", "every": 60, "max_runs": 1})
    base = web() + "/api/v1"
    async with httpx.AsyncClient(base_url=base) as http:
        assert (await http.post("/schedules/once/trigger")).json()["status"] == "fired"
        if not (await http.get("/schedules/once")).json()["completed"]:
            pytest.skip("a manual trigger does not count towards max_runs here")
        error(await http.post("/schedules/once/pause"), 409, "ScheduleCompleted")


def test_next_runs_mark_dst_transitions(web: Web, settings: Settings) -> None:
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.add({"id": "daily", "task": "t.x", "cron": "0 12 * * *", "timezone": "Europe/Rome"})
    r = httpx.get(web() + "/api/v1/schedules/daily/next", params={"n": 400})
    items = r.json()["items"]
    marks = [i for i in items if i["transition"]]
    # A year of noon runs in Rome crosses both changes of the clock.
    assert {m["transition"] for m in marks} == {
        "UTC+01:00 → UTC+02:00",
        "UTC+02:00 → UTC+01:00",
    }


async def test_queues_dead_letters_and_jobs(web: Web, settings: Settings) -> None:
    base = web() + "/api/v1"
    async with httpx.AsyncClient(base_url=base) as http:
        job = {"task": "emails.send", "payload": {"to": "x"}, "queue": "outbox"}
        r = await http.post("/jobs", json=job)
        assert r.status_code == 201, r.text
        assert r.json()["execution_id"]
        r = await http.post("/jobs", json={"task": "t", "queue": "mail", "delay_s": 60})
        assert r.status_code == 201
        mine = {"task": "t", "queue": "outbox", "execution_id": "order-42", "priority": "high"}
        r = await http.post("/jobs", json=mine)
        assert (r.status_code, r.json()) == (201, {"execution_id": "order-42", "created": True})
        r = await http.post("/jobs", json=mine)  # the same id again: nothing added
        assert (r.status_code, r.json()) == (200, {"execution_id": "order-42", "created": False})
        r = await http.post("/jobs", json={"task": "t", "priority": "urgent"})
        error(r, 422, "InvalidJob", "priority")
        error(await http.post("/jobs", json={"task": "bad name"}), 422, "InvalidJob", "task")
        error(await http.post("/jobs", json={"payload": {}}), 422, "InvalidJob", "task")
        error(await http.post("/jobs", json={"task": "t", "x": 1}), 422, "InvalidJob", "x")
        r = await http.post("/jobs", json={"task": "t", "payload": [1]})
        error(r, 422, "InvalidJob", "payload")
        r = await http.post("/jobs", json={"task": "t", "delay_s": -1})
        error(r, 422, "InvalidJob", "delay_s")

        queues = {q["name"]: q for q in (await http.get("/queues")).json()["items"]}
        assert queues["outbox"]["length"] == 2  # both levels counted
        assert queues["mail"]["delayed"] == 1

        await make_dead_letters(settings, 3)
        page = (await http.get("/queues/default/dead-letters", params={"limit": 2})).json()
        assert len(page["items"]) == 2
        assert page["cursor"]
        letter = page["items"][0]
        assert letter["error_type"] == "ValueError"
        assert "boom" in letter["error_message"]
        assert "Traceback" in letter["traceback"]
        assert "job_fields" not in letter
        rest = await http.get("/queues/default/dead-letters", params={"cursor": page["cursor"]})
        assert len(rest.json()["items"]) == 1
        assert rest.json()["cursor"] is None
        r = await http.get("/queues/default/dead-letters", params={"cursor": "zz"})
        error(r, 400, "InvalidArgument", "cursor")

        path = "/queues/default/dead-letters"
        error(await http.post(path + "/requeue", json={}), 400, "InvalidArgument", "entry_ids")
        r = await http.post(path + "/requeue", json={"entry_ids": ["1-0"], "all": True})
        error(r, 400, "InvalidArgument", "all")
        r = await http.post(path + "/requeue", json={"entry_ids": ["1-1", "2-2"]})
        error(r, 404, "DeadLetterNotFound", "entry_id")
        assert r.json()["message"] == "dead letters '1-1', '2-2' do not exist in queue 'default'"
        r = await http.post(path + "/requeue", json={"entry_ids": [letter["entry_id"], "1-1"]})
        assert r.json() == {"requeued": 1, "not_found": ["1-1"]}
        r = await http.post(path + "/purge", json={"entry_ids": ["1-1"]})
        error(r, 404, "DeadLetterNotFound", "entry_id")
        r = await http.post(path + "/purge", json={"all": True})
        assert r.json() == {"purged": 2, "not_found": []}
        assert (await http.get(path)).json()["items"] == []

        stats = (await http.get("/stats")).json()
        assert set(stats) >= {"schedules", "due", "queues", "dead_letters", "leader"}


async def test_debounced_jobs(web: Web, client: rsched.Client) -> None:
    base = web() + "/api/v1"
    async with httpx.AsyncClient(base_url=base) as http:
        job = {"task": "t", "payload": {"n": 1}, "debounce_key": "reindex:7", "debounce": "1m"}
        r = await http.post("/jobs", json=job)
        assert r.status_code == 201, r.text
        first = r.json()
        assert first["created"] is True
        r = await http.post("/jobs", json={**job, "payload": {"n": 2}, "debounce": 60})
        assert (r.status_code, r.json()) == (200, {**first, "created": False})
        found = await client.job(first["execution_id"])
        assert (found.state, found.payload) == ("delayed", {"n": 2})
        r = await http.post("/jobs", json={"task": "t", "debounce": "2s"})
        error(r, 422, "InvalidJob", "debounce_key")
        assert "collapse with debounce," in r.json()["message"]
        r = await http.post("/jobs", json={**job, "debounce": "2d"})
        error(r, 422, "InvalidJob", "debounce")
        r = await http.post("/jobs", json={**job, "delay_s": 5})
        error(r, 422, "InvalidJob", "delay_s")


async def test_start_deadline_and_pause_after_failures(web: Web, client: rsched.Client) -> None:
    url = web()
    async with httpx.AsyncClient(base_url=url + "/api/v1") as http:
        body = spec("g", start_deadline="10m", pause_after_failures=3)
        r = await http.post("/schedules", json=body)
        assert r.status_code == 201, r.text
        got = r.json()
        assert (got["start_deadline"], got["pause_after_failures"]) == (600, 3)
        assert got["consecutive_failures"] == 0
        r = await http.patch("/schedules/g", json={"start_deadline": -1})
        error(r, 422, "InvalidSchedule", "start_deadline")
        r = await http.patch("/schedules/g", json={"pause_after_failures": 0})
        error(r, 422, "InvalidSchedule", "pause_after_failures")
        r = await http.patch("/schedules/g", json={"consecutive_failures": 0})
        error(r, 422, "InvalidSchedule", "consecutive_failures")
        r = await http.post("/jobs", json={"task": "t", "start_deadline": "5m"})
        assert r.status_code == 201, r.text
        r = await http.post("/jobs", json={"task": "t", "start_deadline": "1000d"})
        error(r, 422, "InvalidJob", "start_deadline")
    async with httpx.AsyncClient(base_url=url) as http:
        page = (await http.get("/schedules/g")).text
    assert "start deadline 10m" in page
    assert '<dd id="failures">0 in a row · pauses at 3</dd>' in page


async def test_health_schedule_health_and_events(
    web: Web, client: rsched.Client, settings: Settings
) -> None:
    await client.add({"id": "tick", "task": "t.x", "every": 1, "misfire_grace_s": 0})
    await client.add({"id": "calm", "task": "t.x", "every": 3600})
    await client.add({"id": "held", "task": "t.x", "every": 1, "paused": True})
    base = web() + "/api/v1"
    async with httpx.AsyncClient(base_url=base) as http:

        async def late() -> bool:
            r = await http.get("/schedules/tick/health")
            assert r.status_code == 200, r.text
            return bool(r.json()["state"] == "late")

        await eventually(late)  # nothing fires it: no scheduler runs
        r = await http.get("/health")
        assert r.status_code == 503, r.text
        body = r.json()
        assert body["ok"] is False
        assert {"no_leader", "schedules"} <= {p["check"] for p in body["problems"]}
        assert [s["id"] for s in body["schedules"]] == ["tick"]
        assert body["schedules"][0]["state"] == "late"
        assert "not fired" in body["schedules"][0]["reason"]
        assert body["leader"] is None
        assert set(body) >= {"checked_at", "truncated", "due", "oldest_overdue_ms"}
        r = await http.get("/health", params={"max_overdue_s": "1h", "dead_letter_window_s": 0})
        assert r.status_code == 503
        assert "overdue" not in {p["check"] for p in r.json()["problems"]}

        r = await http.get("/schedules/calm/health")
        assert r.json() == {"id": "calm", "state": "ok", "reason": "", "since": None}
        assert (await http.get("/schedules/held/health")).json()["state"] == "paused"
        error(await http.get("/schedules/zz/health"), 404, "ScheduleNotFound", "id")
        error(await http.get("/health", params={"max_due": -1}), 400, "InvalidArgument", "max_due")
        r = await http.get("/health", params={"max_overdue_s": "soon"})
        error(r, 400, "InvalidArgument", "max_overdue_s")
        r = await http.get("/health", params={"dead_letter_window_s": "-5"})
        error(r, 400, "InvalidArgument", "dead_letter_window_s")
        error(await http.get("/health", params={"max_due": "x"}), 400, "InvalidArgument")

        assert (await http.get("/events")).json() == {"items": []}
        for i in range(3):
            await apublish_event(
                settings, "schedule_late", schedule_id="tick", reason=f"due {i}s ago"
            )
        await apublish_event(settings, "dead_letter", queue="default", task="t.x")
        items = (await http.get("/events")).json()["items"]
        assert [e["kind"] for e in items] == ["dead_letter"] + ["schedule_late"] * 3  # newest first
        assert items[1] == {**items[1], "schedule_id": "tick", "reason": "due 2s ago"}
        assert items[0]["queue"] == "default"
        r = await http.get("/events", params={"limit": 2, "after": items[3]["id"]})
        assert [e["reason"] for e in r.json()["items"]] == ["due 2s ago", "due 1s ago"]
        error(await http.get("/events", params={"limit": 0}), 400, "InvalidArgument", "limit")
        r = await http.get("/events", params={"after": "yesterday"})
        error(r, 400, "InvalidArgument", "after")


async def test_health_is_200_when_healthy(web: Web, settings: Settings) -> None:
    fast = fast_settings(settings).model_copy(
        update={"scheduler": SchedulerSettings(lease_ttl_ms=1000, lease_renew_ms=200)}
    )
    redis = connect(settings.url)
    scheduler = Scheduler(redis, fast)
    base = web() + "/api/v1"
    async with anyio.create_task_group() as tg, httpx.AsyncClient(base_url=base) as http:
        await tg.start(scheduler.run)
        try:

            async def healthy() -> bool:
                return (await http.get("/health")).status_code == 200

            await eventually(healthy)
            body = (await http.get("/health")).json()
            assert (body["ok"], body["problems"], body["schedules"]) == (True, [], [])
            assert body["leader"]
        finally:
            scheduler.stop()
    await redis.aclose()


async def test_workers_jobs_and_cancel(web: Web, client: rsched.Client, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=1))
    release = anyio.Event()
    cancelled = anyio.Event()

    @worker.task("t.wait")
    async def wait(job: rsched.Job) -> None:
        try:
            await release.wait()
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    base = web()
    api = base + "/api/v1"
    async with (
        anyio.create_task_group() as tg,
        httpx.AsyncClient(base_url=api) as http,
        httpx.AsyncClient(base_url=base) as browser,
    ):
        await tg.start(worker.run, None)
        try:
            await client.enqueue("t.wait", {}, execution_id="run-1")

            async def busy() -> bool:
                items = (await http.get("/workers")).json()["items"]
                return bool(items) and items[0]["running"] == 1

            await eventually(busy)
            await client.enqueue("t.wait", {"n": "<b>2</b>"}, execution_id="wait-2")
            await client.enqueue("t.wait", {}, execution_id="later-3", delay=600)

            (w,) = (await http.get("/workers")).json()["items"]
            assert w["id"] == worker.consumer
            assert (w["queues"], w["tasks"], w["concurrency"]) == (["default"], ["t.wait"], 1)
            assert w["pid"] > 0
            assert w["host"]
            assert [j["execution_id"] for j in w["jobs"]] == ["run-1"]
            assert w["started_at"] <= w["last_seen"]

            def ids(r: httpx.Response) -> list[tuple[str, str]]:
                assert r.status_code == 200, r.text
                return [(j["execution_id"], j["state"]) for j in r.json()["items"]]

            everything = [("run-1", "running"), ("wait-2", "queued"), ("later-3", "delayed")]
            assert ids(await http.get("/jobs")) == everything
            assert ids(await http.get("/jobs", params={"state": "queued"})) == [everything[1]]
            r = await http.get("/jobs", params={"queue": "default", "state": "running"})
            assert ids(r) == [everything[0]]
            assert ids(await http.get("/jobs", params={"queue": "other"})) == []
            first = await http.get("/jobs", params={"limit": 2})
            assert ids(first) == everything[:2]
            rest = await http.get("/jobs", params={"limit": 2, "cursor": first.json()["cursor"]})
            assert (ids(rest), rest.json()["cursor"]) == ([everything[2]], None)
            error(await http.get("/jobs", params={"state": "odd"}), 400, "InvalidArgument", "state")
            r = await http.get("/jobs", params={"queue": "bad queue"})
            error(r, 400, "InvalidArgument", "queue")
            r = await http.get("/jobs", params={"cursor": "x"})
            error(r, 400, "InvalidArgument", "cursor")
            error(await http.get("/jobs", params={"limit": 0}), 400, "InvalidArgument", "limit")

            job = (await http.get("/jobs/wait-2")).json()
            assert (job["state"], job["task"], job["payload"]) == (
                "queued",
                "t.wait",
                {"n": "<b>2</b>"},
            )
            assert (await http.get("/jobs/run-1")).json()["worker"] == worker.consumer
            error(await http.get("/jobs/nope"), 404, "JobNotFound", "execution_id")
            error(await http.get("/jobs/a b"), 400, "InvalidArgument", "execution_id")

            r = await http.post("/jobs/later-3/cancel")
            assert r.json() == {"execution_id": "later-3", "cancelled": "delayed"}
            error(await http.post("/jobs/later-3/cancel"), 404, "JobNotFound", "execution_id")
            error(await http.post("/jobs/a b/cancel"), 400, "InvalidArgument", "execution_id")

            # The queue page: a cancel button per job, a CSRF-checked form post.
            page = (await browser.get("/queues/default")).text
            assert 'aria-label="cancel wait-2"' in page
            token = browser.cookies["rsched_csrf"]
            form = {"execution_id": "wait-2"}
            assert (await browser.post("/queues/default/cancel", data=form)).status_code == 403
            r = await browser.post("/queues/default/cancel", data={**form, "csrf_token": token})
            assert r.status_code == 303
            assert "cancelled wait-2 (queued)" in bytes.fromhex(r.cookies["rsched_flash"]).decode()
            r = await browser.post("/queues/default/cancel", data={**form, "csrf_token": token})
            assert "does not wait or run" in bytes.fromhex(r.cookies["rsched_flash"]).decode()

            r = await http.post("/jobs/run-1/cancel")
            assert r.json() == {"execution_id": "run-1", "cancelled": "running"}
            with anyio.fail_after(WAIT_S):
                await cancelled.wait()

            async def gone() -> bool:
                return ids(await http.get("/jobs")) == []

            await eventually(gone)  # its worker records the outcome, then acknowledges
        finally:
            release.set()
            worker.stop()


async def test_runs(web: Web, client: rsched.Client, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("t.ok")
    async def ok(job: rsched.Job) -> None:
        pass

    @worker.task("t.boom")
    async def boom(job: rsched.Job) -> None:
        raise ValueError("<b>boom</b>")

    await client.add({"id": "rep", "task": "t.ok", "every": 3600})
    base = web()
    async with (
        anyio.create_task_group() as tg,
        httpx.AsyncClient(base_url=base + "/api/v1") as http,
    ):
        await tg.start(worker.run, None)
        try:
            await client.trigger("rep")
            await client.enqueue("t.ok", {}, execution_id="one")
            await client.enqueue("t.boom", {}, execution_id="bad", max_retries=0)

            async def ended() -> bool:
                items = (await http.get("/runs")).json()["items"]
                return sorted(r["status"] for r in items) == ["completed", "completed", "dead"]

            await eventually(ended)
        finally:
            worker.stop()

        def ids(r: httpx.Response) -> list[str]:
            assert r.status_code == 200, r.text
            return sorted(i["execution_id"] for i in r.json()["items"])

        (rep,) = (await http.get("/runs", params={"schedule": "rep"})).json()["items"]
        assert (rep["status"], rep["task"], rep["queue"]) == ("completed", "t.ok", "default")
        assert rep["execution_id"].startswith("rep@")
        assert rep["started_at"] <= rep["ended_at"]
        assert ids(await http.get("/runs", params={"status": "completed"})) == sorted(
            ["one", rep["execution_id"]]
        )
        (dead,) = (await http.get("/runs", params={"task": "t.boom"})).json()["items"]
        assert (dead["execution_id"], dead["status"]) == ("bad", "dead")
        assert "<b>boom</b>" in dead["error"]
        assert len(ids(await http.get("/runs", params={"since": "1h"}))) == 3
        future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        assert ids(await http.get("/runs", params={"since": future})) == []
        first = (await http.get("/runs", params={"limit": 2})).json()
        assert len(first["items"]) == 2
        rest = await http.get("/runs", params={"limit": 2, "cursor": first["cursor"]})
        assert len(rest.json()["items"]) == 1
        error(await http.get("/runs", params={"status": "odd"}), 400, "InvalidArgument", "status")
        error(await http.get("/runs", params={"since": "soon"}), 400, "InvalidArgument", "since")
        r = await http.get("/runs", params={"since": "2026-01-01T00:00:00"})
        error(r, 400, "InvalidArgument", "since")
        error(await http.get("/runs", params={"cursor": "x!"}), 400, "InvalidArgument", "cursor")
        error(await http.get("/runs", params={"limit": 0}), 400, "InvalidArgument", "limit")

        page = await http.get(base + "/runs", params={"status": "dead"})
        assert page.status_code == 200
        assert "&lt;b&gt;boom&lt;/b&gt;" in page.text
        assert "<b>boom" not in page.text
        assert ">bad</code>" in page.text
        page = await http.get(base + "/runs", params={"since": "soon"})  # said on the page
        assert page.status_code == 200
        assert "&#39;soon&#39;" in page.text
        assert "no runs match" in page.text


def test_openapi_and_no_cdn_docs(web: Web) -> None:
    base = web()
    doc = httpx.get(base + "/api/v1/openapi.json").json()
    paths = doc["paths"]
    for path in (
        "/api/v1/schedules",
        "/api/v1/schedules/{schedule_id}",
        "/api/v1/schedules/{schedule_id}/pause",
        "/api/v1/schedules/{schedule_id}/backfill",
        "/api/v1/schedules/{schedule_id}/executions",
        "/api/v1/schedules/{schedule_id}/next",
        "/api/v1/queues",
        "/api/v1/queues/{queue}/dead-letters",
        "/api/v1/queues/{queue}/dead-letters/requeue",
        "/api/v1/jobs",
        "/api/v1/stats",
        "/api/v1/health",
        "/api/v1/schedules/{schedule_id}/health",
        "/api/v1/events",
        "/api/v1/workers",
        "/api/v1/jobs/{execution_id}",
        "/api/v1/jobs/{execution_id}/cancel",
        "/api/v1/runs",
    ):
        assert path in paths, path
    assert set(paths["/api/v1/schedules/{schedule_id}"]) == {"get", "put", "patch", "delete"}
    assert "cron" in doc["components"]["schemas"]["Schedule"]["properties"]
    assert not any(p.startswith(("/schedules", "/queues")) for p in paths)  # pages are not API
    for docs in ("/docs", "/redoc", "/api/v1/docs"):
        assert httpx.get(base + docs).status_code == 404
    error(httpx.get(base + "/api/v1/nope"), 404, "NotFound")


def test_redis_unavailable_is_503(settings: Settings) -> None:
    down = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    with serve(down) as base:
        error(httpx.get(base + "/api/v1/health"), 503, "RedisUnavailable")
        error(httpx.get(base + "/api/v1/schedules"), 503, "RedisUnavailable")
        r = httpx.get(base + "/schedules")
        assert r.status_code == 503
        assert "cannot reach Redis" in r.text


def test_a_server_refusing_rsched_is_503(settings: Settings) -> None:
    with (
        Canned(b"-MOVED 1234 127.0.0.1:7000") as node,
        serve(settings.model_copy(update={"redis_url": node.url})) as base,
    ):
        error(httpx.get(base + "/api/v1/schedules"), 503, "WrongNode")


def test_read_only_refuses_every_write(web: Web, settings: Settings) -> None:
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.add(spec("a"))
    base = web(read_only=True)
    api = base + "/api/v1"
    writes = [
        ("POST", "/schedules", spec("b")),
        ("PUT", "/schedules/a", spec("a")),
        ("PATCH", "/schedules/a", {"every": 5}),
        ("DELETE", "/schedules/a", None),
        ("POST", "/schedules/a/pause", None),
        ("POST", "/schedules/a/resume", None),
        ("POST", "/schedules/a/trigger", None),
        ("POST", "/schedules/a/backfill", {"start": "2020-01-01", "end": "2020-01-02"}),
        ("POST", "/queues/default/dead-letters/requeue", {"all": True}),
        ("POST", "/queues/default/dead-letters/purge", {"all": True}),
        ("POST", "/jobs", {"task": "t"}),
        ("POST", "/jobs/x/cancel", None),
    ]
    for method, path, body in writes:
        error(httpx.request(method, api + path, json=body), 403, "ReadOnly")
    with httpx.Client() as browser:
        page = browser.get(base + "/schedules/a")
        assert page.status_code == 200
        assert '<form method="post"' not in page.text
        assert "read-only" in page.text
        token = browser.cookies["rsched_csrf"]
        r = browser.post(base + "/schedules/a/pause", data={"csrf_token": token})
        assert r.status_code == 403
        r = browser.post(base + "/queues/default/cancel", data={"csrf_token": token})
        assert r.status_code == 403
        assert "Workers" in browser.get(base + "/workers").text
    assert httpx.get(api + "/schedules/a").json()["paused"] is False


def test_authentication(web: Web) -> None:
    base = web(auth="admin:s3cret", token="tok-123")
    api = base + "/api/v1/schedules"
    error(httpx.get(api), 401, "Unauthorized")
    assert httpx.get(api, auth=("admin", "wrong")).status_code == 401
    assert httpx.get(api, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(api, headers={"Authorization": "Basic !!"}).status_code == 401
    assert httpx.get(api, auth=("admin", "s3cret")).status_code == 200
    assert httpx.get(api, headers={"Authorization": "Bearer tok-123"}).status_code == 200
    # Header-authenticated API writes need no CSRF token.
    r = httpx.post(api, json=spec("a"), headers={"Authorization": "Bearer tok-123"})
    assert r.status_code == 201
    # Static files are public; pages send a browser to the login form.
    assert httpx.get(base + "/static/htmx.min.js").status_code == 200
    r = httpx.get(base + "/schedules")
    assert r.status_code == 303
    assert r.headers["location"] == "/login?next=/schedules"

    with httpx.Client(base_url=base) as browser:
        browser.get("/login")
        token = browser.cookies["rsched_csrf"]
        bad = browser.post("/login", data={"csrf_token": token, "user": "admin", "password": "x"})
        assert bad.status_code == 401
        r = browser.post(
            "/login",
            data={"csrf_token": token, "user": "admin", "password": "s3cret", "next": "/queues"},
        )
        assert (r.status_code, r.headers["location"]) == (303, "/queues")
        assert "s3cret" not in browser.cookies["rsched_session"]
        assert browser.get("/schedules").status_code == 200
        # A cookie-authenticated API write needs the page's CSRF token in a header.
        error(browser.post("/api/v1/schedules/a/pause"), 403, "CSRFError")
        r = browser.post("/api/v1/schedules/a/pause", headers={"X-CSRF-Token": token})
        assert r.status_code == 200
        browser.post("/logout", data={"csrf_token": token})
        assert browser.get("/schedules").status_code == 303
    with httpx.Client(base_url=base) as browser:
        browser.get("/login")
        token = browser.cookies["rsched_csrf"]
        r = browser.post("/login", data={"csrf_token": token, "token": "tok-123", "next": "//x"})
        assert (r.status_code, r.headers["location"]) == (303, "/")


def test_csrf_and_cross_site_writes(web: Web, settings: Settings) -> None:
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.add(spec("a"))
    base = web()
    with httpx.Client(base_url=base) as browser:
        browser.get("/schedules/a")
        token = browser.cookies["rsched_csrf"]
        assert browser.post("/schedules/a/pause", data={"note": "x"}).status_code == 403
        r = browser.post("/schedules/a/pause", data={"note": "x", "csrf_token": "forged"})
        assert r.status_code == 403
        r = browser.post("/schedules/a/pause", data={"note": "x", "csrf_token": token})
        assert r.status_code == 303
        r = browser.post("/schedules/a/resume", headers={"X-CSRF-Token": token})
        assert r.status_code == 400  # not a form post
        r = browser.post(
            "/schedules/a/resume",
            data={"csrf_token": token},
            headers={"Origin": "http://evil.example"},
        )
        error_text = r.text
        assert r.status_code == 403
        assert "cross-site" in error_text
    api = base + "/api/v1/schedules/a/trigger"
    error(httpx.post(api, headers={"Origin": "http://evil.example"}), 403, "CrossSite")
    error(httpx.post(api, headers={"Sec-Fetch-Site": "cross-site"}), 403, "CrossSite")
    host = base.removeprefix("http://")
    assert httpx.post(api, headers={"Origin": f"http://{host}"}).status_code == 200


def test_headers_escaping_and_no_inline_script(web: Web, settings: Settings) -> None:
    evil = "<script>alert('x')</script>"
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.add(spec("evil", description=evil, payload={"html": evil}))
        c.pause("evil", evil)
    publish_event(settings, "dead_letter", task="t", error=evil)
    base = web()
    for path in (
        "/",
        "/schedules",
        "/schedules?q=evi",
        "/schedules/evil",
        "/queues",
        "/queues/default",
        "/workers",
        "/runs",
        "/api/v1/stats",
    ):
        r = httpx.get(base + path)
        assert r.status_code == 200, path
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert "unsafe-eval" not in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "same-origin"
        if path.startswith("/api"):
            continue
        assert "<script>alert" not in r.text
        assert all("src=" in tag for tag in re.findall(r"<script[^>]*>", r.text)), path
        assert " on" not in " ".join(re.findall(r"<[^>]+ on[a-z]+=", r.text))
    page = httpx.get(base + "/schedules/evil").text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
    assert page.count("&lt;script&gt;") >= 3  # description, pause note, payload
    overview = httpx.get(base + "/").text
    assert "error=</span>&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in overview  # an event


def test_base_path_and_mounting(settings: Settings) -> None:
    with rsched.SyncClient(settings.url, prefix=settings.prefix) as c:
        c.add(spec("a"))
    with serve(settings, base_path="/rsched/") as base:
        root = base.removesuffix("/rsched")
        r = httpx.get(root + "/")
        assert (r.status_code, r.headers["location"]) == (307, "/rsched/")
        pages = ("/", "/schedules", "/schedules/a", "/queues", "/queues/default", "/workers")
        for path in (*pages, "/runs"):
            page = httpx.get(base + path)
            assert page.status_code == 200, path
            _links_under(page.text, "/rsched/")
        assert httpx.get(base + "/static/htmx.min.js").status_code == 200
        assert httpx.get(base + "/api/v1/schedules/a").json()["id"] == "a"
        assert httpx.get(root + "/schedules").status_code == 404

    from fastapi import FastAPI

    from rsched.web import create_app

    parent = FastAPI()
    parent.mount("/ops/rsched", create_app(settings=settings))
    with run_app(parent) as root:
        page = httpx.get(root + "/ops/rsched/schedules/a")
        assert page.status_code == 200
        _links_under(page.text, "/ops/rsched/")
        assert httpx.get(root + "/ops/rsched/api/v1/schedules/a").json()["id"] == "a"
        assert httpx.get(root + "/ops/rsched/static/rsched.css").status_code == 200


def _links_under(html: str, base: str) -> None:
    links = re.findall(r'(?:href|src|action|hx-get)="(/[^"]*)"', html)
    assert links
    outside = [link for link in links if not link.startswith(base) and link != base.rstrip("/")]
    assert not outside, outside


def test_host_check_without_auth(web: Web) -> None:
    base = web(allowed_hosts=("127.0.0.1", "localhost"))
    assert httpx.get(base + "/api/v1/stats").status_code == 200
    r = httpx.get(base + "/api/v1/stats", headers={"Host": "evil.example"})
    error(r, 400, "BadHost")
    assert httpx.get(base + "/", headers={"Host": "localhost:1234"}).status_code == 200


def test_cli_refuses_public_bind_without_auth() -> None:
    run = [sys.executable, "-m", "rsched._cli.main", "web", "--host", "0.0.0.0"]
    r = subprocess.run(run, capture_output=True, text=True, timeout=30, env=_env())
    assert r.returncode == 2
    assert "--auth" in r.stderr
    assert "--token" in r.stderr
    assert "Traceback" not in r.stderr


def test_cli_without_the_web_extra() -> None:
    code = (
        "import sys; sys.modules['fastapi'] = None\n"
        "from rsched._cli.main import main; sys.exit(main(['web']))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert "pip install 'rsched[web]'" in r.stderr


@pytest.mark.slow
def test_cli_serves(settings: Settings) -> None:
    port = free_port()
    run = [sys.executable, "-m", "rsched._cli.main", "web", "--port", str(port), "--read-only"]
    env = {**_env(), "RSCHED_REDIS_URL": settings.url, "RSCHED_PREFIX": settings.prefix}
    proc = subprocess.Popen(run, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert "serving" in proc.stderr.readline()
        url = f"http://127.0.0.1:{port}/api/v1/stats"
        for _ in range(100):
            try:
                r = httpx.get(url)
                break
            except httpx.TransportError:
                import time

                time.sleep(0.05)
        assert r.json()["schedules"]["total"] == 0
        error(httpx.post(f"http://127.0.0.1:{port}/api/v1/jobs", json={}), 403, "ReadOnly")
        r = httpx.get(url, headers={"Host": "evil.example"})
        assert r.status_code == 400
    finally:
        proc.terminate()
        proc.wait(10)


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("RSCHED_WEB_")}


def test_basic_header_helper() -> None:
    # The auth check reads standard basic credentials.
    from rsched.web._security import Auth

    creds = base64.b64encode(b"u:p:w").decode()
    assert Auth(basic="u:p:w").header_ok(f"Basic {creds}")
    assert not Auth(token="t").header_ok(f"Basic {creds}")
    with pytest.raises(ValueError, match="user:password"):
        Auth(basic="nocolon")


async def test_the_live_part_of_a_removed_schedule_stops_polling(
    web: Web, client: rsched.Client
) -> None:
    await client.add({"id": "gone", "task": "t", "every": 60})
    async with httpx.AsyncClient(base_url=web()) as http:
        assert (await http.get("/_live/schedules/gone")).status_code == 200
        await client.remove("gone")
        r = await http.get("/_live/schedules/gone")
    # 286: htmx stops polling, no error for a page being left after a removal.
    assert r.status_code == 286
    assert "removed" in r.text
