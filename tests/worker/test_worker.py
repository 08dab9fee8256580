"""The worker against real servers, in-process: outcomes, retries, dead letters, reclaiming."""

from __future__ import annotations

import threading
import time

import anyio
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.keys import GROUP, Keys
from rsched._core.settings import Settings
from rsched._store.queues import QueueStore
from tests.support.waiting import WAIT_S, eventually
from tests.support.worker_app import any_, fast_settings
from tests.support.workers import running, settled, store_for


@pytest.mark.cluster
async def test_runs_async_and_sync_handlers(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    seen: list[rsched.Job] = []
    threads: list[str] = []

    @worker.task("t.async")
    async def run_async(job: rsched.Job) -> None:
        seen.append(job)

    @worker.task("t.sync")
    def run_sync(job: rsched.Job) -> None:
        threads.append(threading.current_thread().name)
        seen.append(job)

    store = store_for(redis, settings)
    async with running(worker, redis):
        first = (await store.enqueue("t.async", {"n": 1})).execution_id
        await store.enqueue("t.sync", {"n": 2})
        await eventually(lambda: len(seen) == 2)
        await eventually(lambda: settled(redis, settings))
    by_task = {j.task: j for j in seen}
    job = by_task["t.async"]
    assert job.execution_id == first
    assert job.payload == {"n": 1}
    assert job.attempt == 1
    assert job.queue == "default"
    assert job.schedule_id is None
    assert job.scheduled_at is not None
    assert job.scheduled_at.tzinfo is not None
    assert threads
    assert threads[0] != threading.main_thread().name
    assert worker.completed_total == 2


async def test_enqueue_with_delay(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    ran_at: list[float] = []

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        ran_at.append(time.monotonic())

    store = store_for(redis, settings)
    async with running(worker, redis):
        start = time.monotonic()
        await store.enqueue("t", delay_s=0.5)
        assert (await store.queue_stats())["default"]["delayed"] == 1
        await eventually(lambda: bool(ran_at))
    assert 0.45 <= ran_at[0] - start <= 3.0


@pytest.mark.cluster
async def test_retries_with_backoff_then_dead_letter_then_requeue(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    attempts: list[tuple[int, float]] = []
    healthy = False

    @worker.task("t.flaky")
    async def flaky(job: rsched.Job) -> None:
        attempts.append((job.attempt, time.monotonic()))
        if not healthy:
            raise ValueError(f"boom {job.attempt}")

    store = store_for(redis, settings)
    async with running(worker, redis):
        queued = await store.enqueue(
            "t.flaky", {"x": 1}, max_retries=2, retry_base_s=0.3, retry_jitter=0
        )
        exec_id = queued.execution_id
        await eventually(lambda: len(attempts) == 3)
        await eventually(lambda: _dead_count(store, 1))
        assert [a for a, _ in attempts] == [1, 2, 3]
        gap1 = attempts[1][1] - attempts[0][1]
        gap2 = attempts[2][1] - attempts[1][1]
        assert 0.25 <= gap1 <= 2.0, gap1  # base 0.3 s
        assert 0.5 <= gap2 <= 3.0, gap2  # 0.3 × 2
        (letters, _) = await store.dead_letters()
        letter = letters[0]
        assert letter.execution_id == exec_id
        assert letter.reason == "max_retries"
        assert letter.error_type == "ValueError"
        assert letter.error_message == "boom 3"
        assert "ValueError: boom 3" in letter.traceback
        assert letter.attempt == 3
        assert letter.payload == {"x": 1}
        assert letter.task == "t.flaky"
        assert letter.dead_at.tzinfo is not None

        healthy = True
        assert await store.requeue("default", [letter.entry_id]) == 1
        assert await store.requeue("default", [letter.entry_id]) == 0  # already moved
        await eventually(lambda: len(attempts) == 4)
        await eventually(lambda: settled(redis, settings))
    assert attempts[-1][0] == 1  # a requeued job starts over at attempt 1
    assert await _dead_count(store, 0)


async def _dead_count(store: QueueStore, n: int) -> bool:
    return (await store.queue_stats())["default"]["dead"] == n


async def test_retry_exception_sets_the_delay(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    attempts: list[tuple[int, float]] = []

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        attempts.append((job.attempt, time.monotonic()))
        if job.attempt == 1:
            raise rsched.Retry(delay_s=0.4)

    store = store_for(redis, settings)
    async with running(worker, redis):
        # retry_base_s is 30 s: only the requested 0.4 s lets the test finish in time.
        await store.enqueue("t")
        await eventually(lambda: len(attempts) == 2)
        await eventually(lambda: settled(redis, settings))
    assert 0.35 <= attempts[1][1] - attempts[0][1] <= 3.0


async def test_unknown_task_and_malformed_entries_are_dead_lettered(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, unknown_task_grace_s=0))
    ok: list[str] = []

    @worker.task("t.ok")
    async def handler(job: rsched.Job) -> None:
        ok.append(job.execution_id)

    keys = Keys(settings.prefix)
    store = store_for(redis, settings)
    async with running(worker, redis):
        await store.enqueue("os.system", {"cmd": "rm -rf /"})
        await redis.xadd(keys.queue("default"), {"hello": "world"})
        await redis.xadd(
            keys.queue("default"), {"execution_id": "e1", "task": "t.ok", "payload": "{nope"}
        )
        await redis.xadd(keys.queue("default"), {"execution_id": "e2", "task": "t.ok"})
        await eventually(lambda: ok == ["e2"])
        await eventually(lambda: _dead_count(store, 3))
        await eventually(lambda: settled(redis, settings))
    letters, _ = await store.dead_letters()
    reasons = sorted((d.reason, d.task) for d in letters)
    assert reasons == [("malformed", ""), ("malformed", "t.ok"), ("unknown_task", "os.system")]
    bad_json = next(d for d in letters if d.task == "t.ok")
    assert "payload is not valid JSON" in bad_json.error_message
    assert bad_json.job_fields["payload"] == "{nope"


async def test_timeout_async_and_sync(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    finished: list[str] = []

    @worker.task("t.async")
    async def slow(job: rsched.Job) -> None:
        await anyio.sleep(5)
        finished.append("async")

    @worker.task("t.sync")
    def slow_sync(job: rsched.Job) -> None:
        time.sleep(0.8)
        finished.append("sync")

    store = store_for(redis, settings)
    async with running(worker, redis):
        started = time.monotonic()
        await store.enqueue("t.async", max_retries=0, timeout_s=0.2)
        await store.enqueue("t.sync", max_retries=0, timeout_s=0.2)
        await eventually(lambda: _dead_count(store, 2))
        assert time.monotonic() - started < 0.8 + 0.5  # the thread was not waited for
        letters, _ = await store.dead_letters()
        assert {d.reason for d in letters} == {"timeout"}
        assert {d.error_type for d in letters} == {"TimeoutError"}
        await eventually(lambda: finished == ["sync"])  # threads cannot be interrupted
    assert "async" not in finished


@pytest.mark.slow
async def test_long_job_with_heartbeats_is_not_run_twice(redis: Redis, settings: Settings) -> None:
    runs: list[str] = []

    def make() -> rsched.Worker:
        worker = rsched.Worker(settings=fast_settings(settings))

        @worker.task("t.long")
        async def long(job: rsched.Job) -> None:
            runs.append(job.execution_id)
            await anyio.sleep(2.5)  # 2.5 × the visibility timeout

        return worker

    store = store_for(redis, settings)
    async with running(make(), redis), running(make(), redis):
        await store.enqueue("t.long")
        await eventually(lambda: len(runs) == 1)
        await eventually(lambda: settled(redis, settings))
    assert len(runs) == 1


@pytest.mark.cluster
async def test_entries_of_a_vanished_worker_are_reclaimed(redis: Redis, settings: Settings) -> None:
    keys = Keys(settings.prefix)
    store = store_for(redis, settings)
    await store.create_groups(["default"])
    await store.enqueue("t", {"n": 1})
    # A worker read the entry and vanished without acknowledging it.
    await redis.xreadgroup(GROUP, "ghost", {keys.queue("default"): ">"}, count=10)
    worker = rsched.Worker(settings=fast_settings(settings))
    seen: list[rsched.Job] = []

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        seen.append(job)

    async with running(worker, redis):
        await eventually(lambda: bool(seen))
        await eventually(lambda: settled(redis, settings))
    assert seen[0].deliveries == 2
    assert seen[0].attempt == 1


async def test_poison_after_max_deliveries(redis: Redis, settings: Settings) -> None:
    keys = Keys(settings.prefix)
    store = store_for(redis, settings)
    await store.create_groups(["default"])
    exec_id = (await store.enqueue("t", {})).execution_id
    stream = keys.queue("default")
    [[_, [(entry_id, _)]]] = await any_(redis).xreadgroup(GROUP, "ghost", {stream: ">"}, count=1)
    # Delivered (and crashed on) three times already.
    await redis.xclaim(stream, GROUP, "ghost", 0, [entry_id], retrycount=3)
    worker = rsched.Worker(settings=fast_settings(settings, max_deliveries=3))
    ran: list[str] = []

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        ran.append(job.execution_id)

    async with running(worker, redis):
        await eventually(lambda: _dead_count(store, 1))
        await eventually(lambda: settled(redis, settings))
    assert ran == []
    (letter,) = (await store.dead_letters())[0]
    assert letter.reason == "poison"
    assert letter.deliveries == 4
    assert letter.execution_id == exec_id


async def test_stop_lets_running_jobs_finish_within_grace(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, shutdown_grace_period_s=3))
    done: list[int] = []
    started = anyio.Event()

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        started.set()
        await anyio.sleep(0.5)
        done.append(job.attempt)

    store = store_for(redis, settings)
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run, redis)
        await store.enqueue("t")
        await started.wait()
        worker.stop()
    assert done == [1]
    assert await settled(redis, settings)


async def test_jobs_past_the_grace_period_are_left_pending(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, shutdown_grace_period_s=0.3))
    started = anyio.Event()
    cancelled: list[bool] = []

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        started.set()
        try:
            await anyio.sleep(30)
        except BaseException:
            cancelled.append(True)
            raise

    store = store_for(redis, settings)
    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run, redis)
            await store.enqueue("t")
            await started.wait()
            worker.stop()
    assert cancelled == [True]
    pending = await redis.xpending(Keys(settings.prefix).queue("default"), GROUP)
    assert pending["pending"] == 1  # another worker reclaims it


