"""Pending occurrences: catch_up and backfill run every occurrence they name, buffer_all holds
back what comes due while a run is unfinished, and each waits its turn (oldest first) until the
run before it ends, is dead-lettered, or its marker expires. Real servers, public paths."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched import Client, InvalidArgument, InvalidSchedule, Schedule, ScheduleFileError
from rsched._client.schedules_file import load_file
from rsched._core.codes import Code
from rsched._core.fire_plan import FireItem, FireSpec
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from rsched._scheduler.scheduler import Scheduler
from rsched._store.schedules import ScheduleStore
from tests.support.leading import firing, leases
from tests.support.waiting import eventually
from tests.support.worker_app import any_, fast_settings
from tests.support.workers import running

HOUR_MS = 3_600_000
MIN_MS = 60_000


@pytest.fixture
async def client(redis: Redis, settings: Settings) -> Client:
    return Client(redis, settings)


@pytest.fixture
def store(redis: Redis, settings: Settings) -> ScheduleStore:
    return ScheduleStore(redis, Keys(settings.prefix), history_limit=100)


async def lease_of(store: ScheduleStore) -> str:
    lease, _ = await leases(store).acquire("test-owner", 60_000)
    assert lease is not None
    return lease


async def add(store: ScheduleStore, sid: str = "a", **spec: Any) -> None:
    spec.setdefault("every", 3600)
    await store.save(Schedule(id=sid, task="t", **spec))


async def catch_up_chain(store: ScheduleStore, sid: str, n: int) -> list[FireItem]:
    """The items of a catch-up of ``n`` occurrences a minute apart, the newest an hour ago."""
    now = await store.time_ms()
    first = now - HOUR_MS - (n - 1) * MIN_MS
    await store.redis.zadd(store.keys.schedules, {sid: first})
    (fields,) = await store.fields([sid])
    spec = FireSpec.from_hash(fields)
    times = [first + i * MIN_MS for i in range(n)]
    nexts = [*times[1:], now + HOUR_MS]
    return [
        FireItem(sid, fields["version"], t, t, nxt, "catch_up", 1, spec)
        for t, nxt in zip(times, nexts, strict=True)
    ]


async def pending(store: ScheduleStore, sid: str = "a") -> list[dict[str, str]]:
    members: list[str] = any_(await store.redis.zrange(store.keys.pending(sid), 0, -1))
    out = []
    for member in members:
        flat = orjson.loads(member)
        out.append(dict(zip(flat[::2], flat[1::2], strict=True)))
    return out


async def jobs(store: ScheduleStore, queue: str = "default") -> list[dict[str, str]]:
    entries: Any = await store.redis.xrange(store.keys.queue(queue))
    return [fields for _, fields in entries]


async def trigger(store: ScheduleStore, sid: str = "a") -> Code:
    await anyio.sleep(0.003)  # a manual run's execution id is its ms: one each
    return (await store.trigger(sid, "default"))[0]


async def history(store: ScheduleStore, sid: str = "a") -> list[dict[str, Any]]:
    return list(reversed(await store.history(sid, 100)))  # oldest first


# --- the fire script ---------------------------------------------------------------------------


@pytest.mark.parametrize("overlap", ["skip", "buffer_one", "cancel_previous", "buffer_all"])
async def test_catch_up_queues_every_occurrence_behind_the_first(
    store: ScheduleStore, overlap: str
) -> None:
    await add(store, overlap=overlap, misfire="catch_up")
    lease = await lease_of(store)
    chain = await catch_up_chain(store, "a", 4)
    codes = await firing(store).fire(lease, chain)
    assert codes == [Code.FIRED, Code.BUFFERED, Code.BUFFERED, Code.BUFFERED]
    (job,) = await jobs(store)
    assert job["scheduled_at"] == str(chain[0].sched)
    assert job["origin"] == "misfire"
    waiting = await pending(store)
    assert [int(j["scheduled_at"]) for j in waiting] == [i.sched for i in chain[1:]]
    assert {j["origin"] for j in waiting} == {"misfire"}
    events = await history(store)
    assert [e["event"] for e in events] == ["fired", "buffered", "buffered", "buffered"]
    assert {e["origin"] for e in events} == {"misfire"}
    assert events[1]["policy"] == overlap
    # Pending occurrences count as runs, and the schedule moved on past them.
    fields = await store.redis.hgetall(store.keys.schedule("a"))
    assert fields["runs"] == "4"
    assert await store.redis.zscore(store.keys.schedules, "a") == chain[-1].next
    assert await store.redis.zscore(store.keys.backlogs, "a") == int(fields["run_until"])


async def test_catch_up_with_allow_queues_everything_at_once(store: ScheduleStore) -> None:
    await add(store, overlap="allow", misfire="catch_up")
    lease = await lease_of(store)
    chain = await catch_up_chain(store, "a", 3)
    assert await firing(store).fire(lease, chain) == [Code.FIRED] * 3
    assert [j["origin"] for j in await jobs(store)] == ["misfire"] * 3
    assert await pending(store) == []


async def test_catch_up_limit_drop_names_its_policy(store: ScheduleStore) -> None:
    await add(store, misfire="catch_up")
    lease = await lease_of(store)
    (first, *_) = await catch_up_chain(store, "a", 1)
    dropped = first._replace(action="limit", missed=7)
    assert await firing(store).fire(lease, [dropped]) == [Code.MISFIRE_SKIPPED]
    (event,) = await history(store)
    assert event["event"] == "misfired"
    assert (event["policy"], event["reason"], event["missed"]) == ("catch_up", "catch_up_limit", 7)


async def test_skipped_events_name_the_overlap_policy(store: ScheduleStore) -> None:
    await add(store, "s")  # overlap=skip
    await add(store, "one", overlap="buffer_one")
    for sid in ("s", "one"):
        assert await trigger(store, sid) == Code.FIRED
    assert await trigger(store, "s") == Code.SKIPPED
    assert await trigger(store, "one") == Code.BUFFERED
    assert await trigger(store, "one") == Code.SKIPPED  # at most one held back
    skipped = [e for e in await history(store, "s") if e["event"] == "skipped"]
    assert [(e["reason"], e["policy"], e["origin"]) for e in skipped] == [
        ("overlap", "skip", "manual")
    ]
    one = [(e["event"], e.get("reason"), e.get("policy")) for e in await history(store, "one")]
    assert one == [
        ("fired", None, None),
        ("buffered", None, "buffer_one"),
        ("skipped", "buffer_full", "buffer_one"),
    ]


async def test_buffer_all_holds_back_up_to_its_limit(store: ScheduleStore) -> None:
    await add(store, overlap="buffer_all", buffer_limit=2)
    codes = [await trigger(store) for _ in range(4)]
    assert codes == [Code.FIRED, Code.BUFFERED, Code.BUFFERED, Code.SKIPPED]
    events = await history(store)
    assert (events[-1]["event"], events[-1]["reason"], events[-1]["policy"]) == (
        "skipped",
        "buffer_full",
        "buffer_all",
    )
    assert len(await pending(store)) == 2
    # Caught-up and backfilled occurrences are not held back by the policy: they always wait.
    assert (await store.redis.hget(store.keys.schedule("a"), "buffer_limit")) == "2"


async def test_an_update_or_removal_drops_what_is_pending(store: ScheduleStore) -> None:
    await add(store, overlap="buffer_all")
    for _ in range(3):
        await trigger(store)
    assert len(await pending(store)) == 2
    await add(store, overlap="buffer_all", payload={"v": 2})  # the generation moves
    assert await pending(store) == []
    await trigger(store)
    assert len(await pending(store)) == 1
    await store.remove("a")
    assert await store.redis.exists(store.keys.pending("a")) == 0


async def test_a_lost_run_releases_the_backlog_at_the_next_fire(store: ScheduleStore) -> None:
    await add(store, misfire="catch_up")  # overlap=skip
    lease = await lease_of(store)
    chain = await catch_up_chain(store, "a", 3)
    await firing(store).fire(lease, chain)
    key = store.keys.schedule("a")
    await store.redis.hset(key, mapping={"run_until": "1", "run_state": "running"})
    # The next occurrence finds the marker expired: the oldest pending one runs first, and the
    # on-time occurrence is skipped behind it (overlap=skip).
    now = await store.time_ms()
    await store.redis.zadd(store.keys.schedules, {"a": now - 10})
    spec = chain[0].spec
    item = FireItem("a", chain[0].version, now - 10, now - 10, now + HOUR_MS, "fire", 0, spec)
    assert await firing(store).fire(lease, [item]) == [Code.SKIPPED]
    assert [int(j["scheduled_at"]) for j in await jobs(store)] == [i.sched for i in chain[:2]]
    fields = await store.redis.hgetall(key)
    assert fields["run"] == f"a@{chain[1].sched}"
    assert "run_state" not in fields
    released = [e for e in await history(store) if e["event"] == "released"]
    assert released[0]["reason"] == "marker_expired"
    assert released[0]["origin"] == "misfire"
    assert [int(j["scheduled_at"]) for j in await pending(store)] == [chain[2].sched]


async def test_the_scheduler_sweep_releases_a_lost_runs_backlog(store: ScheduleStore) -> None:
    await add(store, overlap="buffer_all")
    for _ in range(3):
        await trigger(store)
    lease = await lease_of(store)
    assert await firing(store).release_lost(lease) == 0  # the run is alive
    await store.redis.hset(store.keys.schedule("a"), "run_until", "1")
    await store.redis.zadd(store.keys.backlogs, {"a": 1})
    assert await firing(store).release_lost("not-the-lease") is None
    assert await firing(store).release_lost(lease) == 1
    assert len(await jobs(store)) == 2
    assert len(await pending(store)) == 1
    until = int(await store.redis.hget(store.keys.schedule("a"), "run_until") or 0)
    assert await store.redis.zscore(store.keys.backlogs, "a") == until
    assert await firing(store).release_lost(lease) == 0  # the released run is alive
    # A removed schedule leaves the index at the next sweep, releasing nothing.
    await store.remove("a")
    await store.redis.zadd(store.keys.backlogs, {"a": 1})
    assert await firing(store).release_lost(lease) == 0
    assert await store.redis.zscore(store.keys.backlogs, "a") is None


async def test_a_hand_edited_pending_member_is_dropped_not_run(store: ScheduleStore) -> None:
    await add(store, overlap="buffer_all")
    assert await trigger(store) == Code.FIRED
    assert await trigger(store) == Code.BUFFERED
    key = store.keys.pending("a")
    await store.redis.zadd(key, {'["execution_id", 7]': 1, "not json": 2, '{"a": "b"}': 3})
    await store.redis.hset(store.keys.schedule("a"), "run_until", "1")
    await store.redis.zadd(store.keys.backlogs, {"a": 1})
    lease = await lease_of(store)
    assert await firing(store).release_lost(lease) == 1  # the good one, after the three bad ones
    assert await store.redis.exists(key) == 0
    assert len(await jobs(store)) == 2


async def test_no_marker_means_nothing_pending_is_looked_at(store: ScheduleStore) -> None:
    # The on-time path: with no run in progress a fire never reads the pending set, so a set
    # someone else wrote under that name does not stop it.
    await add(store)
    await store.redis.set(store.keys.pending("a"), "not a zset")
    lease = await lease_of(store)
    now = await store.time_ms()
    await store.redis.zadd(store.keys.schedules, {"a": now - 10})
    (fields,) = await store.fields(["a"])
    item = FireItem(
        "a", fields["version"], now - 10, now - 10, now + HOUR_MS, "fire", 0, FireSpec()
    )
    assert await firing(store).fire(lease, [item]) == [Code.FIRED]
    # With a run in progress, overlap=skip still does not read it; a caught-up occurrence,
    # which would wait there, is refused whole.
    await store.redis.zadd(store.keys.schedules, {"a": now - 5})
    item = item._replace(expect=now - 5, sched=now - 5)
    assert await firing(store).fire(lease, [item]) == [Code.SKIPPED]
    await store.redis.zadd(store.keys.schedules, {"a": now - 4})
    item = item._replace(expect=now - 4, sched=now - 4, action="catch_up", missed=1)
    before = await store.redis.hgetall(store.keys.schedule("a"))
    assert await firing(store).fire(lease, [item]) == [Code.WRONG_TYPE]
    assert await store.redis.hgetall(store.keys.schedule("a")) == before


# --- backfill --------------------------------------------------------------------------------


async def test_backfill_under_skip_queues_the_rest_oldest_first(client: Client) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    await client.add(Schedule(id="bf", task="t", every=60, start_at=start))
    result = await client.backfill("bf", start, start + timedelta(minutes=3))
    assert list(result.outcomes.values()) == ["fired", "buffered", "buffered", "buffered"]
    again = await client.backfill("bf", start, start + timedelta(minutes=3))
    assert again.count("already_fired") == 4


async def test_backfill_of_every_before_its_anchor_uses_the_grid(client: Client) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    await client.add(Schedule(id="g", task="t", every=600, overlap="allow"))
    created = (await client.get("g")).created_at
    assert created is not None
    # Before its creation: anchor - k * every, the grid of created_at + every.
    result = await client.backfill("g", now - timedelta(hours=1), now - timedelta(seconds=1))
    times = [int(e.split("@")[1]) for e in result.outcomes]
    anchor = int(created.timestamp() * 1000) + 600_000
    assert len(times) == 6
    assert all((anchor - t) % 600_000 == 0 for t in times)
    assert set(result.outcomes.values()) == {"fired"}
    start = datetime(2020, 1, 1, tzinfo=UTC)
    await client.add(Schedule(id="s", task="t", every=3600, start_at=start, overlap="allow"))
    result = await client.backfill("s", start - timedelta(hours=3), start - timedelta(minutes=1))
    assert [int(e.split("@")[1]) for e in result.outcomes] == [
        int((start - timedelta(hours=h)).timestamp() * 1000) for h in (3, 2, 1)
    ]


async def test_backfill_of_a_range_without_occurrences_fails(client: Client) -> None:
    start = datetime(2020, 1, 1, tzinfo=UTC)
    await client.add(Schedule(id="c", task="t", cron="0 3 * * *", start_at=start))
    with pytest.raises(InvalidArgument, match="holds no occurrence of 'c'"):
        await client.backfill("c", start - timedelta(days=3), start - timedelta(days=1))
    await client.add(Schedule(id="h", task="t", cron="0 3 * * *"))
    with pytest.raises(InvalidArgument, match=r"start: .* holds no occurrence"):
        await client.backfill("h", start, start + timedelta(hours=2))


# --- end to end: a scheduler and a worker ------------------------------------------------------


@asynccontextmanager
async def scheduler(redis: Redis, settings: Settings) -> AsyncIterator[None]:
    sched = Scheduler(redis, settings)
    async with anyio.create_task_group() as tg:
        await tg.start(sched.run)
        try:
            yield
        finally:
            sched.stop()


def recording_worker(
    settings: Settings, runs: list[int], state: dict[str, int], sleep_s: float = 0.1
) -> rsched.Worker:
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        assert job.scheduled_at is not None
        runs.append(int(job.scheduled_at.timestamp() * 1000))
        await anyio.sleep(sleep_s)
        state["now"] -= 1

    return worker


async def test_catch_up_after_an_outage_runs_every_missed_occurrence(
    redis: Redis, settings: Settings
) -> None:
    store = ScheduleStore(redis, Keys(settings.prefix), history_limit=100)
    now = await store.time_ms()
    first = now - 30_000 - 5 * MIN_MS  # the next after these is 30 s away
    # Down for the last six occurrences (a minute apart): overlap=skip, misfire=catch_up.
    await store.write(
        Schedule(id="s1", task="t", every=60, misfire="catch_up", misfire_grace_s=1),
        mode="add",
        expect_gen=None,
        next_ms=first,
        created_ms=first - 60_000,
    )
    runs: list[int] = []
    state = {"now": 0, "peak": 0}
    worker = recording_worker(settings, runs, state)
    async with running(worker, redis), scheduler(redis, settings):
        await eventually(lambda: len(runs) >= 6)
        await eventually(lambda: state["now"] == 0)
    assert runs == [first + i * MIN_MS for i in range(6)]  # each once, oldest first
    assert state["peak"] == 1
    events = list(reversed(await store.history("s1", 100)))
    assert [e["origin"] for e in events if e["event"] in ("fired", "buffered")] == ["misfire"] * 6
    assert not [e for e in events if e["event"] == "skipped"]
    released = [e for e in events if e["event"] == "released"]
    assert [e["scheduled_at"] for e in released] == runs[1:]
    assert all(e["after"] for e in released)  # each released by the end of the run before


async def test_backfill_runs_one_after_another_and_dead_letters_release_too(
    redis: Redis, settings: Settings
) -> None:
    runs: list[int] = []
    state = {"now": 0, "peak": 0}
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        assert job.scheduled_at is not None
        runs.append(int(job.scheduled_at.timestamp() * 1000))
        await anyio.sleep(0.05)
        state["now"] -= 1
        if len(runs) % 2:
            raise RuntimeError("every other run fails for good")

    client = Client(redis, settings)
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    await client.add(
        Schedule(id="b", task="t", every=60, start_at=start, max_retries=0, overlap="skip")
    )
    result = await client.backfill("b", start, start + timedelta(minutes=4))
    assert list(result.outcomes.values()) == ["fired"] + ["buffered"] * 4
    async with running(worker, redis):
        await eventually(lambda: len(runs) >= 5)
        await eventually(lambda: state["now"] == 0)
    assert runs == [int((start + timedelta(minutes=i)).timestamp() * 1000) for i in range(5)]
    assert state["peak"] == 1
    events = await ScheduleStore(redis, Keys(settings.prefix), history_limit=100).history("b", 100)
    assert [e["event"] for e in events].count("dead") == 3


async def test_buffer_all_runs_each_held_back_occurrence_in_order(
    redis: Redis, settings: Settings
) -> None:
    runs: list[int] = []
    state = {"now": 0, "peak": 0}
    worker = recording_worker(settings, runs, state, sleep_s=0.3)
    store = ScheduleStore(redis, Keys(settings.prefix), history_limit=100)
    now = await store.time_ms()
    await store.write(
        Schedule(id="s1", task="t", every=0.1, overlap="buffer_all", buffer_limit=3),
        mode="add",
        expect_gen=None,
        next_ms=now + 100,
        created_ms=now,
    )
    async with running(worker, redis), scheduler(redis, settings):
        await eventually(lambda: len(runs) >= 5)
    assert state["peak"] == 1
    assert runs == sorted(runs)
    events = list(reversed(await store.history("s1", 100)))
    names = [e["event"] for e in events]
    assert "released" in names
    full = [e for e in events if e.get("reason") == "buffer_full"]
    assert full
    assert full[0]["policy"] == "buffer_all"


async def test_a_release_goes_to_the_queue_of_the_current_spec(
    redis: Redis, settings: Settings
) -> None:
    store = ScheduleStore(redis, Keys(settings.prefix), history_limit=100)
    worker = rsched.Worker(queues=["qa", "qb"], settings=fast_settings(settings))
    ran: list[tuple[str, str]] = []
    gate = anyio.Event()
    key = store.keys.schedule("q")

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        ran.append((job.queue, job.execution_id))
        await gate.wait()

    async def marker_expired() -> bool:
        until = await redis.hget(key, "run_until")
        return until is not None and int(until) <= await store.time_ms()

    await add(store, "q", queue="qa", overlap="buffer_all")
    async with running(worker, redis):
        assert (await store.trigger("q", "qa"))[0] == Code.FIRED
        await eventually(lambda: len(ran) == 1)
        # The run of the old spec still holds the marker; the new spec's occurrence waits.
        await add(store, "q", queue="qb", overlap="buffer_all")
        code, second = await store.trigger("q", "qb")
        assert code == Code.BUFFERED
        gate.set()
        # The end of the run on qa leaves the release to whoever names qb's stream: its marker
        # expired, the occurrence still pending.
        await eventually(marker_expired)
        assert len(await pending(store, "q")) == 1
        # The schedule's next fire releases it first (the sweep would, at the marker's expiry).
        code, third = await store.trigger("q", "qb")
        assert code == Code.BUFFERED
        await eventually(lambda: len(ran) == 3)
    assert ran[1:] == [("qb", second), ("qb", third)]


async def test_the_sweep_leaves_a_schedule_whose_stream_changed_since_its_read(
    store: ScheduleStore,
) -> None:
    await add(store, overlap="buffer_all")
    assert await trigger(store) == Code.FIRED
    assert await trigger(store) == Code.BUFFERED
    await store.redis.hset(store.keys.schedule("a"), "run_until", "1")
    await store.redis.zadd(store.keys.backlogs, {"a": 1})
    lease = await lease_of(store)
    k = store.keys
    declared = [k.schedule("a"), k.history("a"), k.pending("a"), k.queue("other")]
    args = [lease, store.history_limit, "a"]
    assert await store.call("release_lost", [k.leader, k.backlogs, *declared], args) == 0
    assert len(await pending(store)) == 1
    assert await store.redis.zscore(k.backlogs, "a") == 1  # for the next sweep
    assert await firing(store).release_lost(lease) == 1


async def test_a_running_scheduler_releases_the_backlog_of_a_lost_run(
    redis: Redis, settings: Settings
) -> None:
    store = ScheduleStore(redis, Keys(settings.prefix), history_limit=100)
    await add(store, overlap="buffer_all")
    assert await trigger(store) == Code.FIRED
    assert await trigger(store) == Code.BUFFERED
    # The first run's job is lost (gone from its stream) and its marker expires.
    await redis.delete(store.keys.queue("default"))
    await redis.hset(store.keys.schedule("a"), "run_until", "1")
    await redis.zadd(store.keys.backlogs, {"a": 1})

    async def released() -> bool:
        return await redis.xlen(store.keys.queue("default")) > 0

    async with scheduler(redis, settings):
        await eventually(released)
    (job,) = await jobs(store)
    assert await redis.hget(store.keys.schedule("a"), "run") == job["execution_id"]
    last = (await history(store))[-1]
    assert (last["event"], last["reason"]) == ("released", "marker_expired")


# --- the spec ----------------------------------------------------------------------------------


def test_buffer_limit_is_validated() -> None:
    assert Schedule(id="a", task="t", every=1, overlap="buffer_all", buffer_limit=5).buffer_limit
    for bad in (0, -1, 1.5, "x", True, 10**9):
        with pytest.raises(InvalidSchedule, match="buffer_limit"):
            Schedule(id="a", task="t", every=1, buffer_limit=bad)
    spec = Schedule(id="a", task="t", every=1).spec_fields()
    assert "buffer_limit" not in spec  # the default is not stored
    stored = Schedule(id="a", task="t", every=1, buffer_limit=7).spec_fields()
    assert stored["buffer_limit"] == "7"
    assert Schedule.from_hash("a", {**stored, "version": "1:0"}).buffer_limit == 7


def test_a_schedules_file_takes_buffer_all(tmp_path: Path) -> None:
    path = tmp_path / "schedules.toml"
    path.write_text(
        '[[schedule]]\nid = "a"\ntask = "t"\nevery = 60\noverlap = "buffer_all"\n'
        "buffer_limit = 12\n"
    )
    _, (schedule,) = load_file(path)
    assert (schedule.overlap, schedule.buffer_limit) == ("buffer_all", 12)
    path.write_text('[[schedule]]\nid = "a"\ntask = "t"\nevery = 60\nbuffer_limit = 0\n')
    with pytest.raises(ScheduleFileError, match="buffer_limit"):
        load_file(path)
