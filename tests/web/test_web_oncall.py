"""The dashboard's on-call parts over real HTTP against the real servers: the activity charts and
their API, every scheduler with its role, events filtered and folded, dead letters grouped, a
queue's live work first, a schedule's run durations, its runs link and its failure streak."""

from __future__ import annotations

import re
from collections.abc import Callable

import anyio
import httpx
import pytest
from redis.asyncio import Redis

pytest.importorskip("fastapi", reason="the web extra is not installed")

import rsched
from rsched import Settings
from rsched._core.keys import Keys
from tests.support.waiting import eventually
from tests.support.web import apublish_event, make_dead_letters
from tests.support.worker_app import fast_settings
from tests.support.workers import running

Web = Callable[..., str]


async def test_overview_draws_activity_and_lists_every_scheduler(
    web: Web, client: rsched.Client, settings: Settings, redis: Redis
) -> None:
    await make_dead_letters(settings, 2)  # counted: 2 dead
    # A leader of the one partition and a standby beside it (as their beats leave them).
    now = await client.stats()
    keys = Keys(settings.prefix)
    await redis.zadd(keys.schedulers, {"sched-a": now.now_ms, "sched-b": now.now_ms - 2_000})
    await redis.set(keys.leader, "7:sched-a", px=60_000)
    for i in range(6):
        await apublish_event(settings, "dead_letter", queue="default", task="web.boom",
                             entry_id=f"1-{i}", reason="max_retries")  # fmt: skip
    await apublish_event(settings, "schedule_late", schedule_id="tick", reason="due 3s ago")
    base = web()
    async with httpx.AsyncClient(base_url=base) as http:
        r = await http.get("/")
        assert r.status_code == 200, r.text
        page = r.text
        assert page.count('<svg class="chart"') == 3
        assert 'aria-label="activity per minute, the last hour"' in page
        assert "<title>" in page
        assert 'id="schedulers"' in page
        section = page[page.index('id="schedulers"') : page.index('id="events"')]
        assert section.index("sched-a") < section.index("sched-b")
        assert "leader" in section
        assert "standby" in section
        events = page[page.index('id="events"') :]
        assert "×8" in events  # the worker's two and six more dead letters alike: one line
        assert events.count("k-dead_letter") == 1
        r = await http.get("/", params={"kind": "schedule_late"})
        events = r.text[r.text.index('id="events"') :]
        assert "due 3s ago" in events
        assert "×8" not in events
        assert (await http.get("/_live/overview", params={"kind": "nope"})).status_code == 200

        r = await http.get("/api/v1/activity", params={"minutes": 5, "hours": 2})
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["minutes"]) == 5
        assert len(body["hours"]) == 2
        assert sum(m["dead"] for m in body["minutes"]) == 2
        assert body["lag_bounds_ms"][0] == 10
        r = await http.get("/api/v1/activity", params={"minutes": 61})
        assert r.status_code == 400


async def test_queue_page_lists_live_work_first_and_groups_dead_letters(
    web: Web, client: rsched.Client, settings: Settings
) -> None:
    await make_dead_letters(settings, 3)
    await client.enqueue("web.waits", {}, delay=3600)
    async with httpx.AsyncClient(base_url=web()) as http:
        page = (await http.get("/queues/default")).text
    assert page.index('id="jobs"') < page.index('id="dead-groups"') < page.index('id="dead"')
    depth = page[page.index('id="depth"') : page.index('id="jobs"')]
    assert 'depth per minute, the last hour"' in depth
    async with httpx.AsyncClient(base_url=web()) as http:
        r = await http.get("/api/v1/queues/default/depth", params={"minutes": 3})
    assert r.status_code == 200, r.text
    assert [set(p) for p in r.json()["items"]] == [{"start", "waiting", "delayed"}] * 3
    groups = page[page.index('id="dead-groups"') : page.index('id="dead"')]
    assert "web.boom" in groups
    assert "<b>3</b>" in groups
    assert "ValueError" in groups
    assert "boom &lt;b&gt;" in groups  # the message as text


