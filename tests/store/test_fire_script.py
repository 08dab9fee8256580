"""The fire script against real servers: fencing, versions, re-sends, due-ness, bad keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from rsched import Schedule, StateError
from rsched._core.codes import Code
from rsched._core.fire_plan import FireItem, FireSpec
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from rsched._redis.connection import connect
from rsched._store.schedules import ScheduleStore
from tests.support.leading import firing, leases
from tests.support.placement import move_to, next_score

HOUR_MS = 3_600_000


@pytest.fixture
def store(redis: Redis, settings: Settings) -> ScheduleStore:
    return ScheduleStore(redis, Keys(settings.prefix), history_limit=5)


async def due_item(
    store: ScheduleStore, sid: str, *, late_ms: int = 1_000, action: str = "fire"
) -> FireItem:
    """Move the schedule's next run ``late_ms`` into the past and return the item firing it."""
    now = await store.time_ms()
    sched = now - late_ms
    await move_to(store.redis, store.keys, sid, sched)
    (fields,) = await store.fields([sid])
    spec = FireSpec.from_hash(fields)
    return FireItem(sid, fields["version"], sched, sched, sched + HOUR_MS, action, 1, spec)


async def add(store: ScheduleStore, sid: str = "a", **spec: Any) -> None:
    spec.setdefault("every", 3600)
    await store.save(Schedule(id=sid, task="t", **spec))


async def fire(store: ScheduleStore, lease: str, *items: FireItem) -> list[int] | None:
    return await firing(store).fire(lease, list(items))


async def jobs(store: ScheduleStore, queue: str = "default") -> list[dict[str, str]]:
    entries: Any = await store.redis.xrange(store.keys.queue(queue))
    return [fields for _, fields in entries]


async def lease_of(store: ScheduleStore) -> str:
    lease, _ = await leases(store).acquire("test-owner", 60_000)
    assert lease is not None
    return lease


async def test_a_fire_call_reports_its_time_inside_the_server(
    store: ScheduleStore, server: Any
) -> None:
    for sid in ("a", "b"):
        await add(store, sid)
    lease = await lease_of(store)
    items = [await due_item(store, "a"), await due_item(store, "b")]
    fires = firing(store)
    assert await fires.fire(lease, items) == [Code.FIRED, Code.FIRED]
    if server.kind == "redis":  # its TIME moves inside a script
        assert fires.fire_server_us > 0
        assert fires.fire_timed_items == 2
    else:  # Valkey's stands still: the scheduler times the call itself
        assert (fires.fire_server_us, fires.fire_timed_items) == (0, 0)


@pytest.mark.cluster
async def test_fires_once_and_advances(store: ScheduleStore) -> None:
    await add(store, payload={"k": 1})
    lease = await lease_of(store)
    item = await due_item(store, "a")
    assert await fire(store, lease, item) == [Code.FIRED]
    assert await fire(store, lease, item) == [Code.STALE]  # the same call again: already fired
    (job,) = await jobs(store)
    assert job["execution_id"] == f"a@{item.sched}"
    assert job["schedule_id"] == "a"
    assert job["task"] == "t"
    assert job["payload"] == '{"k":1}'
    assert job["scheduled_at"] == str(item.sched)
    assert job["attempt"] == "1"
    assert job["generation"] == "1"
    assert int(job["fired_at"]) >= item.sched
    fields = await store.redis.hgetall(store.keys.schedule("a"))
    assert fields["runs"] == "1"
    assert fields["last_run"] == str(item.sched)
    assert "next_run" not in fields  # the index holds it
    assert await store.redis.zscore(store.keys.schedules, "a") == item.next
    assert await store.redis.zscore(store.keys.schedules, "a") == item.next
    (event,) = await store.history("a", 10)
    assert event["event"] == "fired"
    assert event["scheduled_at"] == item.sched
    assert event["late_ms"] == event["at"] - item.sched >= 1_000


