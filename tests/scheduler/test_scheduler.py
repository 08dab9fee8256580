"""The Scheduler in process against real servers: firing, completion, misfires, races, wake-ups."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from rsched import Client, Schedule, Scheduler, next_fire_times
from rsched._core.errors import LostLease
from rsched._core.fire_plan import FireItem
from rsched._core.keys import Keys
from rsched._core.schedule import from_ms, to_ms
from rsched._core.settings import SchedulerSettings, Settings
from rsched._core.timing import first_run_ms
from rsched._redis.connection import connect
from rsched._scheduler import batching, ticker
from rsched._scheduler.batching import Batching
from rsched._scheduler.calendar_cache import CalendarCache
from rsched._scheduler.fire import FireRound, batches
from rsched._scheduler.spec_cache import SpecCache
from rsched._store.calendars import CalendarStore
from rsched._store.firing import FiringStore
from rsched._store.schedules import ScheduleStore
from tests.support.leading import firing, leases
from tests.support.placement import move_to, next_score
from tests.support.schedulers import daily_far_from_now, jobs, quick, running
from tests.support.waiting import eventually

DAY_MS = 86_400_000


@pytest.fixture
def fast(redis_url: str, prefix: str, topology: str) -> Settings:
    return quick(redis_url, prefix, topology)


@pytest.fixture
def store(redis: Redis, fast: Settings) -> ScheduleStore:
    return ScheduleStore(redis, Keys(fast.prefix))


async def count_jobs(store: ScheduleStore, at_least: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return len(await jobs(store)) >= at_least

    return check


async def set_next_run(store: ScheduleStore, sid: str, ms: int) -> None:
    """Put a schedule's next run (its index score) where an outage would have left it."""
    await move_to(store.redis, store.keys, sid, ms)