async def test_concurrency_limit(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(concurrency=3, settings=fast_settings(settings))
    now_running = 0
    peak = 0
    done: list[int] = []

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        nonlocal now_running, peak
        now_running += 1
        peak = max(peak, now_running)
        await anyio.sleep(0.05)
        now_running -= 1
        done.append(1)

    store = store_for(redis, settings)
    for _ in range(12):
        await store.enqueue("t")
    async with running(worker, redis):
        await eventually(lambda: len(done) == 12)
    assert peak == 3


def test_settings_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    worker = rsched.Worker(queues=["a", "b"], concurrency=7)
    cfg = worker.resolve_settings().worker
    assert cfg.queues == ["a", "b"]
    assert cfg.concurrency == 7
    monkeypatch.setenv("RSCHED_WORKER__CONCURRENCY", "9")
    assert rsched.Worker(concurrency=7).resolve_settings().worker.concurrency == 9
    worker = rsched.Worker(concurrency=7)
    worker.configure(concurrency=11, queues=["z"], redis_url="redis://127.0.0.1:1/0")
    resolved = worker.resolve_settings()
    assert resolved.worker.concurrency == 11
    assert resolved.worker.queues == ["z"]
    assert resolved.redis_url == "redis://127.0.0.1:1/0"
    with pytest.raises(rsched.ConfigError, match="queue"):
        rsched.Worker(queues=["bad name"]).resolve_settings()
    worker.add_task("t", lambda job: None)
    with pytest.raises(rsched.ConfigError, match="registered twice"):
        worker.add_task("t", lambda job: None)


async def test_bytes_that_are_not_utf8_do_not_stop_the_worker(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, unknown_task_grace_s=0))
    ok: list[str] = []  # (the worker opens its own connection)

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        ok.append(job.execution_id)

    raw = Redis.from_url(settings.url)  # bytes in, bytes out
    stream = Keys(settings.prefix).queue("default")
    store = store_for(redis, settings)
    try:
        async with running(worker, None):
            await raw.xadd(stream, {b"execution_id": b"e\xff", b"task": b"t\xfe", b"x": b"\xff"})
            await store.enqueue("t", execution_id="good")
            await eventually(lambda: "good" in ok)
            await eventually(lambda: _dead_count(store, 1))
    finally:
        await raw.aclose()
    (letter,) = (await store.dead_letters())[0]
    assert letter.reason == "unknown_task"
    assert letter.task == "t\ufffd"


