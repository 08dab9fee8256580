"""One-off jobs against real servers: priority levels, idempotent enqueue with an execution id,
rsched.Retry as an outcome of its own."""

from __future__ import annotations

import logging
import time

import anyio
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.fire_plan import FireSpec
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from rsched._store.queues import QueueStore
from tests.support.waiting import eventually
from tests.support.worker_app import any_, fast_settings
from tests.support.workers import running, settled, store_for

# --- priority ------------------------------------------------------------------------------


async def test_high_jobs_overtake_a_low_backlog(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=1))
    started: list[str] = []

    @worker.task("t")
    async def run(job: rsched.Job) -> None:
        started.append(job.payload["name"])
        await anyio.sleep(0.01)

    store = store_for(redis, settings)
    for i in range(50):
        await store.enqueue("t", {"name": f"low-{i}"}, priority="low")
    async with running(worker, redis):
        await eventually(lambda: len(started) >= 3)
        before = len(started)
        for i in range(5):
            await store.enqueue("t", {"name": f"high-{i}"}, priority="high")
        await eventually(lambda: len(started) == 55)
    highs = [i for i, name in enumerate(started) if name.startswith("high")]
    # The job running when they arrived, then 5 reads of which at most one is low's turn (one in
    # ten by default) and one normal's (empty: passed on to high): slack for a read in flight.
    assert highs[-1] < before + 9, (before, highs)
    assert sorted(started[h] for h in highs) == [f"high-{i}" for i in range(5)]
    lows = [name for name in started if name.startswith("low")]
    assert lows == [f"low-{i}" for i in range(50)]  # one level keeps its order


async def test_weights_give_every_level_a_share(redis: Redis, settings: Settings) -> None:
    weights = {"high": 2, "normal": 1, "low": 1}
    worker = rsched.Worker(
        settings=fast_settings(settings, concurrency=1, priority_weights=weights)
    )
    started: list[str] = []

    @worker.task("t")
    async def run(job: rsched.Job) -> None:
        started.append(job.priority)

    store = store_for(redis, settings)
    for level in ("low", "normal", "high"):
        for _ in range(20):
            await store.enqueue("t", priority=level)
    async with running(worker, redis):
        await eventually(lambda: len(started) == 60)
    first = started[:20]  # 20 reads of 2:1:1 turns
    assert first.count("high") == 10, started
    assert first.count("normal") == 5, started
    assert first.count("low") == 5, started