@pytest.mark.cluster
async def test_stale_lease_writes_nothing(store: ScheduleStore) -> None:
    await add(store)
    lease = await lease_of(store)
    item = await due_item(store, "a")
    before = await store.redis.hgetall(store.keys.schedule("a"))
    # Another scheduler took over after this one's lease expired: its token is newer.
    await store.redis.delete(store.keys.leader)
    newer, _ = await leases(store).acquire("other-owner", 60_000)
    assert newer is not None
    assert int(newer.split(":")[0]) > int(lease.split(":")[0])
    assert await fire(store, lease, item) is None
    assert await jobs(store) == []
    assert await store.redis.hgetall(store.keys.schedule("a")) == before
    assert await store.history("a", 10) == []
    # No lease at all is refused too.
    await store.redis.delete(store.keys.leader)
    assert await fire(store, lease, item) is None


async def test_old_version_never_fires(store: ScheduleStore) -> None:
    await add(store)
    lease = await lease_of(store)
    old = await due_item(store, "a")
    await store.save(Schedule(id="a", task="new-task", every=3600))  # bumps the generation
    new = await due_item(store, "a")
    stale = FireItem("a", old.version, new.expect, new.sched, new.next, "fire")
    assert await fire(store, lease, stale) == [Code.STALE]
    assert await jobs(store) == []
    assert await fire(store, lease, new) == [Code.FIRED]
    (job,) = await jobs(store)
    assert (job["task"], job["generation"]) == ("new-task", "2")


async def test_removed_schedule_never_fires(store: ScheduleStore) -> None:
    await add(store)
    lease = await lease_of(store)
    item = await due_item(store, "a")
    await store.remove("a")
    assert await fire(store, lease, item) == [Code.STALE]
    assert await jobs(store) == []
    assert await store.redis.zscore(store.keys.schedules, "a") is None


async def test_recreated_schedule_does_not_match_old_plan(store: ScheduleStore) -> None:
    await add(store)
    lease = await lease_of(store)
    old = await due_item(store, "a")
    await store.remove("a")
    await anyio.sleep(0.002)  # a different creation time
    await add(store)  # generation 1 again
    new = await due_item(store, "a", late_ms=1_000)
    assert new.version != old.version
    stale = FireItem("a", old.version, new.expect, new.sched, new.next, "fire")
    assert await fire(store, lease, stale) == [Code.STALE]
    assert await jobs(store) == []


async def test_not_due_yet(store: ScheduleStore) -> None:
    await add(store)
    lease = await lease_of(store)
    item = await due_item(store, "a", late_ms=-60_000)
    assert await fire(store, lease, item) == [Code.NOT_DUE]
    assert await jobs(store) == []


async def test_paused_schedule_is_stale(store: ScheduleStore) -> None:
    await add(store)
    lease = await lease_of(store)
    item = await due_item(store, "a")
    await store.pause("a", "maintenance")
    assert await fire(store, lease, item) == [Code.STALE]
    assert await jobs(store) == []
    assert await next_score(store.redis, store.keys, "a") == float("inf")


@pytest.mark.cluster
async def test_concurrent_identical_calls_fire_once(store: ScheduleStore) -> None:
    for sid in ("a", "b", "c"):
        await add(store, sid)
    lease = await lease_of(store)
    items = [await due_item(store, sid) for sid in ("a", "b", "c")]
    results: list[list[int] | None] = []

    async def call() -> None:
        results.append(await fire(store, lease, *items))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(call)
    fired, stale = [Code.FIRED] * 3, [Code.STALE] * 3
    assert sorted(r or [] for r in results) == [stale, stale, fired]
    assert len(await jobs(store)) == 3


@pytest.mark.cluster
async def test_misfire_skip_records_history_only(store: ScheduleStore) -> None:
    await add(store)
    lease = await lease_of(store)
    item = await due_item(store, "a", late_ms=HOUR_MS)
    skip = item._replace(action="skip", missed=3)
    assert await fire(store, lease, skip) == [Code.MISFIRE_SKIPPED]
    assert await jobs(store) == []
    (event,) = await store.history("a", 10)
    assert event["event"] == "misfired"
    assert event["missed"] == 3
    assert event["scheduled_at"] == item.sched
    assert event["late_ms"] >= HOUR_MS
    fields = await store.redis.hgetall(store.keys.schedule("a"))
    assert await store.redis.zscore(store.keys.schedules, "a") == item.next
    assert "runs" not in fields