def soon(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


async def test_every_interval_fires_on_its_grid(store: ScheduleStore, fast: Settings) -> None:
    start = soon(0.3)
    await store.save(Schedule(id="e", task="t", every=0.2, start_at=start, overlap="allow"))
    async with running(fast):
        await eventually(await count_jobs(store, 4))
    entries = await jobs(store)
    scheduled = [int(j["scheduled_at"]) for j in entries]
    first = int(start.timestamp() * 1000)
    # On the grid from start_at (a slow machine may have passed its first point already).
    assert scheduled[0] >= first
    assert (scheduled[0] - first) % 200 == 0
    assert scheduled[:4] == [scheduled[0] + i * 200 for i in range(4)]
    assert len({j["execution_id"] for j in entries}) == len(entries)
    for job in entries:  # fired promptly: the leader sleeps until the next run, not a tick
        assert 0 <= int(job["fired_at"]) - int(job["scheduled_at"]) < 1_000


async def test_one_off_at_completes(store: ScheduleStore, fast: Settings) -> None:
    at = soon(0.5)
    await store.save(Schedule(id="once", task="t", at=at))
    async with running(fast):

        async def done() -> bool:
            return (await store.load("once")).completed

        await eventually(done)
        await anyio.sleep(0.3)
    (job,) = await jobs(store)
    assert job["scheduled_at"] == str(int(at.timestamp() * 1000))
    assert await next_score(store.redis, store.keys, "once") == float("inf")
    loaded = await store.load("once")
    assert loaded.runs == 1
    assert loaded.next_run is None


async def test_max_runs_completes(store: ScheduleStore, fast: Settings) -> None:
    await store.save(Schedule(id="m", task="t", every=0.05, max_runs=3, overlap="allow"))
    async with running(fast):

        async def done() -> bool:
            return (await store.load("m")).completed

        await eventually(done)
        await anyio.sleep(0.3)
    assert len(await jobs(store)) == 3
    assert (await store.load("m")).runs == 3


async def test_end_at_completes(store: ScheduleStore, fast: Settings) -> None:
    start = soon(0.3)
    end = start + timedelta(seconds=0.35)
    await store.save(
        Schedule(id="w", task="t", every=0.1, start_at=start, end_at=end, overlap="allow")
    )
    async with running(fast):

        async def done() -> bool:
            return (await store.load("w")).completed

        await eventually(done)
        await anyio.sleep(0.2)
    scheduled = [int(j["scheduled_at"]) for j in await jobs(store)]
    first = int(start.timestamp() * 1000)
    assert scheduled[0] >= first
    assert scheduled == list(range(scheduled[0], first + 301, 100))  # through the last one


@pytest.mark.cluster
async def test_wake_on_new_earlier_schedule(store: ScheduleStore, fast: Settings) -> None:
    # A long idle period: only the wake notification can make this fire on time.
    idle = SchedulerSettings(lease_ttl_ms=1000, lease_renew_ms=200, max_idle_ms=30_000)
    settings = fast.model_copy(update={"scheduler": idle})
    await store.save(Schedule(id="far", task="t", cron="0 0 1 1 *"))
    async with running(settings) as (scheduler,):
        await eventually(lambda: _true(scheduler.is_leader))
        await anyio.sleep(0.2)  # the leader is asleep until next year's run
        await store.save(Schedule(id="near", task="t", at=soon(0.5)))
        await eventually(await count_jobs(store, 1))
    (job,) = await jobs(store)
    assert int(job["fired_at"]) - int(job["scheduled_at"]) < 1_000


async def _true(value: bool) -> bool:
    return value


@pytest.mark.cluster
async def test_pause_and_resume(store: ScheduleStore, fast: Settings) -> None:
    await store.save(Schedule(id="p", task="t", every=0.1, overlap="allow"))
    await store.pause("p", None)
    async with running(fast):
        await anyio.sleep(0.5)
        assert await jobs(store) == []
        loaded = await store.load("p")
        now = await store.time_ms()
        nxt = first_run_ms(loaded, now, created_ms=now, creating=False)
        await store.resume("p", loaded.generation, nxt)
        await eventually(await count_jobs(store, 2))


@pytest.mark.slow
@pytest.mark.cluster
async def test_three_schedulers_fire_each_occurrence_once(
    store: ScheduleStore, fast: Settings
) -> None:
    ids = [f"s{i}" for i in range(20)]
    start = soon(0.3)
    for sid in ids:
        await store.save(Schedule(id=sid, task="t", every=0.1, start_at=start, overlap="allow"))
    async with running(fast, count=3) as schedulers:
        # Force hand-overs: drop the lease now and then, as if the leader had paused. For a
        # moment two may believe they lead; the fencing token keeps the old one from firing.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            await anyio.sleep(0.25)
            await store.redis.delete(store.keys.leader)
    assert sum(s.fired_total for s in schedulers) == len(await jobs(store))
    assert int(await store.redis.get(store.keys.fence) or 0) >= 4  # the lead changed hands
    entries = await jobs(store)
    counts = Counter(j["execution_id"] for j in entries)
    assert counts.most_common(1)[0][1] == 1, "an occurrence fired twice"
    by_schedule: dict[str, list[int]] = {}
    for job in entries:
        by_schedule.setdefault(job["schedule_id"], []).append(int(job["scheduled_at"]))
    first = int(start.timestamp() * 1000)
    for sid in ids:
        times = sorted(by_schedule[sid])
        # No occurrence lost either: a gap-free run of the grid from the first one.
        assert (times[0] - first) % 100 == 0, sid
        assert times == list(range(times[0], times[-1] + 1, 100)), sid
        assert len(times) >= 10


async def test_update_while_due_never_fires_old_spec(store: ScheduleStore, fast: Settings) -> None:
    await store.save(Schedule(id="u", task="old", every=0.02, overlap="allow"))
    async with running(fast):
        await eventually(await count_jobs(store, 2))
        await store.save(Schedule(id="u", task="new", every=0.02, overlap="allow"))
        changed_at = await store.time_ms()
        await eventually(await count_jobs(store, 10))
        await store.remove("u")
        removed_at = await store.time_ms()
        await anyio.sleep(0.3)
    entries = await jobs(store)
    for job in entries:
        assert (job["task"], job["generation"]) in (("old", "1"), ("new", "2"))
        if int(job["fired_at"]) > changed_at:
            assert job["task"] == "new"
        assert int(job["fired_at"]) <= removed_at
    assert any(j["task"] == "new" for j in entries)


async def test_wrong_type_schedule_does_not_stop_others(
    store: ScheduleStore, fast: Settings
) -> None:
    await store.save(Schedule(id="bad", task="t", every=0.05))
    await store.save(Schedule(id="good", task="t", every=0.05, overlap="allow"))
    await store.redis.delete(store.keys.schedule("bad"))
    await store.redis.set(store.keys.schedule("bad"), "clobbered")
    async with running(fast):
        await eventually(await count_jobs(store, 3))
    assert {j["schedule_id"] for j in await jobs(store)} == {"good"}
    assert await store.redis.get(store.keys.schedule("bad")) == "clobbered"


async def test_index_entries_rsched_never_wrote_do_not_stop_others(
    store: ScheduleStore, fast: Settings
) -> None:
    await store.save(Schedule(id="good", task="t", every=0.05, overlap="allow"))
    now = await store.time_ms()
    # Members and scores written by hand: no rsched id holds a space or a quote, and rsched
    # writes whole-ms scores only.
    await store.redis.zadd(
        store.keys.schedules, {"with space": now, 'quo"te': now, "frac": now - 0.5, "low": "-inf"}
    )
    _, due, _ = await firing(store).due(100)
    assert {sid: score for sid, score in due if sid != "good"} == {'quo"te': now, "frac": now - 1}
    async with running(fast) as (scheduler,):
        await eventually(await count_jobs(store, 3))
        assert 'quo"te' in scheduler.engines[0].cache.quarantine
    assert {j["schedule_id"] for j in await jobs(store)} == {"good"}
    assert await store.redis.zscore(store.keys.schedules, "with space") == now


async def test_graceful_stop_releases_lease(store: ScheduleStore, fast: Settings) -> None:
    async with running(fast) as (scheduler,):
        await eventually(lambda: _true(scheduler.is_leader))
        assert await store.redis.get(store.keys.leader) is not None
    assert await store.redis.get(store.keys.leader) is None


@pytest.mark.cluster
async def test_standby_takes_over(store: ScheduleStore, fast: Settings) -> None:
    await store.save(Schedule(id="h", task="t", every=0.05, overlap="allow"))
    async with running(fast, count=2) as schedulers:
        await eventually(lambda: _true(any(s.is_leader for s in schedulers)))
        leader = next(s for s in schedulers if s.is_leader)
        other = next(s for s in schedulers if s is not leader)
        leader.stop()
        await eventually(lambda: _true(other.is_leader))
        before = len(await jobs(store))
        await eventually(await count_jobs(store, before + 3))


# --- misfire policies after an outage --------------------------------------------------------


async def outage(store: ScheduleStore, sid: str, days: int, **spec: Any) -> tuple[int, int]:
    """Create a daily schedule whose next run an outage left ``days`` days behind.

    Returns (stale next run, latest missed occurrence).
    """
    await store.save(Schedule(id=sid, task="t", cron=daily_far_from_now(), **spec))
    upcoming = int(await next_score(store.redis, store.keys, sid) or 0)
    latest = upcoming - DAY_MS
    stale = latest - (days - 1) * DAY_MS
    await set_next_run(store, sid, stale)
    return stale, latest


async def run_until_moved(
    store: ScheduleStore, fast: Settings, sid: str, stale: int
) -> dict[str, str]:
    async with running(fast):

        async def moved() -> bool:
            nxt = await next_score(store.redis, store.keys, sid)
            return nxt is not None and nxt > stale + DAY_MS * 2

        await eventually(moved)
    fields: dict[str, str] = (await store.fields([sid]))[0]
    return fields


async def test_misfire_run_once(store: ScheduleStore, fast: Settings) -> None:
    stale, latest = await outage(store, "r", days=5)
    fields = await run_until_moved(store, fast, "r", stale)
    (job,) = await jobs(store)
    assert job["origin"] == "misfire"
    assert job["scheduled_at"] == str(latest)
    assert int(fields["next_run"]) == latest + DAY_MS
    (event,) = await store.history("r", 10)
    assert (event["event"], event["missed"], event["scheduled_at"]) == ("fired", 5, latest)
    assert event["late_ms"] > 11 * 3_600_000


@pytest.mark.cluster
async def test_misfire_skip(store: ScheduleStore, fast: Settings) -> None:
    stale, latest = await outage(store, "s", days=5, misfire="skip")
    fields = await run_until_moved(store, fast, "s", stale)
    assert await jobs(store) == []
    assert int(fields["next_run"]) == latest + DAY_MS
    assert "runs" not in fields
    (event,) = await store.history("s", 10)
    assert (event["event"], event["missed"], event["scheduled_at"]) == ("misfired", 5, stale)


@pytest.mark.cluster
async def test_misfire_catch_up(store: ScheduleStore, fast: Settings) -> None:
    stale, latest = await outage(
        store, "c", days=5, misfire="catch_up", catch_up_limit=3, overlap="allow"
    )
    fields = await run_until_moved(store, fast, "c", stale)
    scheduled = [int(j["scheduled_at"]) for j in await jobs(store)]
    assert scheduled == [latest - 2 * DAY_MS, latest - DAY_MS, latest]  # newest 3, oldest first
    assert int(fields["next_run"]) == latest + DAY_MS
    assert fields["runs"] == "3"
    events = [(e["event"], e.get("missed")) for e in reversed(await store.history("c", 10))]
    assert events == [("misfired", 2), ("fired", 1), ("fired", 1), ("fired", 1)]


async def test_late_within_grace_just_runs(store: ScheduleStore, fast: Settings) -> None:
    await store.save(Schedule(id="g", task="t", cron="0 0 1 1 *", misfire="skip"))
    now = await store.time_ms()
    await set_next_run(store, "g", now - 5_000)  # default misfire_grace_s is 60
    async with running(fast):
        await eventually(await count_jobs(store, 1))
    (job,) = await jobs(store)
    assert job["origin"] == "schedule"
    (event,) = await store.history("g", 10)
    assert event["event"] == "fired"
    assert event["late_ms"] >= 5_000


@pytest.mark.cluster
async def test_stale_lease_round_steps_down(store: ScheduleStore, fast: Settings) -> None:
    # The ticker's own view of leadership is never trusted: the fire script checks the token.
    await store.save(Schedule(id="f", task="t", cron="0 0 1 1 *"))
    await set_next_run(store, "f", await store.time_ms() - 1_000)
    lease, _ = await leases(store).acquire("someone-else", 60_000)
    assert lease is not None
    scheduler = Scheduler(store.redis, fast)
    with pytest.raises(LostLease):
        await scheduler.engines[0].ticker.tick("1:a-lease-that-expired")
    assert await jobs(store) == []


async def test_catch_up_queues_behind_the_first_run_under_skip(
    store: ScheduleStore, fast: Settings
) -> None:
    # With the default overlap=skip the first caught-up run is queued and the others wait their
    # turn (released as each run ends, tests/scheduler/test_pending.py); overlap="allow" queues
    # every one at once (test above).
    stale, _ = await outage(store, "o", days=3, misfire="catch_up")
    await run_until_moved(store, fast, "o", stale)
    assert len(await jobs(store)) == 1
    events = list(reversed(await store.history("o", 10)))
    assert [e["event"] for e in events] == ["fired", "buffered", "buffered"]
    assert {e["origin"] for e in events} == {"misfire"}
    assert await store.redis.zcard(store.keys.pending("o")) == 2


@pytest.mark.slow
async def test_survives_a_redis_restart(make_server: Callable[..., Any], prefix: str) -> None:
    server = make_server(appendonly=True)
    settings = Settings(
        redis_url=server.url,
        prefix=prefix,
        scheduler=SchedulerSettings(lease_ttl_ms=1000, lease_renew_ms=200, max_idle_ms=500),
    )
    client = connect(server.url)
    after = connect(server.url)  # a client that never saw the old connection
    store = ScheduleStore(client, Keys(prefix))
    try:
        await store.save(Schedule(id="r", task="t", every=0.1, overlap="allow"))
        async with running(settings):
            await eventually(await count_jobs(store, 3))
            await anyio.to_thread.run_sync(server.restart)
            store = ScheduleStore(after, Keys(prefix))
            before = len(await jobs(store))
            await eventually(await count_jobs(store, before + 5))
        entries = await jobs(store)
        assert Counter(j["execution_id"] for j in entries).most_common(1)[0][1] == 1
    finally:
        await client.aclose()
        await after.aclose()


async def test_script_failure_is_isolated_to_its_schedule(
    store: ScheduleStore, fast: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    for sid in ("ok1", "boom", "ok2"):
        await store.save(Schedule(id=sid, task="t", every=0.05, overlap="allow"))
    real_fire = FiringStore.fire

    async def fire(self: FiringStore, lease: str, items: Any) -> list[int] | None:
        if any(item.schedule_id == "boom" for item in items):
            raise ResponseError("user_script:1: something unforeseen")
        return await real_fire(self, lease, items)

    monkeypatch.setattr(FiringStore, "fire", fire)
    async with running(fast) as (scheduler,):
        await eventually(await count_jobs(store, 6))
        assert "boom" in scheduler.engines[0].cache.quarantine
    assert {j["schedule_id"] for j in await jobs(store)} == {"ok1", "ok2"}


async def test_connection_error_while_firing_is_retried(
    store: ScheduleStore, fast: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.save(Schedule(id="c", task="t", every=0.05, overlap="allow"))
    real_fire = FiringStore.fire
    failures = [RedisConnectionError("connection reset"), OSError("broken pipe")]

    async def fire(self: FiringStore, lease: str, items: Any) -> list[int] | None:
        if failures:
            raise failures.pop()
        return await real_fire(self, lease, items)

    monkeypatch.setattr(FiringStore, "fire", fire)
    async with running(fast):
        await eventually(await count_jobs(store, 3))
    assert failures == []


async def test_rounds_make_progress_past_their_planning_budget(
    store: ScheduleStore, fast: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With no budget at all each round plans a single schedule; every one still fires once.
    monkeypatch.setattr(ticker, "PLAN_BUDGET_S", 0.0)
    for i in range(5):
        await store.save(Schedule(id=f"b{i}", task="t", cron="0 0 1 1 *", misfire="catch_up"))
        await set_next_run(store, f"b{i}", await store.time_ms() - 1_000)
    async with running(fast):
        await eventually(await count_jobs(store, 5))
    assert sorted(j["schedule_id"] for j in await jobs(store)) == [f"b{i}" for i in range(5)]


@pytest.mark.cluster
async def test_a_herd_over_many_windows_fires_each_occurrence_once(
    store: ScheduleStore, fast: Settings
) -> None:
    # A window of 5 and batches of 2: rounds grow (5, 10, 20, 40) and each reads the next
    # round's entries while its last batches are still in flight.
    small = fast.model_copy(
        update={"scheduler": fast.scheduler.model_copy(update={"window_size": 5, "batch_size": 2})}
    )
    ids = [f"h{i:03d}" for i in range(120)]
    for sid in ids:
        await store.save(Schedule(id=sid, task="t", every=3600))
    due_at = await store.time_ms() - 1_000
    for sid in ids:
        await set_next_run(store, sid, due_at)
    async with running(small, count=2):
        await eventually(await count_jobs(store, len(ids)))
        await anyio.sleep(0.3)  # time for a duplicate, were there one
    fired = Counter(j["schedule_id"] for j in await jobs(store))
    assert fired == Counter(ids)


async def make_due(store: ScheduleStore, ids: list[str]) -> None:
    """Hourly schedules ``ids``, all due a second ago (a herd)."""
    for sid in ids:
        await store.save(Schedule(id=sid, task="t", every=3600))
    due_at = await store.time_ms() - 1_000
    for sid in ids:
        await set_next_run(store, sid, due_at)


async def test_batches_are_sized_by_the_time_budget(
    store: ScheduleStore, fast: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A budget far below what an item costs: every call carries the smallest batch, and the
    # herd still fires each occurrence once.
    tight = fast.model_copy(
        update={"scheduler": fast.scheduler.model_copy(update={"fire_budget_ms": 0.01})}
    )
    sizes: list[int] = []
    real_fire = FiringStore.fire

    async def fire(self: FiringStore, lease: str, items: Any) -> list[int] | None:
        if items:
            sizes.append(len(items))
        return await real_fire(self, lease, items)

    monkeypatch.setattr(FiringStore, "fire", fire)
    ids = [f"h{i:03d}" for i in range(40)]
    await make_due(store, ids)
    async with running(tight):
        await eventually(await count_jobs(store, len(ids)))
    assert Counter(j["schedule_id"] for j in await jobs(store)) == Counter(ids)
    assert sizes
    assert max(sizes) <= batching.MIN_BATCH


async def test_a_herds_first_batch_goes_out_first_and_small(
    store: ScheduleStore, fast: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first read of a herd is full: the next read follows, but only once a first batch,
    # planned at once, is on its way (a read sent before it would delay the first job).
    small = fast.model_copy(
        update={"scheduler": fast.scheduler.model_copy(update={"batch_size": 20})}
    )
    calls: list[tuple[str, int]] = []
    real_fire, real_due = FiringStore.fire, FiringStore.due

    async def fire(self: FiringStore, lease: str, items: Any) -> list[int] | None:
        calls.append(("fire", len(items)))
        return await real_fire(self, lease, items)

    async def due(self: FiringStore, limit: int) -> Any:
        calls.append(("due", limit))
        return await real_due(self, limit)

    monkeypatch.setattr(FiringStore, "fire", fire)
    monkeypatch.setattr(FiringStore, "due", due)
    ids = [f"h{i:03d}" for i in range(60)]
    await make_due(store, ids)
    async with running(small):
        await eventually(await count_jobs(store, len(ids)))
    first_fire = next(i for i, (name, _) in enumerate(calls) if name == "fire")
    assert [name for name, _ in calls[: first_fire + 1]] == ["due", "fire"]
    assert calls[first_fire][1] <= batching.FIRST_BATCH


async def test_batches_are_bounded_and_keep_chains_whole() -> None:
    def group(sid: str, n: int) -> list[FireItem]:
        return [FireItem(sid, "1:0", i, i, i + 1, "fire") for i in range(n)]

    async def groups() -> AsyncIterator[list[FireItem]]:
        for g in [group("a", 3), group("b", 1), group("c", 4), group("d", 1), group("e", 2)]:
            yield g

    cut = [b async for b in batches(groups(), 4)]
    assert [[g[0].schedule_id for g in batch] for batch in cut] == [
        ["a", "b"],
        ["c"],
        ["d", "e"],
    ]
    # A small first batch (a round's, out at once), then the usual size.
    cut = [b async for b in batches(groups(), 4, first=1)]
    assert [[g[0].schedule_id for g in batch] for batch in cut] == [
        ["a"],
        ["b", "c"],
        ["d", "e"],
    ]


@pytest.mark.slow
async def test_seconds_cron_fires_on_whole_seconds(store: ScheduleStore, fast: Settings) -> None:
    await store.save(
        Schedule(id="sec", task="t", cron="* * * * * *", timezone="Europe/Rome", overlap="allow")
    )
    async with running(fast):
        await eventually(await count_jobs(store, 2))
    entries = await jobs(store)
    times = [int(j["scheduled_at"]) for j in entries]
    assert all(t % 1000 == 0 for t in times)
    assert times == list(range(times[0], times[-1] + 1, 1000))
    assert all(int(j["fired_at"]) - int(j["scheduled_at"]) < 1_000 for j in entries)
    # The engine fires what the pure preview announces.
    loaded = await store.load("sec")
    assert loaded.next_run is not None
    assert to_ms(loaded.next_run) == times[-1] + 1000
    preview = next_fire_times(loaded, from_ms(times[0] - 1), len(times))
    assert [to_ms(t) for t in preview] == times


async def test_a_round_that_fired_waits_its_slack_and_an_idle_wake_is_on_time(
    store: ScheduleStore,
) -> None:
    """After a round that fired everything due the leader looks again steady_slack_ms later
    (the fires of a steady stream go out a few per round); with nothing due it wakes when the
    next run is due, not later (a herd's instant)."""
    cfg = SchedulerSettings(steady_slack_ms=300)
    sizing = Batching(cfg)
    fire_store = firing(store)
    _, wakes = anyio.create_memory_object_stream[object](1)
    calendars = CalendarCache(CalendarStore(store.redis, store.keys))
    tick = ticker.Ticker(
        fire_store, cfg, SpecCache(fire_store, store.redis, cfg, sizing), sizing, wakes, calendars
    )
    lease, _ = await leases(store).acquire("test-owner", 60_000)
    assert lease is not None
    await store.save(Schedule(id="due", task="t", every=3600, overlap="allow"))
    await set_next_run(store, "due", await store.time_ms() - 10)
    assert await tick.tick(lease) == 0.3  # fired it, then waits the slack
    assert len(await jobs(store)) == 1
    await set_next_run(store, "due", await store.time_ms() + 50)
    delay = await tick.tick(lease)  # nothing due: wakes when it is, not a slack later
    assert delay <= 0.05
    wakes.close()


async def test_the_spec_cache_stays_within_its_size_and_a_fleet_larger_fires_whole(
    store: ScheduleStore,
) -> None:
    """With more schedules due than the spec cache holds, the leader reads specs again as it
    goes: the cache never holds more than spec_cache_size, and every schedule fires once,
    none dropped from the index (a spec that went while its schedule was being planned would
    read as a schedule whose hash is gone)."""
    cfg = SchedulerSettings(spec_cache_size=1_000, batch_size=300)
    sizing = Batching(cfg)
    fire_store = firing(store)
    _, wakes = anyio.create_memory_object_stream[object](1)
    cache = SpecCache(fire_store, store.redis, cfg, sizing)
    calendars = CalendarCache(CalendarStore(store.redis, store.keys))
    tick = ticker.Ticker(fire_store, cfg, cache, sizing, wakes, calendars)
    lease, _ = await leases(store).acquire("test-owner", 60_000)
    assert lease is not None
    ids = [f"s{i:04d}" for i in range(2_500)]
    client = Client(store.redis, Settings(prefix=store.keys.prefix))
    await client.add_many([{"id": sid, "task": "t", "every": 60} for sid in ids])
    due = await store.time_ms() - 10
    await store.redis.zadd(store.keys.schedules, dict.fromkeys(ids, due))
    sizes = []
    with anyio.fail_after(60):
        while len(await jobs(store)) < len(ids):
            await tick.tick(lease)
            sizes.append(len(cache.specs))
    assert max(sizes) <= 1_000
    assert len(await jobs(store)) == len(ids)
    scores = await store.redis.zmscore(store.keys.schedules, ids)
    assert all(score is not None and score > due for score in scores)
    wakes.close()


async def test_the_next_chunks_specs_are_read_while_this_one_is_planned(
    store: ScheduleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Specs the cache lacks are read a chunk ahead, beside the round's calls: the read of each
    next chunk runs while this chunk is planned, keeps this chunk's specs in the cache (a full
    cache makes room for it), and every schedule is planned once with its spec."""
    cfg = SchedulerSettings(spec_cache_size=1_000)
    sizing = Batching(cfg)
    monkeypatch.setattr(sizing, "load_chunk", lambda: 400)
    fire_store = firing(store)
    _, wakes = anyio.create_memory_object_stream[object](1)
    cache = SpecCache(fire_store, store.redis, cfg, sizing)
    calendars = CalendarCache(CalendarStore(store.redis, store.keys))
    tick = ticker.Ticker(fire_store, cfg, cache, sizing, wakes, calendars)
    ids = [f"s{i:04d}" for i in range(1_800)]
    client = Client(store.redis, Settings(prefix=store.keys.prefix))
    await client.add_many([{"id": sid, "task": "t", "every": 60} for sid in ids])
    now = await store.time_ms()
    events: list[tuple[str, list[str]]] = []
    read = cache.cache

    async def cache_recorded(wanted: list[str]) -> None:
        events.append(("read", list(wanted)))
        await read(wanted)

    monkeypatch.setattr(cache, "cache", cache_recorded)
    fire = FireRound(fire_store, "no-lease", cache, sizing, tick._read_due)
    sizes = []
    async with anyio.create_task_group() as fire._tg:
        async for group in tick._plan([(sid, now - 10) for sid in ids], now, fire):
            assert group[0].version  # planned with its spec, not as a schedule gone
            events.append(("plan", [group[0].schedule_id]))
            sizes.append(len(cache.specs))
            await anyio.lowlevel.checkpoint()  # the read ahead runs beside the planning
    assert [e[1][0] for e in events if e[0] == "plan"] == ids
    assert max(sizes) <= 1_000
    chunks = [ids[i : i + 400] for i in range(0, len(ids), 400)]
    for this, following in itertools.pairwise(chunks):
        # The read ahead keeps this chunk's ids and reads the next, while this is planned.
        ahead = events.index(("read", this + following))
        assert events.index(("plan", [this[0]])) < ahead < events.index(("plan", [this[-1]]))
    wakes.close()