async def test_a_job_keeps_its_level_through_retries_delays_and_requeue(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    seen: list[tuple[int, str]] = []

    @worker.task("t")
    async def run(job: rsched.Job) -> None:
        seen.append((job.attempt, job.priority))
        if job.attempt == 1:
            raise rsched.Retry(delay_s=0.05)
        raise ValueError("still broken")

    store = store_for(redis, settings)
    async with running(worker, redis):
        await store.enqueue("t", priority="low", delay_s=0.1, max_retries=1)
        await eventually(lambda: len(seen) == 2)
        await eventually(lambda: _dead(store, 1))
    assert seen == [(1, "low"), (2, "low")]
    (letters, _) = await store.dead_letters()
    assert letters[0].job_fields["priority"] == "low"
    assert await store.requeue("default") == 1
    keys = Keys(settings.prefix)
    assert await any_(redis).xlen(keys.queue("default", "low")) == 1
    assert await any_(redis).xlen(keys.queue("default")) == 0
    stats = (await store.queue_stats())["default"]
    assert (stats["length"], stats["low"], stats["high"]) == (1, 1, 0)


async def test_a_reclaimed_job_keeps_its_level(redis: Redis, settings: Settings) -> None:
    store = store_for(redis, settings)
    await store.create_groups(["default"])
    await store.enqueue("t", priority="high")
    [(lane, _)] = await store.read([("default", "high")], "lost-worker", 1, 100)
    assert lane == ("default", "high")  # read, then its worker vanished
    stats = (await store.queue_stats())["default"]
    assert (stats["length"], stats["pending"], stats["high"]) == (1, 1, 1)
    worker = rsched.Worker(settings=fast_settings(settings))
    seen: list[tuple[str, int]] = []

    @worker.task("t")
    async def run(job: rsched.Job) -> None:
        seen.append((job.priority, job.deliveries))

    async with running(worker, redis):
        await eventually(lambda: seen == [("high", 2)])
        await eventually(lambda: _drained(redis, Keys(settings.prefix).queue("default", "high")))


async def _drained(redis: Redis, key: str) -> bool:
    pending = await any_(redis).xpending(key, "rsched")
    return int(await any_(redis).xlen(key)) == 0 and int(pending["pending"]) == 0


async def test_a_schedule_fires_into_the_stream_of_its_priority(
    redis: Redis, settings: Settings
) -> None:
    keys = Keys(settings.prefix)
    async with rsched.Client(redis, settings) as client:
        await client.add(rsched.Schedule(id="s", task="t", every=3600, priority="high"))
        assert (await client.get("s")).priority == "high"
        await client.trigger("s")
        assert await any_(redis).xlen(keys.queue("default", "high")) == 1
        with pytest.raises(rsched.InvalidSchedule, match="priority"):
            await client.add(rsched.Schedule(id="b", task="t", every=60, priority="urgent"))
        scheduler = rsched.Scheduler(redis, settings)
        await client.add(rsched.Schedule(id="due", task="t", every=1, priority="low"))
        async with anyio.create_task_group() as tg:
            await tg.start(scheduler.run)
            await eventually(lambda: _xlen(redis, keys.queue("default", "low")))
            scheduler.stop()
        stats = (await client.stats()).queues["default"]
        assert stats["high"] == 1
        assert stats["low"] >= 1


async def _xlen(redis: Redis, key: str) -> bool:
    return int(await any_(redis).xlen(key)) > 0


async def _dead(store: QueueStore, n: int) -> bool:
    return (await store.queue_stats())["default"]["dead"] == n


# --- idempotent enqueue ----------------------------------------------------------------------


async def test_enqueue_with_an_execution_id_adds_it_once(redis: Redis, settings: Settings) -> None:
    store = store_for(redis, settings)
    keys = Keys(settings.prefix)
    first = await store.enqueue("t", {"n": 1}, execution_id="order-42")
    assert first == rsched.Enqueued("order-42", created=True)
    again = await store.enqueue("t", {"n": 2}, execution_id="order-42", queue="other")
    assert again == rsched.Enqueued("order-42", created=False)
    assert await any_(redis).xlen(keys.queue("default")) == 1
    assert not await any_(redis).exists(keys.queue("other"))  # nothing written for the second
    ttl = await any_(redis).pttl(keys.dedup("order-42"))
    assert ttl > 86_400_000

    # Concurrent calls with one id: exactly one adds a job.
    results: list[rsched.Enqueued] = []

    async def one() -> None:
        results.append(await store.enqueue("t", execution_id="race", delay_s=30))

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(one)
    assert sorted(r.created for r in results) == [False] * 9 + [True]

    # A delay is a duration like everywhere else.
    await store.enqueue("t", queue="later", delay_s="5m")
    assert (await store.queue_stats())["later"]["delayed"] == 1

    # Random ids pay nothing: no dedup key.
    await store.enqueue("t")
    found = [k async for k in any_(redis).scan_iter(match=keys.dedup("*"))]
    assert sorted(found) == [keys.dedup("order-42"), keys.dedup("race")]


async def test_an_execution_id_stays_taken_until_the_window_after_it_finished(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    runs: list[str] = []
    release = anyio.Event()

    @worker.task("t")
    async def run(job: rsched.Job) -> None:
        runs.append(job.execution_id)
        await release.wait()

    store = store_for(redis, settings)
    keys = Keys(settings.prefix)
    async with running(worker, redis):
        assert (await store.enqueue("t", execution_id="x", dedup_window_s=2)).created
        await eventually(lambda: runs == ["x"])
        assert not (await store.enqueue("t", execution_id="x")).created  # running
        release.set()
        await eventually(lambda: settled(redis, settings))
        ttl = await any_(redis).pttl(keys.dedup("x"))
        assert 0 < ttl <= 2000  # the window now counts from the end
        assert not (await store.enqueue("t", execution_id="x")).created  # finished just now
        await eventually(lambda: _gone(redis, keys.dedup("x")))
        assert (await store.enqueue("t", execution_id="x")).created
        await eventually(lambda: runs == ["x", "x"])


async def _gone(redis: Redis, key: str) -> bool:
    return not await any_(redis).exists(key)


async def test_a_dead_letter_also_starts_the_window(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("t")
    async def run(job: rsched.Job) -> None:
        raise ValueError("no")

    store = store_for(redis, settings)
    keys = Keys(settings.prefix)
    async with running(worker, redis):
        await store.enqueue("t", execution_id="d", max_retries=0, dedup_window_s=60)
        await eventually(lambda: _dead(store, 1))
    assert 0 < await any_(redis).pttl(keys.dedup("d")) <= 60_000


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"priority": "urgent"}, "priority"),
        ({"execution_id": "x", "dedup_window_s": -1}, "dedup_window_s"),
        ({"dedup_window_s": "1d"}, "dedup_window_s"),
        ({"delay_s": "soon"}, "delay_s"),
        ({"delay_s": -1}, "delay_s"),
    ],
)
async def test_bad_job_options_write_nothing(
    redis: Redis, settings: Settings, kwargs: dict[str, object], field: str
) -> None:
    store = store_for(redis, settings)
    with pytest.raises(rsched.InvalidJob, match=f"^{field}: .*(priority|seconds|duration)"):
        await store.enqueue("t", **kwargs)  # type: ignore[arg-type]
    assert [k async for k in any_(redis).scan_iter(match=f"{{{settings.prefix}}}:*")] == []


