"""``rsched-worker`` processes: SIGKILL, SIGTERM drain, second signal, poison, Redis restarts."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import anyio
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.keys import GROUP, Keys
from rsched._core.settings import Settings
from rsched._redis.connection import connect
from rsched._store.queues import QueueStore
from tests.support.paths import ROOT
from tests.support.processes import Proc
from tests.support.servers import Server
from tests.support.waiting import eventually
from tests.support.worker_app import any_, fast_settings, marks_key
from tests.support.workers import running, settled, start_worker

pytestmark = pytest.mark.slow

Spawn = Callable[..., Proc]


async def marks(redis: Redis, settings: Settings) -> list[list[str]]:
    return [m.split(":") for m in await any_(redis).lrange(marks_key(settings.prefix), 0, -1)]


@pytest.mark.cluster
async def test_sigkill_mid_job_another_worker_completes_it(
    redis: Redis, settings: Settings, spawn: Spawn
) -> None:
    store = QueueStore(redis, Keys(settings.prefix))
    first = start_worker(spawn, settings)
    exec_id = (await store.enqueue("app.sleep", {"s": 1.0})).execution_id
    await eventually(lambda: _has(redis, settings, "start"))
    first.signal(signal.SIGKILL)
    first.wait()
    second = start_worker(spawn, settings)
    await eventually(lambda: _has(redis, settings, "end"))
    await eventually(lambda: settled(redis, settings))
    got = await marks(redis, settings)
    assert [m[0] for m in got] == ["start", "start", "end"]
    assert {m[1] for m in got} == {exec_id}
    assert got[0][3] == str(first.proc.pid)
    assert got[2][3] == str(second.proc.pid)
    assert "job.reclaimed" in second.output()


async def _has(redis: Redis, settings: Settings, what: str) -> bool:
    return any(m[0] == what for m in await marks(redis, settings))


async def test_sigterm_drains_in_flight_jobs_and_exits_0(
    redis: Redis, settings: Settings, spawn: Spawn
) -> None:
    store = QueueStore(redis, Keys(settings.prefix))
    proc = start_worker(spawn, settings, RSCHED_WORKER__SHUTDOWN_GRACE_PERIOD_S="10")
    await store.enqueue("app.sleep", {"s": 0.8})
    await store.enqueue("app.sync_sleep", {"s": 0.8})
    await eventually(lambda: _count(redis, settings, "start", 2))
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0
    assert [m[0] for m in await marks(redis, settings)].count("end") == 2
    assert await settled(redis, settings)
    assert "event=worker.draining" in proc.output()
    assert "event=job.end" in proc.output()
    assert "duration_ms=" in proc.output()


async def _count(redis: Redis, settings: Settings, what: str, n: int) -> bool:
    return [m[0] for m in await marks(redis, settings)].count(what) >= n


async def test_second_signal_exits_at_once_leaving_the_job_pending(
    redis: Redis, settings: Settings, spawn: Spawn
) -> None:
    store = QueueStore(redis, Keys(settings.prefix))
    proc = start_worker(spawn, settings, RSCHED_WORKER__SHUTDOWN_GRACE_PERIOD_S="60")
    await store.enqueue("app.sleep", {"s": 30})
    await eventually(lambda: _has(redis, settings, "start"))
    proc.signal(signal.SIGTERM)
    proc.wait_for("event=worker.draining")
    started = time.monotonic()
    proc.signal(signal.SIGINT)
    assert proc.wait() == 1
    assert time.monotonic() - started < 5
    pending = await redis.xpending(Keys(settings.prefix).queue("default"), GROUP)
    assert pending["pending"] == 1


async def test_a_job_that_crashes_its_worker_becomes_poison(
    redis: Redis, settings: Settings, spawn: Spawn
) -> None:
    store = QueueStore(redis, Keys(settings.prefix))
    env = {"RSCHED_WORKER__MAX_DELIVERIES": "1"}
    first = start_worker(spawn, settings, **env)
    exec_id = (await store.enqueue("app.crash")).execution_id
    assert first.wait() == 3  # the handler killed its worker
    second = start_worker(spawn, settings, **env)
    await eventually(lambda: _dead(store))
    (letter,) = (await store.dead_letters())[0]
    assert letter.reason == "poison"
    assert letter.deliveries == 2
    assert letter.execution_id == exec_id
    assert second.proc.poll() is None


async def _dead(store: QueueStore) -> bool:
    return bool((await store.dead_letters())[0])


async def test_unknown_flags_and_bad_worker_spec_fail_cleanly(spawn: Spawn) -> None:
    proc = spawn(
        "rsched._cli.worker_process",
        "tests.support.worker_app:nothing",
        env={"PYTHONPATH": str(ROOT)},
    )
    assert proc.wait() == 2
    assert "has no 'nothing'" in proc.output()
    proc = spawn("rsched._cli.worker_process", "no_such_module:worker")
    assert proc.wait() == 2
    assert "cannot import" in proc.output()


@pytest.mark.parametrize("appendonly", [True, False])
async def test_redis_restart_while_the_worker_runs(
    make_server: Callable[..., Server], prefix: str, appendonly: bool
) -> None:
    srv = make_server(appendonly=appendonly)
    settings = fast_settings(Settings(redis_url=srv.url, prefix=prefix))
    client = connect(srv.url)
    store = QueueStore(client, Keys(prefix))
    worker = rsched.Worker(settings=settings)
    seen: list[str] = []

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        seen.append(job.execution_id)

    try:
        async with running(worker, client):
            await store.enqueue("t", execution_id="before")
            await eventually(lambda: seen == ["before"])
            srv.kill()
            await anyio.sleep(0.5)  # the worker sees errors and backs off
            srv.start()
            await eventually(lambda: _enqueue_ok(store))
            await eventually(lambda: "after" in seen)
    finally:
        await client.aclose()


async def _enqueue_ok(store: QueueStore) -> bool:
    try:
        await store.enqueue("t", execution_id="after")
    except Exception:
        return False
    return True


async def test_a_forced_stop_hands_every_running_job_to_another_worker(
    redis: Redis, settings: Settings, spawn: Spawn
) -> None:
    """Two async jobs and a sync one: the second signal hands all three back, no job is shown
    running on the worker that left, and the next worker starts each within seconds although
    the visibility timeout is a minute."""
    client = rsched.Client(redis, settings)
    env = {
        "RSCHED_WORKER__VISIBILITY_TIMEOUT_S": "60",
        "RSCHED_WORKER__SHUTDOWN_GRACE_PERIOD_S": "60",
    }
    first = start_worker(spawn, settings, **env)
    ids = {
        (await client.enqueue("app.sleep", {"s": 60})).execution_id,
        (await client.enqueue("app.sleep", {"s": 60})).execution_id,
        (await client.enqueue("app.sync_sleep", {"s": 60})).execution_id,
    }
    await eventually(lambda: _count(redis, settings, "start", 3))
    first.signal(signal.SIGTERM)
    first.wait_for("event=worker.draining")
    first.signal(signal.SIGTERM)
    assert first.wait() == 1
    assert "handed_back=3" in first.output()
    waiting = (await client.jobs()).items
    assert {(j.execution_id, j.state, j.worker) for j in waiting} == {
        (i, "queued", None) for i in ids
    }
    assert (await client.job(min(ids))).state == "queued"
    second = start_worker(spawn, settings, **env)
    started = time.monotonic()
    await eventually(lambda: _count(redis, settings, "start", 6))
    assert time.monotonic() - started < 10
    got = await marks(redis, settings)
    assert {m[1] for m in got[3:]} == ids
    assert {m[3] for m in got[3:]} == {str(second.proc.pid)}
    running = (await client.jobs(state="running")).items
    assert {j.execution_id for j in running} == ids
    assert all(j.worker and j.worker in second.output() for j in running)
