"""The job page of the dashboard (progress, log, attempts, error and traceback, cancel and
retry) and the HTTP API's ``/jobs/{execution_id}/logs``."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import httpx
import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

import rsched
from rsched import Settings
from tests.support.waiting import eventually
from tests.support.web import api_error
from tests.support.worker_app import fast_settings

Web = Callable[..., str]


def _flash(r: httpx.Response) -> str:
    return bytes.fromhex(r.cookies["rsched_flash"]).decode()


async def test_a_running_job_shows_its_progress_and_log_live(
    web: Web, client: rsched.Client, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    release = anyio.Event()

    @worker.task("t.slow")
    async def slow(job: rsched.Job) -> dict[str, int]:
        job.set_progress(0.4, "4 of 10 <files>")
        job.log("copying <b>a</b>")
        await release.wait()
        job.log("done", level="warning")
        return {"copied": 10}

    base = web()
    async with (
        anyio.create_task_group() as tg,
        httpx.AsyncClient(base_url=base + "/api/v1") as http,
        httpx.AsyncClient(base_url=base) as browser,
    ):
        await tg.start(worker.run, None)
        try:
            await client.enqueue("t.slow", {"n": 1}, execution_id="s1")

            async def logged() -> bool:
                return bool((await http.get("/jobs/s1/logs")).json()["items"])

            await eventually(logged)
            (line,) = (await http.get("/jobs/s1/logs")).json()["items"]
            assert (line["attempt"], line["level"], line["message"]) == (
                1,
                "info",
                "copying <b>a</b>",
            )
            assert (await http.get("/jobs/s1")).json()["progress"]["fraction"] == 0.4
            assert (await http.get("/jobs/s1/logs", params={"attempt": 2})).json()["items"] == []
            api_error(
                await http.get("/jobs/s1/logs", params={"attempt": 0}),
                400,
                "InvalidArgument",
                "attempt",
            )
            api_error(await http.get("/jobs/a b/logs"), 400, "InvalidArgument", "execution_id")

            page = (await browser.get("/jobs/s1")).text
            assert 'hx-get="/_live/jobs/s1"' in page  # live while it runs
            assert '<progress max="1" value="0.4">' in page
            assert "4 of 10 &lt;files&gt;" in page
            assert "copying &lt;b&gt;a&lt;/b&gt;" in page  # escaped
            assert f"<code>{worker.consumer}</code>" in page
            assert "/jobs/s1/cancel" in page
            fragment = (await browser.get("/_live/jobs/s1")).text
            assert 'id="live"' in fragment
            assert 'id="attempts"' not in fragment  # read with the page only
            assert "<html" not in fragment

            release.set()

            async def completed() -> bool:
                return bool((await http.get("/jobs/s1")).json()["state"] == "completed")

            await eventually(completed)

            async def both_lines() -> bool:
                return len((await http.get("/jobs/s1/logs")).json()["items"]) == 2

            await eventually(both_lines)
            page = (await browser.get("/jobs/s1")).text
            assert "hx-get" not in page  # ended: no more polling
            assert "&#34;copied&#34;: 10" in page
            assert "level-warning" in page
            assert "/jobs/s1/cancel" not in page
            assert "o-completed" in page  # the attempts table
            # A poll that finds the job ended reloads the whole page once (its attempts).
            r = await browser.get("/_live/jobs/s1", headers={"HX-Request": "true"})
            assert r.headers["HX-Refresh"] == "true"
        finally:
            release.set()
            worker.stop()


async def test_a_dead_job_shows_its_traceback_and_can_be_retried(
    web: Web, client: rsched.Client, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("t.boom")
    async def boom(job: rsched.Job) -> None:
        job.log("about to fail")
        raise ValueError("no <such> file")

    await client.enqueue("t.boom", {}, execution_id="d1", max_retries=0)
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run, None)

        async def dead() -> bool:
            return (await client.job("d1")).state == "dead"

        await eventually(dead)
        worker.stop()

    base = web()
    async with httpx.AsyncClient(base_url=base) as browser:
        page = (await browser.get("/jobs/d1")).text
        assert "ValueError: no &lt;such&gt; file" in page
        assert 'class="traceback"' in page
        assert "Traceback (most recent call last)" in page
        assert "/jobs/d1/requeue" in page
        assert "hx-get" not in page
        letter = (await client.dead_letters("default")).items[0]
        letter_page = (await browser.get(f"/queues/default/dead/{letter.entry_id}")).text
        assert '<a href="/jobs/d1"><code>d1</code></a>' in letter_page  # linked to the job

        token = browser.cookies["rsched_csrf"]
        r = await browser.post("/jobs/d1/requeue", data={"csrf_token": "forged"})
        assert r.status_code == 403
        r = await browser.post("/jobs/d1/requeue", data={"csrf_token": token})
        assert r.status_code == 303
        assert "requeued d1 on queue default (attempt 1)" in _flash(r)
        assert (await client.job("d1")).state == "queued"
        r = await browser.post("/jobs/d1/requeue", data={"csrf_token": token})
        assert "has no dead letter" in _flash(r)

    read_only = web(read_only=True)
    async with httpx.AsyncClient(base_url=read_only) as browser:
        page = (await browser.get("/jobs/d1")).text
        assert '<form method="post"' not in page
        token = browser.cookies["rsched_csrf"]
        r = await browser.post("/jobs/d1/requeue", data={"csrf_token": token})
        assert r.status_code == 403
        assert (await browser.get("/jobs/nope")).status_code == 404