def test_settings_refuse_bad_weights() -> None:
    with pytest.raises(ValueError, match="priority_weights: unknown level"):
        Settings(worker={"priority_weights": {"urgent": 1}})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="none starves"):
        Settings(worker={"priority_weights": {"low": 0}})  # type: ignore[arg-type]
    filled = Settings(worker={"priority_weights": {"high": 10}})  # type: ignore[arg-type]
    assert filled.worker.priority_weights == {"high": 10, "normal": 3, "low": 1}


# --- debounced enqueue -------------------------------------------------------------------------

# The bursts below use windows of 2 s: each call must come within the window of the one before,
# which a loaded machine's round trips hold (with 300 ms, one slow call now and then closed the
# window mid-burst).


async def test_a_debounced_burst_runs_once_with_the_last_payload(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    seen: list[tuple[rsched.Job, float]] = []

    @worker.task("t.reindex")
    async def reindex(job: rsched.Job) -> None:
        seen.append((job, time.monotonic()))

    async with rsched.Client.from_settings(settings) as client, running(worker, redis):
        burst = [
            await client.enqueue("t.reindex", {"n": n}, debounce_key="doc:7", debounce="2s")
            for n in range(10)
        ]
        last_call = time.monotonic()
        assert [e.created for e in burst] == [True] + [False] * 9
        await eventually(lambda: seen)
        # Every call collapsed into the window's one job, which ran after the last call.
        await eventually(lambda: settled(redis, settings))
        [(job, ran_at)] = seen
        assert job.execution_id == burst[0].execution_id
        assert job.payload == {"n": 9}
        assert ran_at - last_call >= 1.9  # 2 s after the last call, less clock slack
        # The window closed when its job ran: the next call opens another, run on its own.
        after = await client.enqueue("t.reindex", {"n": 10}, debounce_key="doc:7", debounce=0.05)
        assert after.created
        assert after.execution_id != job.execution_id
        await eventually(lambda: len(seen) == 2)
        assert seen[1][0].payload == {"n": 10}
        stats = await client.stats()
        assert stats.queues["default"]["delayed"] == 0


async def test_a_debounced_schedule_runs_a_trigger_burst_once(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    seen: list[tuple[rsched.Job, float]] = []

    @worker.task("t.sync")
    async def sync(job: rsched.Job) -> None:
        seen.append((job, time.monotonic()))

    async with rsched.Client.from_settings(settings) as client, running(worker, redis):
        await client.add(
            {
                "id": "sync",
                "task": "t.sync",
                "every": 3600,
                "debounce": "2s",
                "payload": {"a": 1},
            }
        )
        burst = [await client.trigger("sync") for _ in range(6)]
        last_call = time.monotonic()
        assert [f.status for f in burst] == ["fired"] + ["debounced"] * 5
        await eventually(lambda: seen)
        await eventually(lambda: settled(redis, settings))
        [(job, ran_at)] = seen
        assert (job.execution_id, job.schedule_id) == (burst[0].execution_id, "sync")
        assert job.payload == {"a": 1}
        assert ran_at - last_call >= 1.9
        # The run ended: its marker is cleared, and the next trigger opens another window.
        await eventually(lambda: _run_marker_cleared(redis, settings, "sync"))
        again = await client.trigger("sync")
        assert again.status == "fired"
        await eventually(lambda: len(seen) == 2)
        assert (await client.get("sync")).runs == 2


async def _run_marker_cleared(redis: Redis, settings: Settings, sid: str) -> bool:
    return not await redis.hexists(Keys(settings.prefix).schedule(sid), "run")


# --- Retry as an outcome ------------------------------------------------------------------------


async def test_retry_is_its_own_outcome_and_counts_toward_max_retries(
    redis: Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    attempts: list[int] = []

    @worker.task("t")
    async def run(job: rsched.Job) -> None:
        attempts.append(job.attempt)
        raise rsched.Retry(delay_s=0.05, reason="not ready")

    caplog.set_level(logging.INFO, logger="rsched")
    async with rsched.Client(redis, settings) as client:
        await client.add(rsched.Schedule(id="s", task="t", every=3600, max_retries=2))
        async with running(worker, redis):
            await client.trigger("s")
            await eventually(lambda: _dead(store_for(redis, settings), 1))
            assert worker.failed_total == 1  # only the attempt that ended in a dead letter
            assert worker.retried_total == 2
        history = await client.history("s", limit=20)
        events = [e.event for e in history]
        retry_event = next(e for e in history if e.event == "retried")
        letters = (await client.dead_letters()).items
    assert attempts == [1, 2, 3]
    assert events[:6] == ["dead", "running", "retried", "running", "retried", "running"]
    assert retry_event.reason == "not ready"
    assert retry_event.attempt == 2
    letter = letters[0]
    assert letter.reason == "max_retries"
    assert letter.error_type == "Retry"
    assert letter.error_message.startswith("retries exhausted")
    assert "max_retries=2" in letter.error_message
    ends = [getattr(r, "rsched_fields", {}) | {"level": r.levelno} for r in caplog.records
            if r.getMessage() == "job.end"]  # fmt: skip
    retry_lines = [e for e in ends if e["outcome"] == "retry"]
    assert len(retry_lines) == 2
    assert all(e["level"] == logging.INFO and e["reason"] == "not ready" for e in retry_lines)
    assert [e["outcome"] for e in ends if e["level"] > logging.INFO] == ["dead"]


async def test_retry_then_success_is_no_failure(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    attempts: list[int] = []

    @worker.task("t")
    def run(job: rsched.Job) -> None:  # a sync handler raises it the same way
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise rsched.Retry(delay_s=0)

    store = store_for(redis, settings)
    async with running(worker, redis):
        await store.enqueue("t")
        await eventually(lambda: worker.completed_total == 1)
        assert (worker.failed_total, worker.retried_total) == (0, 1)
    assert attempts == [1, 2]
    assert await _dead(store, 0)


def test_the_fire_spec_names_the_stream_of_its_level() -> None:
    assert FireSpec.from_hash({"queue": "q"}).arg() == "skip q     "
    assert FireSpec.from_hash({"queue": "q", "priority": "high"}).arg() == "skip q#high     "
    assert FireSpec.from_hash({"priority": "low"}).arg() == "skip default#low     "
    assert FireSpec.from_hash({"debounce": "2.5"}).arg() == "skip default   2500  "
    assert FireSpec.from_hash({"labels": "team=a"}).arg() == "skip default    team=a "
    with pytest.raises(ValueError, match="labels"):
        FireSpec.from_hash({"labels": "team=a b"})
    with pytest.raises(ValueError, match="not a priority"):
        FireSpec.from_hash({"priority": "urgent"})
