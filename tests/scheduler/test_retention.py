"""Retention by the leading scheduler (runs log, dead letters, histories), and no orphan keys: what
a schedule leaves behind once removed, after fires, retries, dead letters, backfills, triggers."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import anyio
import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.keys import Keys
from rsched._core.metrics import METRICS
from rsched._core.settings import RetentionSettings, Settings
from rsched._scheduler.retention import Retention
from rsched._scheduler.scheduler import Scheduler
from tests.support.waiting import eventually
from tests.support.worker_app import any_, fast_settings
from tests.support.workers import running

DAY_MS = 86_400_000


def _with_retention(settings: Settings, **fields: object) -> Settings:
    return settings.model_copy(update={"retention": RetentionSettings.model_validate(fields)})


async def _now_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def _old_and_new(redis: Redis, key: str, now: int, old_days: float, n: int = 3) -> None:
    """n entries ``old_days`` back, n of now (explicit ids: an entry id is its time)."""
    for i in range(n):
        await redis.xadd(key, {"exec": f"old{i}"}, id=f"{now - int(old_days * DAY_MS)}-{i}")
    for i in range(n):
        await redis.xadd(key, {"exec": f"new{i}"}, id=f"{now}-{i + 1}")


async def test_sweep_trims_runs_dead_letters_and_histories_by_age(
    redis: Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    keys = Keys(settings.prefix)
    client = rsched.Client(redis, settings)
    now = await _now_ms(redis)
    await _old_and_new(redis, keys.runs, now, 8)  # default: 7 days
    await _old_and_new(redis, keys.dead("q"), now, 31)  # default: 30 days
    await _old_and_new(redis, keys.dead("young"), now, 20)
    await redis.sadd(keys.queues, "q", "young")
    for sid in ("h1", "h2", "h3"):
        await client.add({"id": sid, "task": "t", "every": 3600})
        old = {"event": "fired", "at": now - 31 * DAY_MS, "scheduled_at": now - 31 * DAY_MS}
        await redis.rpush(keys.history(sid), orjson.dumps({"event": "completed", "at": now}))
        await redis.rpush(keys.history(sid), orjson.dumps(old), orjson.dumps(old))

    retention = Retention(redis, _with_retention(settings, history_batch=2), lambda: True)
    was_on = METRICS.on
    METRICS.on = True
    before = METRICS.retention_removed.labels("runs")._value.get()
    try:
        with caplog.at_level(logging.INFO, logger="rsched.retention"):
            first = await retention.sweep()
            second = await retention.sweep()
    finally:
        METRICS.on = was_on
    assert (first.runs, first.dead_letters, first.history) == (3, 3, 4)  # 2 of 3 schedules
    assert (second.runs, second.dead_letters, second.history) == (0, 0, 2)  # the third
    assert METRICS.retention_removed.labels("runs")._value.get() - before == 3
    assert [f for _, f in any_(await redis.xrange(keys.runs))] == [
        {"exec": f"new{i}"} for i in range(3)
    ]
    assert await redis.xlen(keys.dead("q")) == 3
    assert await redis.xlen(keys.dead("young")) == 6
    for sid in ("h1", "h2", "h3"):
        assert await redis.llen(keys.history(sid)) == 1
    lines = [r for r in caplog.records if r.getMessage() == "retention.sweep"]
    assert len(lines) == 2
    assert lines[0].__dict__["rsched_fields"] == {
        "runs": 3,
        "dead_letters": 3,
        "history": 4,
        "audit": 0,
        "flows": 0,
        "flows_repaired": 0,
    }


async def test_sweep_keeps_the_size_cap(redis: Redis, settings: Settings) -> None:
    keys = Keys(settings.prefix)
    for i in range(1000):
        await redis.xadd(keys.runs, {"exec": str(i)})
    retention = Retention(redis, _with_retention(settings, runs_max_entries=100), lambda: True)
    done = await retention.sweep()
    # MAXLEN ~ trims whole nodes: about the cap is left, never less.
    assert 100 <= await redis.xlen(keys.runs) < 1000
    assert done.runs == 1000 - await redis.xlen(keys.runs)


def test_retention_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSCHED_RETENTION__RUNS_MAX_AGE_S", "3600")
    monkeypatch.setenv("RSCHED_RETENTION__INTERVAL_S", "5")
    cfg = Settings().retention
    assert (cfg.runs_max_age_s, cfg.interval_s) == (3600, 5)
    assert cfg.dead_letter_max_age_s == 30 * 86_400
    with pytest.raises(ValueError, match="runs_max_entries"):
        RetentionSettings(runs_max_entries=0)


async def test_only_the_leader_sweeps(redis: Redis, settings: Settings) -> None:
    keys = Keys(settings.prefix)
    now = await _now_ms(redis)
    fast = _with_retention(settings, interval_s=0.05)
    await _old_and_new(redis, keys.runs, now, 8)
    follower = Retention(redis, fast, lambda: False)
    async with anyio.create_task_group() as tg:
        await tg.start(follower.run)
        await anyio.sleep(0.3)
        assert await redis.xlen(keys.runs) == 6
        tg.cancel_scope.cancel()
    scheduler = Scheduler(redis, fast)
    async with anyio.create_task_group() as tg:
        await tg.start(scheduler.run)
        await eventually(lambda: scheduler.is_leader)

        async def trimmed() -> bool:
            return int(await redis.xlen(keys.runs)) == 3

        await eventually(trimmed)
        scheduler.stop()


# --- no orphan keys ------------------------------------------------------------------------------


@asynccontextmanager
async def scheduling(redis: Redis, settings: Settings) -> AsyncIterator[Scheduler]:
    scheduler = Scheduler(redis, settings)
    async with anyio.create_task_group() as tg:
        await tg.start(scheduler.run)
        try:
            yield scheduler
        finally:
            scheduler.stop()


def _worker(settings: Settings) -> rsched.Worker:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("t.o")
    async def run(job: rsched.Job) -> None:
        if job.origin == "manual":
            raise RuntimeError("a trigger always fails")
        if job.origin == "schedule" and job.attempt == 1:
            raise ValueError("the first attempt fails")

    return worker


#: What may stay under the prefix once schedule "o" is removed (docs/keys.md, "What stays after
#: a schedule is removed"): queue keys, the runs log, dead letters, the scheduler's keys, and
#: replay buckets that expire. Nothing named after the schedule.
STAYS = re.compile(
    r"^\{(?P<p>[^}]+)\}:(queue:default(#high|#low)?|delayed:default|dead:default|queues|runs"
    r"|leader|leader_ttl|fence|schedules|backlogs|events|health|workers|worker:[^:]+:\d+:\w+"
    r"|result:[^}]+|ops:\d+|meta|schedulers|audit|activity|depth)$"
)


async def test_a_removed_schedule_leaves_no_key_behind(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    await client.add(
        rsched.Schedule(
            id="o",
            task="t.o",
            every=1,
            start_at=start,
            overlap="allow",
            misfire="skip",
            max_retries=1,
            retry_base_s=0.05,
            retry_jitter=0,
        )
    )

    async def seen(status: str, at_least: int = 1) -> bool:
        page = await client.runs(schedule_id="o", status=status, limit=100)
        return len(page.items) >= at_least

    async with running(_worker(settings), redis), scheduling(redis, settings):
        await eventually(lambda: seen("failed"))  # fire, then a retry
        await eventually(lambda: seen("completed"))
        await client.trigger("o")
        await eventually(lambda: seen("dead"))  # a dead letter
        backfilled = await client.backfill("o", start, start + timedelta(seconds=2))
        assert backfilled.count("fired") == 3
        await client.pause("o")
        assert await redis.exists(Keys(settings.prefix).backfilled("o"))
    # A job that ends after its schedule was removed (it fails, is retried, then dead).
    await client.resume("o")
    await client.trigger("o")
    await client.pause("o")
    await client.remove("o")
    async with running(_worker(settings), redis):
        await eventually(lambda: seen("dead", 2))
        await eventually(lambda: seen("completed", 4))  # the backfilled runs too

    keys = sorted(str(k) for k in await redis.keys("{" + settings.prefix + "}:*"))
    left = [k for k in keys if not STAYS.match(k)]
    assert left == [], f"keys left after remove: {left}"
    for key in keys:
        if ":ops:" in key or ":result:" in key:
            assert await redis.pttl(key) > 0
    assert await redis.zcard(Keys(settings.prefix).schedules) == 0
    # The runs log keeps the schedule's runs, the last ones after its removal included.
    dead = (await client.runs(schedule_id="o", status="dead")).items
    assert len(dead) == 2
    assert dead[0].error_type == "RuntimeError"