async def test_deleted_pending_entries_are_dropped_by_the_reclaimer(
    redis: Redis, settings: Settings
) -> None:
    keys = Keys(settings.prefix)
    store = store_for(redis, settings)
    await store.create_groups(["default"])
    await store.enqueue("t")
    stream = keys.queue("default")
    [[_, [(entry_id, _)]]] = await any_(redis).xreadgroup(GROUP, "ghost", {stream: ">"}, count=1)
    await redis.xdel(stream, entry_id)  # deleted while pending (someone trimmed the stream)
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        raise AssertionError("a deleted entry has nothing to run")

    async with running(worker, redis):
        await eventually(lambda: settled(redis, settings))


@pytest.mark.cluster
async def test_many_jobs_over_several_workers_and_queues_run_once_each(
    redis: Redis, settings: Settings
) -> None:
    runs: list[str] = []

    def make() -> rsched.Worker:
        worker = rsched.Worker(
            queues=["a", "b"],
            concurrency=7,
            # Long enough that no job is reclaimed while a loaded machine starves its heartbeat:
            # the test counts runs, and a reclaimed job would rightly run again.
            settings=fast_settings(settings, read_batch=5, visibility_timeout_s=60),
        )

        @worker.task("t")
        async def handler(job: rsched.Job) -> None:
            runs.append(job.execution_id)
            if len(runs) % 3 == 0:
                await anyio.sleep(0.001)  # some jobs yield, some do not

        return worker

    store = store_for(redis, settings)
    workers = [make() for _ in range(3)]
    expected = {(await store.enqueue("t", queue="ab"[i % 2])).execution_id for i in range(300)}
    async with running(workers[0], redis), running(workers[1], redis), running(workers[2], redis):
        await eventually(lambda: len(runs) >= 300)
        await eventually(lambda: settled(redis, settings, "a"))
        await eventually(lambda: settled(redis, settings, "b"))
    assert sorted(runs) == sorted(expected)
    assert sum(w.completed_total for w in workers) == 300


async def test_sync_handler_is_told_to_stop_after_its_timeout(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    stopped: list[float] = []

    @worker.task("t")
    def cooperative(job: rsched.Job) -> None:
        assert job.stop_event is not None
        assert not job.should_stop
        started = time.monotonic()
        job.stop_event.wait(10)  # a sleep that ends when the worker gives up on the run
        stopped.append(time.monotonic() - started)

    store = store_for(redis, settings)
    async with running(worker, redis):
        await store.enqueue("t", max_retries=0, timeout_s=0.2)
        await eventually(lambda: bool(stopped))
        await eventually(lambda: _dead_count(store, 1))
    assert stopped[0] < 2