async def test_history_is_capped(store: ScheduleStore) -> None:
    await add(store, overlap="allow")
    lease = await lease_of(store)
    for _ in range(8):
        assert await fire(store, lease, await due_item(store, "a")) == [Code.FIRED]
    assert await store.redis.llen(store.keys.history("a")) == 5  # history_limit of the store


async def test_last_occurrence_completes(store: ScheduleStore) -> None:
    await add(store, max_runs=2, overlap="allow")
    lease = await lease_of(store)
    assert await fire(store, lease, await due_item(store, "a")) == [Code.FIRED]
    assert await fire(store, lease, await due_item(store, "a")) == [Code.FIRED]
    fields = await store.redis.hgetall(store.keys.schedule("a"))
    assert fields["status"] == "completed"
    assert "next_run" not in fields
    assert await next_score(store.redis, store.keys, "a") == float("inf")
    # No next occurrence at all also completes (an `at` one-off, or the end of the window).
    await add(store, "b")
    item = await due_item(store, "b")
    last = item._replace(next=None)
    assert await fire(store, lease, last) == [Code.FIRED]
    assert (await store.load("b")).completed


async def test_wrong_type_key_is_reported_and_others_fire(store: ScheduleStore) -> None:
    await add(store, "a")
    await add(store, "b")
    lease = await lease_of(store)
    good = await due_item(store, "a")
    bad = await due_item(store, "b")
    await store.redis.delete(store.keys.schedule("b"))
    await store.redis.set(store.keys.schedule("b"), "not a hash")
    assert await fire(store, lease, good, bad) == [Code.FIRED, Code.WRONG_TYPE]
    assert await store.redis.get(store.keys.schedule("b")) == "not a hash"
    assert len(await jobs(store)) == 1
    with pytest.raises(StateError, match="wrong type"):
        await store.load("b")
    with pytest.raises(StateError, match="wrong type"):
        await store.save(Schedule(id="b", task="t", every=60))
    with pytest.raises(StateError):
        await store.pause("b", None)
    assert await store.redis.get(store.keys.schedule("b")) == "not a hash"
    # A wrong-type history list or queue stream is refused the same way, before any write.
    await store.redis.set(store.keys.history("a"), "x")
    assert await fire(store, lease, await due_item(store, "a")) == [Code.WRONG_TYPE]
    assert len(await jobs(store)) == 1


@pytest.mark.parametrize(
    ("overlap", "marker", "action"),
    [
        ("allow", False, "fire"),
        ("skip", False, "fire"),
        ("skip", True, "fire"),
        ("buffer_one", True, "fire"),
        ("cancel_previous", True, "misfire"),
        ("skip", False, "skip"),
    ],
)
async def test_wrong_type_history_refuses_every_path_whole(
    store: ScheduleStore, overlap: str, marker: bool, action: str
) -> None:
    # The history key's type is checked by the first push itself: each path must still write
    # nothing at all (no job, no marker, no buffered entry, no state change).
    await add(store, overlap=overlap)
    lease = await lease_of(store)
    item = await due_item(store, "a", action=action)
    if marker:
        await store.redis.hset(
            store.keys.schedule("a"), mapping={"run": "a@1", "run_state": "running"}
        )
    await store.redis.set(store.keys.history("a"), "x")
    before = await store.redis.hgetall(store.keys.schedule("a"))  # the run marker included
    score = await store.redis.zscore(store.keys.schedules, "a")
    assert await fire(store, lease, item) == [Code.WRONG_TYPE]
    assert await jobs(store) == []
    assert await store.redis.hgetall(store.keys.schedule("a")) == before
    assert await store.redis.exists(store.keys.pending("a")) == 0
    assert await store.redis.zscore(store.keys.schedules, "a") == score
    assert await store.redis.get(store.keys.history("a")) == "x"


async def test_hash_without_task_is_refused(store: ScheduleStore) -> None:
    await add(store)
    lease = await lease_of(store)
    item = await due_item(store, "a")
    await store.redis.hdel(store.keys.schedule("a"), "task")
    assert await fire(store, lease, item) == [Code.WRONG_TYPE]
    assert await jobs(store) == []


