"""Jobs across queues and schedules against real servers: listing, one job by execution id,
kept results, cancelling a queued, delayed or running job; the CLI commands over them."""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta

import anyio
import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.keys import GROUP, Keys
from rsched._core.rules import Priority
from rsched._core.settings import Settings
from tests.support.command import Cli
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings
from tests.support.workers import running, settled


async def in_thread(cli: Cli, *args: str) -> tuple[int, str, str]:
    return await anyio.to_thread.run_sync(lambda: cli(*args))


def _blocking_worker(settings: Settings) -> tuple[rsched.Worker, anyio.Event, list[str]]:
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=2))
    release = anyio.Event()
    events: list[str] = []

    @worker.task("t.block")
    async def block(job: rsched.Job) -> dict[str, int]:
        events.append(f"start:{job.execution_id}")
        try:
            await release.wait()
        except anyio.get_cancelled_exc_class():
            events.append(f"cancelled:{job.execution_id}")
            raise
        return {"n": int(job.payload.get("n", 0))}

    return worker, release, events


async def test_jobs_lists_queued_delayed_and_running(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    worker, release, events = _blocking_worker(settings)
    for i in range(3):
        await client.enqueue("t.block", {"n": i}, execution_id=f"q-{i}")
    await client.enqueue("t.block", execution_id="later", delay=3600)
    await client.enqueue("t.block", execution_id="urgent", priority="high")
    queued = await client.jobs(state="queued")
    assert [j.execution_id for j in queued] == ["urgent", "q-0", "q-1", "q-2"]
    assert queued.items[0].priority == "high"
    (delayed,) = (await client.jobs(state="delayed")).items
    assert delayed.execution_id == "later"
    assert delayed.due_at is not None
    assert delayed.due_at > datetime.now(UTC)
    first = await client.jobs(limit=2)
    assert len(first.items) == 2
    assert first.cursor is not None
    rest = await client.jobs(limit=10, cursor=first.cursor)
    assert len(first.items) + len(rest.items) == 5
    assert rest.cursor is None
    async with running(worker, redis):
        await eventually(lambda: len(events) == 2)
        busy = await client.jobs(state="running")
        assert {j.execution_id for j in busy} == {"urgent", "q-0"}
        assert {j.worker for j in busy} == {worker.consumer}
        job = await client.job("urgent")
        assert (job.state, job.worker, job.task) == ("running", worker.consumer, "t.block")

        async def started() -> bool:  # from the worker's record, at its next heartbeat
            return (await client.job("urgent")).started_at is not None

        await eventually(started)
        release.set()
        await eventually(lambda: settled(redis, settings))
    assert await client.result("q-2") == {"n": 2}
    done = await client.job("q-1")
    assert (done.state, done.result) == ("completed", {"n": 1})


async def test_jobs_refuses_bad_arguments(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    with pytest.raises(rsched.InvalidArgument, match="state"):
        await client.jobs(state="done")
    with pytest.raises(rsched.InvalidArgument, match="limit"):
        await client.jobs(limit=0)
    with pytest.raises(rsched.InvalidArgument, match="cursor"):
        await client.jobs(cursor="x")
    with pytest.raises(rsched.InvalidArgument, match="execution_id"):
        await client.job("has space")
    with pytest.raises(rsched.JobNotFound, match="'nope' not found"):
        await client.job("nope")
    with pytest.raises(rsched.JobNotFound):
        await client.cancel("nope")


async def test_a_scheduled_job_shows_its_history(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    await client.add({"id": "nightly", "task": "t.block", "every": 3600})
    fired = await client.trigger("nightly")
    job = await client.job(fired.execution_id)
    assert (job.state, job.schedule_id, job.queue) == ("queued", "nightly", "default")
    assert [e.event for e in job.history] == ["fired"]
    assert await client.cancel(fired.execution_id) == "queued"
    job = await client.job(fired.execution_id)
    assert job.state == "cancelled"
    assert [e.event for e in job.history] == ["cancelled", "fired"]
    assert job.history[0].reason == "cancelled"
    assert await redis.xlen(Keys(settings.prefix).queue("default")) == 0


async def test_cancel_a_delayed_job(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    await client.enqueue("t.block", execution_id="later", delay=3600)
    assert await client.cancel("later") == "delayed"
    assert (await client.jobs()).items == []
    with pytest.raises(rsched.JobNotFound):
        await client.cancel("later")


async def test_cancel_a_running_job_cancels_its_handler(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    worker, _, events = _blocking_worker(settings)
    await client.add({"id": "hourly", "task": "t.block", "every": 3600})
    async with running(worker, redis):
        fired = await client.trigger("hourly")
        await eventually(lambda: f"start:{fired.execution_id}" in events)
        assert await client.cancel(fired.execution_id) == "running"
        await eventually(lambda: f"cancelled:{fired.execution_id}" in events)
        await eventually(lambda: settled(redis, settings))
    job = await client.job(fired.execution_id)
    assert job.state == "cancelled"
    assert job.history[0].reason == "cancelled"
    assert job.result is None


async def test_an_ended_enqueued_job_is_read_from_the_runs_log(
    redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("t.boom")
    async def boom(job: rsched.Job) -> None:
        raise RuntimeError("no")

    @worker.task("t.quiet")
    async def quiet(job: rsched.Job) -> None:
        pass

    async with running(worker, redis):
        await client.enqueue("t.boom", execution_id="doomed", max_retries=0)
        await client.enqueue("t.quiet", execution_id="done-quietly")
        await eventually(lambda: settled(redis, settings))
    dead = await client.job("doomed")  # no schedule history, no kept result: the runs log
    assert (dead.state, dead.queue, dead.task, dead.attempt) == ("dead", "default", "t.boom", 1)
    assert dead.worker
    done = await client.job("done-quietly")  # returned None: nothing kept
    assert (done.state, done.task) == ("completed", "t.quiet")


async def test_results_are_capped_and_expire(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    worker = rsched.Worker(settings=fast_settings(settings, result_max_bytes=100, result_ttl_s=1))

    @worker.task("t.echo")
    async def echo(job: rsched.Job) -> object:
        return job.payload.get("v")

    async with running(worker, redis):
        await client.enqueue("t.echo", {"v": [1, "a"]}, execution_id="small")
        await client.enqueue("t.echo", {"v": "x" * 200}, execution_id="big")
        await client.enqueue("t.echo", {}, execution_id="none")
        await eventually(lambda: settled(redis, settings))
    assert await client.result("small") == [1, "a"]
    assert await client.result("big") is None
    assert await client.result("none") is None
    keys = Keys(settings.prefix)
    assert 0 < await redis.pttl(keys.result("small")) <= 1000
    assert not await redis.exists(keys.result("none"), keys.result("big"))


async def test_cli_workers_jobs_job_cancel(redis: Redis, settings: Settings, cli: Cli) -> None:
    client = rsched.Client(redis, settings)
    worker, release, events = _blocking_worker(settings)
    code, out, _ = await in_thread(cli, "workers")
    assert (code, out.strip()) == (
        0,
        "no live worker (none has heartbeated within its last few heartbeats)",
    )
    await client.enqueue("t.block", {"n": 7}, execution_id="a-1")
    await client.enqueue("t.block", execution_id="b-1", delay=600)
    async with running(worker, redis):
        await eventually(lambda: "start:a-1" in events)

        async def listed() -> bool:  # at the worker's next heartbeat
            return [w.running for w in await client.workers()] == [1]

        await eventually(listed)
        code, out, _ = await in_thread(cli, "workers")
        assert code == 0
        assert worker.consumer in out
        assert "1/2" in out
        code, out, _ = await in_thread(cli, "--json", "workers")
        (w,) = orjson.loads(out)["workers"]
        assert w["jobs"][0]["execution_id"] == "a-1"
        code, out, _ = await in_thread(cli, "jobs")
        assert code == 0
        assert "a-1" in out
        assert "b-1" in out
        code, out, _ = await in_thread(cli, "--json", "jobs", "--state", "delayed")
        assert [j["execution_id"] for j in orjson.loads(out)["jobs"]] == ["b-1"]
        code, out, _ = await in_thread(cli, "job", "a-1")
        assert code == 0
        assert "running" in out
        assert worker.consumer in out
        code, out, _ = await in_thread(cli, "cancel", "b-1")
        assert (code, out.strip()) == (0, "cancelled b-1 (delayed: removed from its queue)")
        code, _, err = await in_thread(cli, "cancel", "b-1")
        assert code == 1
        assert "'b-1' not found" in err
        code, out, _ = await in_thread(cli, "stats")
        assert "LIVE WORKERS" in out
        release.set()
        await eventually(lambda: settled(redis, settings))
    code, out, _ = await in_thread(cli, "--json", "job", "a-1")
    assert orjson.loads(out)["result"] == {"n": 7}


async def test_add_warns_when_no_live_worker_has_the_task(
    redis: Redis, settings: Settings, cli: Cli
) -> None:
    worker, _, _ = _blocking_worker(settings)
    code, _, err = await in_thread(cli, "add", "a", "--task", "t.block", "--every", "1h")
    assert code == 0
    assert "warning: no live worker reads queue 'default' (none is live)" in err
    async with running(worker, redis):
        code, _, err = await in_thread(cli, "add", "b", "--task", "t.block", "--every", "1h")
        assert (code, err) == (0, "")


async def test_why_a_job_waits_from_enqueue_to_every_view(
    redis: Redis, settings: Settings, cli: Cli
) -> None:
    pytest.importorskip("fastapi")
    import httpx

    from tests.support.web import serve

    client = rsched.Client(redis, settings)
    worker, _, _ = _blocking_worker(settings)  # reads queue default, has task t.block only
    async with running(worker, redis):
        await eventually(lambda: _live(client))
        code, out, err = await in_thread(cli, "enqueue", "t.other", "--id", "lost")
        assert code == 0, err
        assert out.strip() == "lost enqueued on queue default"
        assert _warnings(err) == ["no live worker of queue 'default' has task 't.other' (1 live"]
        code, _, err = await in_thread(cli, "enqueue", "t.block", "--id", "later", "--delay", "1h")
        assert (code, _warnings(err)) == (0, [])
        code, _, err = await in_thread(cli, "enqueue", "t.block", "--queue", "nobody")
        assert _warnings(err) == ["no live worker reads queue 'nobody' (1 live"]

        # The worker takes it back every few seconds to look again: between a take and its
        # return it runs for a moment, so each view is read until it shows the job waiting.
        seen: list[rsched.JobInfo] = []

        async def held_back() -> bool:
            seen.append(await client.job("lost"))
            return "holds it back" in (seen[-1].waiting or "")

        await eventually(held_back)
        waiting = seen[-1].waiting
        assert waiting is not None
        assert waiting.startswith(
            "no live worker of queue 'default' has task 't.other': a worker of queue 'default' "
            "without task 't.other' holds it back since "
        )
        assert waiting.endswith(
            "dead-letters it (unknown_task) once worker.unknown_task_grace_s (10m by default) "
            "has passed"
        )
        assert (await client.job("later")).waiting == "enqueued with a delay"

        async def shown(*args: str) -> str:
            return (await in_thread(cli, *args))[1]

        await eventually(lambda: _has(shown("job", "lost"), f"waiting:       {waiting}\n"))
        await eventually(lambda: _has(shown("jobs", "--queue", "default"), waiting[:60]))
        head = (await shown("jobs", "--queue", "default")).splitlines()[0]
        assert head.split()[-1] == "WAITING"
        listed = orjson.loads(await shown("--json", "jobs"))["jobs"]
        reasons = {j["execution_id"]: j["waiting"] for j in listed}
        assert reasons["later"] == "enqueued with a delay"
        assert "no live worker reads queue 'nobody'; it waits until one does" in reasons.values()
        with serve(settings) as url:
            async with httpx.AsyncClient(base_url=url) as http:

                async def api() -> str:
                    return str((await http.get("/api/v1/jobs/lost")).json()["waiting"])

                async def page() -> str:
                    return (await http.get("/queues/default")).text

                await eventually(lambda: _has(api(), waiting))
                await eventually(lambda: _has(page(), "holds it back since"))
                assert "enqueued with a delay" in await page()


async def _has(text: Awaitable[str], part: str) -> bool:
    return part in await text


async def _live(client: rsched.Client) -> bool:
    return len(await client.workers()) == 1


def _warnings(err: str) -> list[str]:
    """The start of each warning the CLI wrote (the in-process worker logs there too)."""
    return [
        line.removeprefix("warning: ").split(" worker(s)")[0]
        for line in err.splitlines()
        if line.startswith("warning: ")
    ]


async def test_web_pages_show_live_workers_and_a_queues_jobs(
    redis: Redis, settings: Settings
) -> None:
    pytest.importorskip("fastapi")
    import httpx

    from tests.support.web import serve

    client = rsched.Client(redis, settings)
    worker, release, events = _blocking_worker(settings)
    await client.enqueue("t.block", execution_id="web-run")
    await client.enqueue("t.block", execution_id="web-later", delay=600)
    async with running(worker, redis):
        await eventually(lambda: "start:web-run" in events)
        with serve(settings) as url:
            async with httpx.AsyncClient(base_url=url) as http:
                page = (await http.get("/queues")).text
                assert worker.consumer in page
                assert "needs a newer rsched" not in page
                page = (await http.get("/queues/default")).text
                assert "web-run" in page
                assert "web-later" in page
                assert "delayed" in page
                assert "need a newer rsched" not in page
        release.set()
        await eventually(lambda: settled(redis, settings))


def test_sync_client_reads_and_cancels_jobs(redis_url: str, prefix: str) -> None:
    with rsched.SyncClient(redis_url, prefix) as client:
        assert client.workers() == []
        client.enqueue("t.block", {"n": 1}, execution_id="sync-1")
        (job,) = client.jobs(state="queued").items
        assert job.execution_id == "sync-1"
        assert client.job("sync-1").payload == {"n": 1}
        assert client.result("sync-1") is None
        assert client.cancel("sync-1") == "queued"
        assert client.job("sync-1").state == "cancelled"  # from the runs log
        with pytest.raises(rsched.JobNotFound):
            client.cancel("sync-1")


# --- priority and start of one job, in every state -----------------------------------------

LEVELS: tuple[Priority, ...] = ("high", "normal", "low")


async def test_job_says_priority_and_start_in_every_state(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    # Heartbeats far apart: a running job's start comes from its entry's delivery until the
    # worker's record lists it.
    worker = rsched.Worker(
        settings=fast_settings(settings, concurrency=20, heartbeat_s=30, visibility_timeout_s=60)
    )
    release = anyio.Event()
    began: dict[str, datetime] = {}

    @worker.task("t.block")
    async def block(job: rsched.Job) -> None:
        began[job.execution_id] = datetime.now(UTC)
        await release.wait()

    @worker.task("t.ok")
    async def ok(job: rsched.Job) -> None:
        began[job.execution_id] = datetime.now(UTC)

    @worker.task("t.boom")
    async def boom(job: rsched.Job) -> None:
        began[job.execution_id] = datetime.now(UTC)
        raise RuntimeError("no")

    @worker.task("t.later")
    async def later(job: rsched.Job) -> None:
        raise rsched.Retry(delay_s=3600)

    fired: dict[str, str] = {}
    for p in LEVELS:
        await client.enqueue("t.ok", queue="idle", execution_id=f"queued-{p}", priority=p)
        await client.enqueue("t.ok", execution_id=f"delayed-{p}", priority=p, delay=3600)
        await client.enqueue("t.ok", queue="idle", execution_id=f"cancelled-{p}", priority=p)
        assert await client.cancel(f"cancelled-{p}") == "queued"
        await client.add({"id": f"every-{p}", "task": "t.ok", "every": 3600, "priority": p})
    async with running(worker, redis):
        for p in LEVELS:
            await client.enqueue("t.block", execution_id=f"running-{p}", priority=p)
            await client.enqueue("t.ok", execution_id=f"completed-{p}", priority=p)
            await client.enqueue("t.boom", execution_id=f"dead-{p}", priority=p, max_retries=0)
            await client.enqueue("t.later", execution_id=f"retrying-{p}", priority=p)
            fired[p] = (await client.trigger(f"every-{p}")).execution_id

        async def all_ran() -> bool:
            retrying = [await client.job(f"retrying-{p}") for p in LEVELS]
            return len(began) == 12 and all(j.attempt == 2 for j in retrying)

        await eventually(all_ran)
        for p in LEVELS:
            for name in ("queued", "delayed", "cancelled", "retrying"):
                job = await client.job(f"{name}-{p}")
                assert (job.state, job.priority, job.started_at) == (
                    "cancelled" if name == "cancelled" else "delayed" if name != "queued"
                    else "queued", p, None,
                ), job  # fmt: skip
            job = await client.job(f"running-{p}")
            assert (job.state, job.priority) == ("running", p)
            assert job.started_at is not None
            assert abs(job.started_at - began[job.execution_id]).total_seconds() < 2
            for eid, state in ((f"completed-{p}", "completed"), (f"dead-{p}", "dead"),
                               (fired[p], "completed")):  # fmt: skip
                job = await client.job(eid)
                assert (job.state, job.priority, job.queue) == (state, p, "default"), job
                assert job.started_at is not None
                assert abs(job.started_at - began[eid]).total_seconds() < 2
        listed = {j.execution_id: j for j in (await client.jobs(state="running")).items}
        assert {eid: j.priority for eid, j in listed.items()} == {f"running-{p}": p for p in LEVELS}
        for eid, job in listed.items():
            assert job.started_at is not None
            assert abs(job.started_at - began[eid]).total_seconds() < 2
        release.set()


async def test_a_running_jobs_start_holds_across_heartbeats(
    redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    worker, release, events = _blocking_worker(settings)  # heartbeats every 0.2 s
    await client.enqueue("t.block", execution_id="long", priority="low")
    async with running(worker, redis):
        await eventually(lambda: "start:long" in events)
        first = await client.job("long")  # from the entry's delivery: not heartbeated yet
        assert first.started_at is not None

        async def heartbeated() -> bool:  # the entry's delivery time moved on past the start
            stream = Keys(settings.prefix).queue("default", "low")
            (entry,) = await redis.xpending_range(stream, GROUP, "-", "+", 1)
            idle = timedelta(milliseconds=int(entry["time_since_delivered"]))
            return (datetime.now(UTC) - idle - first_start).total_seconds() > 1

        first_start = first.started_at
        await eventually(heartbeated)
        again = await client.job("long")  # from the worker's record
        assert (again.state, again.priority) == ("running", "low")
        assert again.started_at is not None
        assert abs((again.started_at - first_start).total_seconds()) < 0.5
        release.set()
        await eventually(lambda: settled(redis, settings))
    done = await client.job("long")
    assert (done.state, done.priority) == ("completed", "low")
    assert done.started_at is not None
    assert abs((done.started_at - again.started_at).total_seconds()) < 0.05


async def test_an_ended_scheduled_job_trimmed_from_the_runs_log_keeps_its_start(
    redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    worker, release, _ = _blocking_worker(settings)
    release.set()
    await client.add({"id": "hourly", "task": "t.block", "every": 3600})
    async with running(worker, redis):
        fired = await client.trigger("hourly")
        await eventually(lambda: settled(redis, settings))
    recorded = await client.job(fired.execution_id)
    assert recorded.started_at is not None
    await redis.delete(Keys(settings.prefix).runs)  # the history alone knows it now
    job = await client.job(fired.execution_id)
    assert job.state == "completed"
    # Its running event; the record's start is its end less its run, measured apart: they agree
    # to within the time between the start script and the handler's start (more when loaded).
    assert job.started_at is not None
    assert abs((job.started_at - recorded.started_at).total_seconds()) < 1
