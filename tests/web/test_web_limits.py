"""Flow-control limits over HTTP: the API's routes (list, set, clear, a key's waiting jobs, bad
input, read-only), jobs enqueued with limits, and the dashboard's Limits page, a key's page, job
page and schedule page with jobs waiting on their key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

import rsched
from rsched import Settings
from rsched._core.rules import Priority
from tests.support.waiting import eventually
from tests.support.web import api_error
from tests.support.worker_app import fast_settings

Web = Callable[..., str]


def flash(r: httpx.Response) -> str:
    assert r.status_code == 303, r.text
    return bytes.fromhex(r.cookies["rsched_flash"]).decode()


async def test_list_set_and_clear_overrides(web: Web) -> None:
    base = web()
    async with httpx.AsyncClient(base_url=base + "/api/v1") as http:
        assert (await http.get("/limits")).json() == {"items": [], "cursor": None}
        r = await http.put("/limits/crm", json={"rate": "100/m"})
        assert r.json() == {"key": "crm", "concurrency": None, "rate": "100/m", "waiting_keys": 0}
        r = await http.put("/limits/customer:*", json={"concurrency": 0, "rate": [10, 30]})
        assert r.json()["rate"] == "10/30s"
        assert (await http.put("/limits/a/b", json={"concurrency": 3})).json()["key"] == "a/b"

        items = {i["key"]: i for i in (await http.get("/limits")).json()["items"]}
        assert sorted(items) == ["a/b", "crm", "customer:*"]
        assert items["crm"] == {
            "key": "crm",
            "template": "",
            "concurrency": None,
            "rate": "100/m",
            "holders": 0,
            "waiting": 0,
            "starts": 0,
            "override": {"r": [100, 60_000]},
        }
        assert items["customer:*"]["override"] == {"c": 0, "r": [10, 30_000]}
        r = await http.get("/limits", params={"match": "cust*"})
        assert [i["key"] for i in r.json()["items"]] == ["customer:*"]

        r = await http.delete("/limits/customer:*")
        assert r.json() == {"key": "customer:*", "cleared": True, "waiting_keys": 0}
        await http.delete("/limits/a/b")
        assert [i["key"] for i in (await http.get("/limits")).json()["items"]] == ["crm"]

        assert (await http.put("/limits/<i>x", json={"concurrency": 0})).status_code == 200
        page = (await http.get(base + "/limits")).text  # the dashboard's Limits page
        assert "<code>&lt;i&gt;x</code>" in page
        assert "<i>x" not in page
        assert "0 (paused)" in page


async def test_bad_input_is_400_naming_the_field(web: Web) -> None:
    async with httpx.AsyncClient(base_url=web() + "/api/v1") as http:
        body = api_error(
            await http.put("/limits/crm", json={"rate": "fast"}), 400, "InvalidArgument", "rate"
        )
        assert body["message"].startswith("rate: 'fast' is not a rate; give it as count/period")
        cases: list[tuple[str, Any, str]] = [
            ("/limits/crm", {"concurrency": -1}, "concurrency"),
            ("/limits/crm", {"concurrency": True}, "concurrency"),
            ("/limits/crm", {"concurrency": "2"}, "concurrency"),
            ("/limits/crm", {}, "concurrency"),
            ("/limits/crm", {"rate": None, "concurrency": None}, "concurrency"),
            ("/limits/crm", {"conc": 2}, "conc"),
            ("/limits/crm", [1], "body"),
            ("/limits/a{b", {"concurrency": 1}, "key"),
        ]
        for path, data, field in cases:
            body = api_error(await http.put(path, json=data), 400, "InvalidArgument", field)
            assert "rsched.Limit" not in body["message"]
        body = api_error(
            await http.put("/limits/crm", json={}), 400, "InvalidArgument", "concurrency"
        )
        assert '"concurrency" (0 pauses the key), "rate" ("100/m") or both' in body["message"]
        api_error(await http.get("/limits", params={"limit": 0}), 400, "InvalidArgument", "limit")
        api_error(await http.delete("/limits/a{b"), 400, "InvalidArgument", "key")
        assert (await http.get("/limits")).json()["items"] == []  # nothing was written


async def test_enqueue_with_limits(web: Web, client: rsched.Client) -> None:
    async with httpx.AsyncClient(base_url=web() + "/api/v1") as http:
        job = {"task": "t", "payload": {"c": 7}, "execution_id": "j1"}
        limits = [{"key": "c:{c}", "concurrency": 1}, {"key": "crm", "rate": "100/m"}]
        r = await http.post("/jobs", json={**job, "limits": limits})
        assert r.status_code == 201, r.text
        assert (await http.get("/jobs/j1")).json()["state"] == "queued"
        cases: list[tuple[Any, str, str]] = [
            ([{"key": "c:{c}", "rate": "fast"}], "limits[0].rate", "'fast' is not a rate"),
            ([{"key": "c:{x}", "concurrency": 1}], "limits", "needs the payload field 'x'"),
            ([{"key": "c", "conc": 1}], "limits[0]", "unknown field(s) ['conc']"),
            (
                [{"key": "c", "concurrency": 1}, 3],
                "limits[1]",
                'give each limit as in "limits": [{"key": "crm", "rate": "100/m"}]',
            ),
            ({"key": "c", "concurrency": 1}, "limits", "Input should be a valid list"),
        ]
        for given, field, message in cases:
            r = await http.post("/jobs", json={**job, "execution_id": "j2", "limits": given})
            body = api_error(r, 422, "InvalidJob", field)
            assert message in body["message"], body
        api_error(await http.get("/jobs/j2"), 404, "JobNotFound", "execution_id")
    assert {r.key for r in await client.limits()} == set()  # no worker took j1 yet


def test_read_only_refuses_overrides(web: Web) -> None:
    base = web(read_only=True)
    for method in ("PUT", "DELETE"):
        r = httpx.request(method, base + "/api/v1/limits/crm", json={"concurrency": 1})
        api_error(r, 403, "ReadOnly")
    assert httpx.get(base + "/api/v1/limits").status_code == 200
    assert httpx.get(base + "/api/v1/limits/crm/waiting").json() == {"items": []}
    with httpx.Client(base_url=base) as browser:
        page = browser.get("/limits")
        assert page.status_code == 200
        assert '<form method="post"' not in page.text
        page = browser.get("/limits/crm")
        assert page.status_code == 200
        assert "no job waits on this key" in page.text
        assert '<form method="post"' not in page.text
        token = browser.cookies["rsched_csrf"]
        data = {"csrf_token": token, "key": "crm", "concurrency": "1"}
        assert browser.post("/limits/set", data=data).status_code == 403
        assert browser.post("/limits/clear", data=data).status_code == 403


def test_overrides_need_authentication_and_the_csrf_token(web: Web) -> None:
    base = web(token="tok-123")
    api = base + "/api/v1/limits/crm"
    api_error(httpx.put(api, json={"concurrency": 1}), 401, "Unauthorized")
    api_error(httpx.delete(api, headers={"Origin": "http://evil.example"}), 401, "Unauthorized")
    bearer = {"Authorization": "Bearer tok-123"}
    assert httpx.put(api, json={"concurrency": 1}, headers=bearer).status_code == 200
    r = httpx.put(api, json={"concurrency": 1}, headers={**bearer, "Sec-Fetch-Site": "cross-site"})
    api_error(r, 403, "CrossSite")
    with httpx.Client(base_url=base) as browser:
        browser.get("/login")
        token = browser.cookies["rsched_csrf"]
        assert (
            browser.post("/login", data={"csrf_token": token, "token": "tok-123"}).status_code
            == 303
        )
        api_error(browser.delete("/api/v1/limits/crm"), 403, "CSRFError")
        assert (
            browser.delete("/api/v1/limits/crm", headers={"X-CSRF-Token": token}).status_code == 200
        )
        assert browser.post("/limits/set", data={"key": "crm", "rate": "1/s"}).status_code == 403


async def test_the_dashboard_with_a_job_waiting_on_its_key(
    web: Web, client: rsched.Client, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=2))
    release = anyio.Event()

    @worker.task("t.wait")
    async def wait(job: rsched.Job) -> None:
        await release.wait()

    await client.add(
        {
            "id": "sync",
            "task": "t.wait",
            "every": 3600,
            "payload": {"customer_id": 3},
            "limits": [
                {"key": "customer:{customer_id}", "concurrency": 1},
                {"key": "crm", "rate": "100/m"},
            ],
        }
    )
    base = web()
    async with (
        anyio.create_task_group() as tg,
        httpx.AsyncClient(base_url=base) as browser,
    ):
        await tg.start(worker.run, None)
        try:
            key = [rsched.Limit("k", concurrency=1)]
            await client.enqueue("t.wait", {}, execution_id="first", limits=key)
            await client.enqueue("t.wait", {"n": "<b>2</b>"}, execution_id="second", limits=key)

            async def waits() -> bool:
                r = await browser.get("/api/v1/jobs/second")
                return r.status_code == 200 and r.json()["state"] == "waiting"

            await eventually(waits)
            assert (await browser.get("/api/v1/jobs/second")).json()["limit"] == "k"

            page = await browser.get("/limits")
            assert page.status_code == 200
            assert 'href="/limits" aria-current="page">Limits</a>' in page.text
            (row,) = [r for r in page.text.split("<tr>") if "<code>k</code>" in r]
            cells = [c.split(">", 1)[1].split("<", 1)[0] for c in row.split("<td")[1:]]
            assert cells[2:7] == ["1", "-", "1", "1", "-"]  # concurrency, rate, holders, waiting
            live = await browser.get("/_live/limits")
            assert "<code>k</code>" in live.text
            assert 'hx-get="/_live/limits"' in live.text

            job = (await browser.get("/jobs/second")).text
            assert "o-waiting" in job
            assert "waits on limit key &#39;k&#39;" in job
            assert '<a href="/limits/k"><code>k</code></a>' in job
            assert "&lt;b&gt;2&lt;/b&gt;" in job
            assert "<b>2</b>" not in job
            queue = (await browser.get("/queues/default")).text
            assert '<a href="/jobs/first"><code>first</code></a>' in queue

            schedule = (await browser.get("/schedules/sync")).text
            assert (
                '<a href="/limits?match=customer%3A%2A"><code>customer:{customer_id}</code></a>'
                in schedule
            )
            assert "concurrency 1" in schedule
            assert "rate 100/m" in schedule
            # The editor shows the limits as the API takes them, and none where there are none.
            edit = (await browser.get("/schedules/sync/edit")).text
            assert "&#34;key&#34;: &#34;customer:{customer_id}&#34;" in edit
            await client.add({"id": "plain", "task": "t", "every": 60})
            assert "&#34;limits&#34;" not in (await browser.get("/schedules/plain/edit")).text

            token = browser.cookies["rsched_csrf"]
            r = await browser.post("/limits/set", data={"key": "k", "concurrency": "2"})
            assert r.status_code == 403  # no CSRF token
            r = await browser.post(
                "/limits/set", data={"csrf_token": token, "key": "k", "concurrency": "x"}
            )
            assert "concurrency: &#39;x&#39;" not in flash(r)
            assert "concurrency: 'x' is not a whole number" in flash(r)
            r = await browser.post(
                "/limits/set", data={"csrf_token": token, "key": "k", "rate": "fast"}
            )
            assert "rate: 'fast' is not a rate" in flash(r)
            r = await browser.post("/limits/set", data={"csrf_token": token, "key": "k"})
            assert "give a concurrency (0 pauses the key), a rate or both" in flash(r)
            r = await browser.post(
                "/limits/set",
                data={"csrf_token": token, "key": "k", "concurrency": "2", "rate": ""},
            )
            assert flash(r) == (
                '{"ok":true,"text":"set limit key \'k\': concurrency 2; the waiting jobs of 1 '
                'key(s) are looked at again"}'
            )

            async def both_run() -> bool:
                return (await client.job("second")).state == "running"

            await eventually(both_run)
            page = await browser.get("/limits")
            assert 'aria-label="clear the override of k"' in page.text
            assert "concurrency 2" in page.text
            r = await browser.post("/limits/clear", data={"csrf_token": token, "key": "k"})
            assert "cleared limit key &#39;k&#39;" not in flash(r)
            assert "cleared limit key 'k': the declared numbers hold again" in flash(r)
            assert [r.override for r in await client.limits(match="k")] == [None]

            r = await browser.post("/jobs/second/cancel", data={"csrf_token": token})
            assert "cancelling second: its worker stops it" in flash(r)
            r = await browser.get("/jobs/nope")
            assert r.status_code == 404
        finally:
            release.set()
            worker.stop()


async def test_waiting_jobs_bad_input_and_routes_that_share_the_path(web: Web) -> None:
    async with httpx.AsyncClient(base_url=web() + "/api/v1") as http:
        assert (await http.get("/limits/crm/waiting")).json() == {"items": []}
        for given in ("0", "1001", "x"):
            r = await http.get("/limits/crm/waiting", params={"limit": given})
            api_error(r, 400, "InvalidArgument", "limit")
        body = api_error(await http.get("/limits/a{b/waiting"), 400, "InvalidArgument", "key")
        assert body["message"].startswith("key: limit key 'a{b' holds '{'")
        api_error(await http.get("/limits/customer:*/waiting"), 400, "InvalidArgument", "key")
        api_error(await http.get("/limits//waiting"), 400, "InvalidArgument", "key")
        # A key that ends in /waiting is still a key to PUT and DELETE, and has waiting jobs.
        r = await http.put("/limits/x/waiting", json={"concurrency": 1})
        assert r.json()["key"] == "x/waiting"
        assert [i["key"] for i in (await http.get("/limits")).json()["items"]] == ["x/waiting"]
        assert (await http.get("/limits/x/waiting/waiting")).json() == {"items": []}
        assert (await http.delete("/limits/x/waiting")).json()["key"] == "x/waiting"
        assert (await http.get("/limits")).json()["items"] == []


async def test_a_keys_page_lists_its_waiting_jobs_in_order(
    web: Web, client: rsched.Client, settings: Settings
) -> None:
    key = "<i>k</i>"  # HTML, and a '/' in the path
    path = quote(key, safe="/")  # as the pages link it: %3Ci%3Ek%3C/i%3E
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=2))
    release = anyio.Event()

    @worker.task("t.wait")
    async def wait(job: rsched.Job) -> None:
        await release.wait()

    base = web()
    async with (
        anyio.create_task_group() as tg,
        httpx.AsyncClient(base_url=base) as browser,
    ):
        await tg.start(worker.run, None)
        try:
            limits = [rsched.Limit(key, concurrency=1)]
            await client.enqueue("t.wait", {}, execution_id="first", limits=limits)

            async def runs() -> bool:
                return (await client.job("first")).state == "running"

            await eventually(runs)
            # Enqueued low, normal, high, normal: they start high first, then by arrival.
            order: list[tuple[str, Priority]] = [
                ("w-low", "low"),
                ("w-n1", "normal"),
                ("w-high", "high"),
                ("w-n2", "normal"),
            ]
            for job_id, level in order:
                await client.enqueue(
                    "t.wait", {"n": "<b>x</b>"}, execution_id=job_id, limits=limits, priority=level
                )

            async def all_wait() -> bool:
                r = await browser.get(f"/api/v1/limits/{path}/waiting")
                return len(r.json()["items"]) == 4

            await eventually(all_wait)
            items = (await browser.get(f"/api/v1/limits/{path}/waiting")).json()["items"]
            expected = ["w-high", "w-n1", "w-n2", "w-low"]
            assert [i["execution_id"] for i in items] == expected
            assert {(i["state"], i["limit"], i["task"]) for i in items} == {
                ("waiting", key, "t.wait")
            }
            assert items[0] == (await browser.get("/api/v1/jobs/w-high")).json() | {"history": []}
            r = await browser.get(f"/api/v1/limits/{path}/waiting", params={"limit": 2})
            assert [i["execution_id"] for i in r.json()["items"]] == expected[:2]

            listing = (await browser.get("/limits")).text
            shown = "<code>&lt;i&gt;k&lt;/i&gt;</code>"
            assert f'<a href="/limits/{path}" title="its waiting jobs">{shown}</a>' in listing
            page = await browser.get(f"/limits/{path}")
            assert page.status_code == 200
            assert "<i>k</i>" not in page.text
            assert "&lt;b&gt;" not in page.text  # payloads stay on the job page
            assert '<h1><span class="muted">limit key</span> &lt;i&gt;k&lt;/i&gt;</h1>' in page.text
            assert 'href="/limits" aria-current="page">Limits</a>' in page.text
            at = [page.text.index(f'<a href="/jobs/{j}"><code>{j}</code></a>') for j in expected]
            assert at == sorted(at)
            assert "<td>high</td>" in page.text
            assert '<a href="/jobs/first">' not in page.text  # it holds the key: not waiting
            big = [c.split("<", 1)[0] for c in page.text.split('<p class="big')[1:]]
            assert [c.split(">", 1)[1] for c in big] == ["1", "-", "1", "4", "-"]
            live = (await browser.get(f"/_live/limits/{path}")).text
            assert f'hx-get="/_live/limits/{path}"' in live
            assert '<a href="/jobs/w-low"><code>w-low</code></a>' in live
            job = (await browser.get("/jobs/w-n1")).text
            assert f'<a href="/limits/{path}">{shown}</a>' in job

            # The override form on the key's page comes back to it.
            token = browser.cookies["rsched_csrf"]
            data = {"csrf_token": token, "key": key, "from": "key", "concurrency": "2"}
            r = await browser.post("/limits/set", data=data)
            assert r.headers["location"] == "/limits/" + quote(key, safe="")
            assert "set limit key '<i>k</i>': concurrency 2" in flash(r)

            async def two_hold() -> bool:
                return (await client.limit(key)).holders == 2

            await eventually(two_hold)
            page = await browser.get(r.headers["location"])
            assert page.status_code == 200
            assert "&lt;i&gt;k&lt;/i&gt;" in page.text
            assert '<a href="/jobs/w-high">' not in page.text
            assert 'aria-label="clear the override of &lt;i&gt;k&lt;/i&gt;"' in page.text
            r = await browser.post("/limits/clear", data=data)
            assert r.headers["location"] == "/limits/" + quote(key, safe="")
            assert "cleared limit key '<i>k</i>'" in flash(r)
            r = await browser.post("/limits/set", data={**data, "concurrency": "x"})
            assert r.headers["location"] == "/limits/" + quote(key, safe="")
            assert "concurrency: 'x' is not a whole number" in flash(r)
            r = await browser.post("/limits/clear", data={**data, "from": ""})
            assert r.headers["location"] == "/limits"

            page = await browser.get("/limits/nobody")
            assert "no job waits on this key" in page.text
            assert "No job holds this key, waits on it or started in its rate window." in page.text
            r = await browser.get("/limits/a{b")
            assert r.status_code == 400
            assert "limit key &#39;a{b&#39; holds" in r.text
        finally:
            release.set()
            worker.stop()