async def test_malformed_arguments_write_nothing(store: ScheduleStore) -> None:
    await add(store)
    lease = await lease_of(store)
    item = await due_item(store, "a")
    bad = item._replace(action="explode")
    with pytest.raises(StateError, match="malformed"):
        await fire(store, lease, item, bad)
    assert await jobs(store) == []
    # Groups whose count does not match the items that follow, or with no items at all.
    k = store.keys
    head = [lease, "5", k.cancel, k.schedule(""), k.history(""), k.pending(""), k.queue("")]
    head.append(k.delayed_queue(""))
    with_spec = [*head, "1", item.spec.arg()]
    group = f"{item.expect} {item.next} 1"
    for items in (
        [f"2 {group}", "a", item.version],
        [f"1 {group}", "a"],
        [f"0 {group}"],
        [f"1 {group}", "a", item.version, "a"],
        [f"1 {group}", "", item.version],
        [f"1 {item.expect} {item.next} 2", "a", item.version],
    ):
        keys = [k.leader, k.schedules, k.backlogs, k.runs, k.activity]
        reply = await store.call_packed("fire", keys, [*with_spec, *items])
        assert reply == "-7", items
    assert await jobs(store) == []
    assert await fire(store, lease, item) == [Code.FIRED]


async def test_wrong_type_index_writes_nothing(redis: Redis, settings: Settings) -> None:
    store = ScheduleStore(redis, Keys(settings.prefix))
    await add(store)
    lease = await lease_of(store)
    item = await due_item(store, "a")
    await redis.delete(store.keys.schedules)
    await redis.set(store.keys.schedules, "oops")
    with pytest.raises(StateError, match="not a sorted set"):
        await fire(store, lease, item)
    assert await jobs(store) == []


@pytest.mark.slow
async def test_client_retries_across_a_server_restart(
    make_server: Callable[..., Any], prefix: str
) -> None:
    server = make_server(appendonly=True)
    client = connect(server.url)
    try:
        store = ScheduleStore(client, Keys(prefix))
        await add(store)
        await anyio.to_thread.run_sync(server.restart)
        # The pooled connection died with the old process: the call is re-sent, not failed.
        assert (await store.load("a")).task == "t"
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_runs", "many"), ("runs", "x"), ("opts", "{timeout_s: 1h}"), ("run_until", "soon")],
)
async def test_hand_edited_numbers_are_refused_whole(
    store: ScheduleStore, field: str, value: str
) -> None:
    await add(store)
    lease = await lease_of(store)
    item = await due_item(store, "a")
    await store.redis.hset(store.keys.schedule("a"), field, value)
    before = await store.redis.hgetall(store.keys.schedule("a"))
    if field in ("runs", "run_until"):  # state: the fire script reads and checks it
        assert await fire(store, lease, item) == [Code.WRONG_TYPE]
    else:  # fire spec: the scheduler reads it with the version it plans with, and refuses it
        with pytest.raises(ValueError, match=field):
            FireSpec.from_hash({str(k): str(v) for k, v in before.items()})
    assert await jobs(store) == []
    assert await store.redis.hgetall(store.keys.schedule("a")) == before
    assert await store.redis.exists(store.keys.history("a")) == 0
    with pytest.raises(StateError):
        await store.trigger("a", "default")
    assert await jobs(store) == []


async def test_malformed_fire_spec_is_refused_whole(store: ScheduleStore) -> None:
    await add(store)
    lease = await lease_of(store)
    item = await due_item(store, "a")
    for spec in (FireSpec(overlap="sometimes"), FireSpec(opts="[1]")):
        with pytest.raises(StateError, match="malformed"):
            await fire(store, lease, item._replace(spec=spec))
    assert await jobs(store) == []
    assert await fire(store, lease, item) == [Code.FIRED]


async def test_unreadable_generation_is_refused(store: ScheduleStore) -> None:
    await add(store)
    await store.redis.hset(store.keys.schedule("a"), "version", "two")
    with pytest.raises(StateError):
        await store.save(Schedule(id="a", task="t", every=60))
    assert await store.redis.hget(store.keys.schedule("a"), "version") == "two"


