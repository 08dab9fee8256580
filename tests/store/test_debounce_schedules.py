"""A schedule's debounce: occurrences that pile up (triggers, a catch-up, a backfill) collapse
into one job, due a debounce after the last of them, through fire.lua, trigger.lua and
backfill.lua (lua/includes/debounce_fire.lua)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched import Schedule
from rsched._core.codes import Code
from rsched._core.fire_plan import FireItem, FireSpec, PlannedSpec, plan
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from rsched._store.queues import QueueStore
from rsched._store.schedules import ScheduleStore
from tests.support.leading import firing, leases
from tests.support.placement import move_to
from tests.support.waiting import eventually
from tests.support.worker_app import any_

HOUR_MS = 3_600_000


@pytest.fixture
def store(redis: Redis, settings: Settings) -> ScheduleStore:
    return ScheduleStore(redis, Keys(settings.prefix), history_limit=50)


@pytest.fixture
async def client(settings: Settings) -> Any:
    async with rsched.Client.from_settings(settings) as c:
        yield c


async def add(store: ScheduleStore, sid: str = "a", **spec: Any) -> None:
    if "cron" not in spec:
        spec.setdefault("every", 3600)
    await store.save(Schedule(id=sid, task="t", **spec))


async def lease_of(store: ScheduleStore) -> str:
    lease, _ = await leases(store).acquire("test-owner", 60_000)
    assert lease is not None
    return lease


async def delayed(store: ScheduleStore, queue: str = "default") -> list[tuple[dict[str, str], int]]:
    """The queue's delayed jobs (fields, due ms), earliest first."""
    key = store.keys.delayed_queue(queue)
    out = []
    for member, score in await any_(store.redis).zrange(key, 0, -1, withscores=True):
        flat = orjson.loads(member)
        out.append((dict(zip(flat[::2], flat[1::2], strict=True)), int(score)))
    return out


async def stream(store: ScheduleStore, queue: str = "default") -> list[dict[str, str]]:
    entries: Any = await store.redis.xrange(store.keys.queue(queue))
    return [fields for _, fields in entries]


@pytest.mark.cluster
@pytest.mark.parametrize("overlap", ["allow", "skip", "buffer_all", "cancel_previous"])
async def test_a_trigger_burst_makes_one_job_due_after_the_last(
    store: ScheduleStore, client: rsched.Client, overlap: str
) -> None:
    await add(store, payload={"k": 1}, debounce="1m", overlap=overlap)
    burst = [await client.trigger("a") for _ in range(4)]
    before = await store.time_ms()
    last = await client.trigger("a")
    after = await store.time_ms()
    window = burst[0].execution_id
    assert [f.status for f in [*burst, last]] == ["fired"] + ["debounced"] * 4
    assert {f.execution_id for f in [*burst, last]} == {window}
    assert await stream(store) == []
    [(job, due)] = await delayed(store)
    assert before + 60_000 <= due <= after + 60_000
    assert (job["execution_id"], job["schedule_id"], job["origin"]) == (window, "a", "manual")
    assert orjson.loads(job["payload"]) == {"k": 1}
    state = await client.get("a")
    assert state.runs == 1  # the merged occurrences are no runs of their own
    if overlap != "allow":  # the run marker names the window's job, alive past its due time
        run, until = await any_(store.redis).hmget(store.keys.schedule("a"), ["run", "run_until"])
        assert run == window
        assert int(until) > due + 60_000
    # The history: the window's job fired; each later occurrence skipped, debounced into it.
    events = (await client.history("a")).items
    assert [e.event for e in events].count("fired") == 1
    merged = [e for e in events if e.event == "skipped"]
    assert len(merged) == 4
    assert {(e.reason, e.extra.get("into"), e.origin) for e in merged} == {
        ("debounced", window, "manual")
    }
    runs = (await client.runs(schedule_id="a", status="skipped")).items
    assert [r.reason for r in runs] == ["debounced"] * 4


async def test_an_occurrence_after_the_window_closed_goes_through_the_overlap_policy(
    store: ScheduleStore, client: rsched.Client
) -> None:
    await add(store, debounce="50ms", overlap="skip")
    first = await client.trigger("a")
    queues = QueueStore(store.redis, store.keys)

    async def promoted() -> int:
        return (await queues.promote(["default"]))[0]

    await eventually(promoted)  # due in 50 ms by the server's clock
    [job] = await stream(store)
    assert job["execution_id"] == first.execution_id
    # The window's job left the delayed set: its run (the marker) is unfinished, so overlap=skip
    # skips the next trigger rather than merging it.
    skipped = await client.trigger("a")
    assert skipped.status == "skipped"
    assert await delayed(store) == []
    # Once the run ended (its marker cleared), the next trigger opens a new window.
    await store.redis.hdel(store.keys.schedule("a"), "run", "run_until")
    again = await client.trigger("a")
    assert again.status == "fired"
    assert again.execution_id != first.execution_id
    assert len(await delayed(store)) == 1