async def test_schedule_page_durations_runs_link_and_failure_streak(
    web: Web, client: rsched.Client, settings: Settings, redis: Redis
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    fail = {"on": False}

    @worker.task("web.flaky")
    async def flaky(job: rsched.Job) -> None:
        await anyio.sleep(0.02)
        if fail["on"]:
            raise ValueError("down")

    await client.add({"id": "nightly", "task": "web.flaky", "every": 3600, "max_retries": 0})

    async def ran(n: int) -> bool:
        history = (await client.history("nightly", limit=100)).items
        return sum(e.event in ("completed", "dead") for e in history) == n

    async with running(worker, None):
        await client.trigger("nightly")
        await eventually(lambda: ran(1))
        fail["on"] = True
        for n in (2, 3):
            await client.trigger("nightly")
            await eventually(lambda n=n: ran(n))
    history = (await client.history("nightly", limit=100)).items
    first_dead = min(e.at for e in history if e.event == "fired" and e.origin == "manual")
    async with httpx.AsyncClient(base_url=web()) as http:
        page = (await http.get("/schedules/nightly")).text
    assert 'href="/runs?schedule=nightly"' in page
    assert '<svg class="chart"' in page
    assert "o-dead" in page
    assert '<th class="num">duration</th>' in page
    assert 'id="failing-since"' in page
    since = page[page.index('id="failing-since"') :]
    assert "2 runs in a row" in since[:600]
    assert first_dead.isoformat(timespec="seconds")[:10] in since[:600]


async def test_the_new_schedule_form_creates_one_and_previews_its_runs(
    web: Web, client: rsched.Client
) -> None:
    await client.set_calendar("holidays", dates=["2030-12-25"])
    async with httpx.AsyncClient(base_url=web()) as http:
        r = await http.get("/new-schedule")
        assert r.status_code == 200, r.text
        page = r.text
        assert '<datalist id="zones">' in page
        assert '<option value="Europe/Rome">' in page
        assert 'name="exclude" value="holidays"' in page
        assert 'hx-get="/new-schedule/preview"' in page
        token = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert token

        r = await http.get(
            "/new-schedule/preview",
            params={"trigger": "cron", "cron": "30 9 * * 1-5", "timezone": "Europe/Rome"},
        )
        assert r.status_code == 200, r.text
        assert r.text.count("<li>") == 5
        assert "09:30" in r.text  # in the schedule's own zone beside the viewer's
        r = await http.get(
            "/new-schedule/preview", params={"trigger": "cron", "cron": "61 * * * *"}
        )
        assert "cron" in r.text
        assert 'class="bad' in r.text
        r = await http.get("/new-schedule/preview", params={"trigger": "every", "payload": "{"})
        assert "payload" in r.text

        fields = {
            "csrf_token": token.group(1), "id": "from-form", "task": "reports.build",
            "queue": "reports", "trigger": "every", "every": "15m", "cron": "ignored",
            "timezone": "Europe/Rome", "overlap": "buffer_one", "misfire": "skip",
            "max_retries": "5", "timeout_s": "10m", "exclude": "holidays",
            "payload": '{"kind": "daily"}',
            "limits": '[{"key": "report:{kind}", "concurrency": 1}]',
        }  # fmt: skip
        r = await http.post("/new-schedule", data=fields)
        assert r.status_code == 303, r.text
        assert r.headers["location"].endswith("/schedules/from-form")
        s = await client.get("from-form")
        assert (s.task, s.queue, s.every, s.cron, s.timezone) == (
            "reports.build", "reports", 900, None, "Europe/Rome",
        )  # fmt: skip
        assert (s.overlap, s.misfire, s.max_retries, s.timeout_s) == ("buffer_one", "skip", 5, 600)
        assert s.exclude == ("holidays",)
        assert s.payload == {"kind": "daily"}
        assert s.limits[0].key == "report:{kind}"

        bad = {**fields, "id": "other", "every": "soon"}
        r = await http.post("/new-schedule", data=bad)
        assert r.status_code == 400
        assert "every" in r.text
        assert 'value="other"' in r.text  # what was typed comes back
        r = await http.post("/new-schedule", data={**fields, "id": "x", "payload": "[1]"})
        assert r.status_code == 400
        assert "payload" in r.text

        # The JSON view for experts still adds.
        assert 'id="spec"' in (await http.get("/new-schedule?view=json")).text
        spec = '{"id": "from-json", "task": "t", "cron": "0 2 * * *"}'
        r = await http.post("/new-schedule", data={"csrf_token": token.group(1), "spec": spec})
        assert r.status_code == 303, r.text
        assert (await client.get("from-json")).cron == "0 2 * * *"


async def test_the_run_chart_draws_runs_the_history_no_longer_keeps(
    web: Web, client: rsched.Client, settings: Settings
) -> None:
    # The history keeps history_limit (15) runs; the chart has 50 places: the older runs come
    # from the runs log, each once.
    assert settings.history_limit == 15
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("web.quick")
    async def quick(job: rsched.Job) -> None:
        pass

    await client.add({"id": "often", "task": "web.quick", "every": 3600})
    await client.add({"id": "other", "task": "web.quick", "every": 3600})

    async def ended(sid: str, n: int) -> bool:
        return len((await client.runs(schedule_id=sid, status="completed", limit=100)).items) == n

    async with running(worker, None):
        for n in range(1, 21):
            await client.trigger("often")
            await eventually(lambda n=n: ended("often", n))
        await client.trigger("other")  # another schedule's run in the log: not drawn
        await eventually(lambda: ended("other", 1))
    async with httpx.AsyncClient(base_url=web()) as http:
        page = (await http.get("/schedules/often")).text
        live = (await http.get("/_live/schedules/often")).text
    chart = page[page.index('<svg class="chart"') : page.index("</svg>")]
    assert chart.count('<rect class="bar o-completed"') == 20
    assert "the last 20 run(s) (the older ones from the runs log)" in page
    rows = page[page.index('<table class="history"') :]
    assert rows[: rows.index("</table>")].count("<tr>") == 1 + 15  # the listed: those kept
    assert live.count('<rect class="bar o-completed"') == 20  # the live part draws it alike