async def test_wrong_type_index_refuses_client_writes(store: ScheduleStore) -> None:
    await add(store)
    await store.redis.delete(store.keys.schedules)
    await store.redis.set(store.keys.schedules, "oops")
    before = await store.redis.hgetall(store.keys.schedule("a"))
    for call in (
        store.remove("a"),
        store.pause("a", None),
        store.resume("a", 1, None),
        store.trigger("a", "default"),
        store.save(Schedule(id="a", task="t", every=60)),
    ):
        with pytest.raises(StateError):
            await call
    assert await store.redis.hgetall(store.keys.schedule("a")) == before
    assert await jobs(store) == []


@pytest.mark.cluster
async def test_catch_up_chain_in_one_batch_fires_each_occurrence(store: ScheduleStore) -> None:
    # Several occurrences of one schedule in one call: each must see the index as the one
    # before it left it (the script reads the index once a batch and writes it at the end).
    await add(store, overlap="allow")
    lease = await lease_of(store)
    first = await due_item(store, "a", late_ms=3 * HOUR_MS)
    chain = [
        first._replace(expect=first.sched + i * 60_000, sched=first.sched + i * 60_000,
                next=first.sched + (i + 1) * 60_000, action="fire")
        for i in range(3)
    ]  # fmt: skip
    assert await fire(store, lease, *chain) == [Code.FIRED, Code.FIRED, Code.FIRED]
    assert [j["scheduled_at"] for j in await jobs(store)] == [str(i.sched) for i in chain]
    assert await store.redis.zscore(store.keys.schedules, "a") == chain[-1].next
    # Re-sent: every occurrence has fired already.
    assert await fire(store, lease, *chain) == [Code.STALE, Code.STALE, Code.STALE]


async def test_run_marker_lives_in_the_schedule_hash(store: ScheduleStore) -> None:
    await add(store)  # overlap=skip
    lease = await lease_of(store)
    item = await due_item(store, "a")
    assert await fire(store, lease, item) == [Code.FIRED]
    fields = await store.redis.hgetall(store.keys.schedule("a"))
    assert fields["run"] == f"a@{item.sched}"
    assert "run_state" not in fields  # queued: no worker has started it
    now = await store.time_ms()
    # Timeout 3600 s + backoff cap 3600 s, for each of the 4 attempts, plus a minute.
    assert int(fields["run_until"]) - now == pytest.approx(4 * 7_200_000 + 60_000, abs=5_000)
    # While it is marked, the next occurrence is skipped.
    assert await fire(store, lease, await due_item(store, "a")) == [Code.SKIPPED]
    # An update keeps the marker: the run of the old spec still counts.
    await store.save(Schedule(id="a", task="t2", every=60))
    assert (await store.redis.hget(store.keys.schedule("a"), "run")) == f"a@{item.sched}"
    assert await fire(store, lease, await due_item(store, "a")) == [Code.SKIPPED]


async def test_expired_run_marker_no_longer_blocks(store: ScheduleStore) -> None:
    await add(store)
    lease = await lease_of(store)
    key = store.keys.schedule("a")
    await store.redis.hset(
        key, mapping={"run": "a@1", "run_state": "running", "run_until": "1", "run_worker": "w"}
    )
    item = await due_item(store, "a")
    assert await fire(store, lease, item) == [Code.FIRED]
    fields = await store.redis.hgetall(key)
    assert fields["run"] == f"a@{item.sched}"
    # Nothing of the lost run survives into this one.
    assert "run_worker" not in fields
    assert "run_state" not in fields


async def test_recreated_schedule_starts_without_a_marker(store: ScheduleStore) -> None:
    await add(store)
    lease = await lease_of(store)
    assert await fire(store, lease, await due_item(store, "a")) == [Code.FIRED]
    await store.remove("a")
    await add(store)
    assert not await store.redis.hexists(store.keys.schedule("a"), "run")
    assert await fire(store, lease, await due_item(store, "a")) == [Code.FIRED]


async def test_replay_results_live_in_one_hash_per_minute(store: ScheduleStore) -> None:
    await add(store, "a")
    await add(store, "b")
    ops = [key async for key in store.redis.scan_iter(match=store.keys.ops("*"))]
    assert 1 <= len(ops) <= 2  # two writes, one key (two across a minute boundary)
    assert sum([await store.redis.hlen(key) for key in ops]) == 2
    ttl = await store.redis.pttl(ops[-1])
    assert 0 < ttl <= 300_000