@pytest.mark.cluster
@pytest.mark.parametrize("overlap", ["allow", "skip", "buffer_one"])
async def test_a_catch_up_burst_collapses_into_one_job(store: ScheduleStore, overlap: str) -> None:
    await add(store, cron="* * * * *", misfire="catch_up", overlap=overlap, debounce="30s")
    lease = await lease_of(store)
    now = await store.time_ms()
    (fields,) = await store.fields(["a"])
    planned = PlannedSpec.from_hash(fields)
    due = planned.timing.prev_at_or_before(now)
    for _ in range(5):  # six occurrences missed during an outage
        assert due is not None
        due = planned.timing.prev_at_or_before(due - 1)
    assert due is not None
    await move_to(store.redis, store.keys, "a", due)
    items = plan("a", planned, due, now)
    assert [i.action for i in items] == ["catch_up"] * 6
    codes = await firing(store).fire(lease, items)
    assert codes == [Code.FIRED] + [Code.DEBOUNCED] * 5
    [(job, due_at)] = await delayed(store)
    assert job["execution_id"] == f"a@{items[0].sched}"
    assert due_at >= now + 30_000
    assert await stream(store) == []
    assert (await store.load("a")).runs == 1
    # The schedule moved on past the outage as without a debounce.
    assert await store.redis.zscore(store.keys.schedules, "a") == items[-1].next
    # A steady occurrence later, after the window's job left: a window of its own.
    await store.redis.delete(store.keys.delayed_queue("default"))
    await store.redis.hdel(store.keys.schedule("a"), "run", "run_until")
    sched = items[-1].sched
    await move_to(store.redis, store.keys, "a", sched)
    on_time = FireItem("a", fields["version"], sched, sched, sched + 60_000, "fire", 0,
                       items[0].spec)  # fmt: skip
    assert await firing(store).fire(lease, [on_time]) == [Code.FIRED]
    [(job, _)] = await delayed(store)
    assert job["execution_id"] == f"a@{sched}"


@pytest.mark.cluster
async def test_the_job_goes_to_the_stream_of_the_schedules_priority(
    store: ScheduleStore, client: rsched.Client
) -> None:
    queues = QueueStore(store.redis, store.keys)
    await add(store, "hi", debounce="50ms", priority="high", queue="q")
    lease = await lease_of(store)
    now = await store.time_ms()
    await move_to(store.redis, store.keys, "hi", now - 10)
    (fields,) = await store.fields(["hi"])
    spec = FireSpec.from_hash(fields)
    item = FireItem("hi", fields["version"], now - 10, now - 10, now + HOUR_MS, "fire", 0, spec)
    assert await firing(store).fire(lease, [item]) == [Code.FIRED]
    # No promoter runs: the fire's job is still delayed, and the trigger merges into it.
    assert (await client.trigger("hi")).status == "debounced"
    await add(store, "lo", debounce="50ms", priority="low", queue="q")
    assert (await client.trigger("lo")).status == "fired"  # the trigger's path opens one
    assert {job["priority"] for job, _ in await delayed(store, "q")} == {"high", "low"}

    async def promoted() -> int:
        return (await queues.promote(["q"]))[0]

    await eventually(promoted)
    await eventually(lambda: _empty_delayed(store, "q"))
    high: Any = await store.redis.xrange(store.keys.queue("q", "high"))
    low: Any = await store.redis.xrange(store.keys.queue("q", "low"))
    assert [f["schedule_id"] for _, f in high] == ["hi"]
    assert [f["schedule_id"] for _, f in low] == ["lo"]
    assert await store.redis.xlen(store.keys.queue("q")) == 0


async def _empty_delayed(store: ScheduleStore, queue: str) -> bool:
    await QueueStore(store.redis, store.keys).promote([queue])
    return not await store.redis.zcard(store.keys.delayed_queue(queue))


async def test_a_backfill_collapses_and_is_not_fired_again(
    store: ScheduleStore, client: rsched.Client
) -> None:
    await add(store, every=60, debounce="1m")
    now = await client.server_time()
    result = await client.backfill("a", now - timedelta(minutes=5), now)
    statuses = list(result.outcomes.values())
    assert statuses[0] == "fired"
    assert set(statuses[1:]) == {"debounced"}
    assert len(statuses) >= 4
    [(job, _)] = await delayed(store)
    assert job["execution_id"] == next(iter(result.outcomes))
    assert job["origin"] == "backfill"
    again = await client.backfill("a", now - timedelta(minutes=5), now)
    assert set(again.outcomes.values()) == {"already_fired"}
    assert len(await delayed(store)) == 1


async def test_a_key_of_the_wrong_type_is_refused_whole(
    store: ScheduleStore, client: rsched.Client
) -> None:
    await add(store, debounce="1m")
    await store.redis.set(store.keys.delayed_queue("default"), "x")
    with pytest.raises(rsched.StateError):
        await client.trigger("a")
    lease = await lease_of(store)
    now = await store.time_ms()
    await move_to(store.redis, store.keys, "a", now - 10)
    (fields,) = await store.fields(["a"])
    spec = FireSpec.from_hash(fields)
    item = FireItem("a", fields["version"], now - 10, now - 10, now + HOUR_MS, "fire", 0, spec)
    assert await firing(store).fire(lease, [item]) == [Code.WRONG_TYPE]
    assert await store.redis.llen(store.keys.history("a")) == 0
    assert await store.redis.zscore(store.keys.schedules, "a") == now - 10
    assert (await store.load("a")).runs == 0


def test_debounce_is_a_duration_up_to_a_day() -> None:
    assert Schedule(id="a", task="t", every=60, debounce="1m30s").debounce == 90
    assert Schedule(id="a", task="t", every=60, debounce=timedelta(days=1)).debounce == 86_400
    for bad, message in (("2d", "longer than a day"), (0, "zero"), ("soon", "not a duration")):
        with pytest.raises(rsched.InvalidSchedule, match=f"debounce: .*{message}"):
            Schedule(id="a", task="t", every=60, debounce=bad)
    assert FireSpec.from_hash({"debounce": "1.5"}).debounce_ms == 1500
    with pytest.raises(ValueError, match="debounce"):
        FireSpec.from_hash({"debounce": "forever"})
