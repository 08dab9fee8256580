"""add_many / upsert_many and upsert_many.lua against real servers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from rsched import (
    BulkResult,
    Client,
    InvalidArgument,
    InvalidSchedule,
    InvalidSchedules,
    Schedule,
    Settings,
    StateError,
    SyncClient,
)
from rsched._core.bulk import Validator
from rsched._core.keys import Keys
from rsched._store.schedules import ScheduleStore, _chunks
from tests.support.placement import indexed_ids


@pytest.fixture
async def client(redis: Redis, settings: Settings) -> Client:
    return Client(redis, settings)


def spec(i: int, **over: Any) -> dict[str, Any]:
    return {"id": f"s-{i}", "task": "reports.run", "every": 3600, "payload": {"n": i}, **over}


def hash_key(prefix: str, sid: str) -> str:
    return f"{{{prefix}}}:schedule:{sid}"


async def test_add_many_stores_what_add_stores(client: Client, redis: Redis, prefix: str) -> None:
    cron = {"task": "reports.run", "cron": "0 2 * * *", "timezone": "Europe/Rome"}
    single = await client.add(Schedule(id="one", payload={"n": 1}, max_runs=3, **cron))
    result = await client.add_many(
        [Schedule(id=f"b-{i}", payload={"n": 1}, max_runs=3, **cron) for i in range(3)]
        + [spec(9, queue="other", paused=True, pause_note="later")]
    )
    assert result == BulkResult({"b-0": "created", "b-1": "created", "b-2": "created",
                                 "s-9": "created"})  # fmt: skip
    assert result.count("created") == 4
    assert result.ids("replaced") == []
    many = await client.get("b-1")
    assert many.next_run == single.next_run
    assert many.generation == 1
    one_hash = await redis.hgetall(hash_key(prefix, "one"))
    bulk_hash = await redis.hgetall(hash_key(prefix, "b-1"))
    assert one_hash.keys() == bulk_hash.keys()
    assert {k: v for k, v in bulk_hash.items() if k != "version"} == {
        k: v for k, v in one_hash.items() if k != "version"
    }
    paused = await client.get("s-9")
    assert paused.paused
    assert paused.pause_note == "later"
    assert paused.queue == "other"
    assert await redis.sismember(f"{{{prefix}}}:queues", "other")


async def test_add_many_lists_every_problem_and_writes_nothing(
    client: Client, redis: Redis, prefix: str
) -> None:
    await client.add(spec(0))
    entries: list[Any] = [
        spec(0),  # exists
        spec(1),
        spec(2, cron="0 0 30 2 *", every=None),  # never fires
        spec(1),  # repeats [1]
        spec(4, id="bad id"),  # same shape as [1]: its id is still checked
        {"id": "s-5", "task": "t", "every": 60, "colour": "red", "timezone": "Mars/Base"},
        spec(6, at=datetime(2001, 1, 1, tzinfo=UTC), every=None),  # in the past
        spec(7, payload={"x": "y" * 100}),
    ]
    with pytest.raises(InvalidSchedules) as info:
        await Client(redis, Settings(redis_url=client.settings.url, prefix=prefix,
                                     max_payload_bytes=64)).add_many(entries)  # fmt: skip
    exc = info.value
    assert isinstance(exc, InvalidSchedule)
    by_index = {(i, f) for i, _, f, _ in exc.problems}
    assert by_index >= {(0, "id"), (2, "cron"), (3, "id"), (4, "id"), (5, "colour"),
                        (5, "timezone"), (6, "at"), (7, "payload")}  # fmt: skip
    assert not any(i == 1 for i, *_ in exc.problems)
    text = str(exc)
    assert "7 of 8 schedule(s) invalid, nothing written" in text
    assert "[2] s-2: cron: " in text
    assert "[3] s-1: id: repeats entry [1]" in text
    assert "[0] s-0: id: already exists" in text
    assert ("[4] bad id: id", exc.errors[[p[0] for p in exc.problems].index(4)][1]) in exc.errors
    assert await indexed_ids(redis, Keys(prefix)) == {"s-0"}  # only s-0, from before


async def test_a_long_list_of_problems_is_shortened_in_the_message(client: Client) -> None:
    with pytest.raises(InvalidSchedules) as info:
        await client.add_many([spec(i, id=f"bad {i}") for i in range(80)])
    assert len(info.value.problems) == 80
    assert str(info.value).count("\n") == 51
    assert str(info.value).endswith("... and 30 more (see .problems)")


async def test_upsert_many_reports_created_replaced_unchanged(
    client: Client, redis: Redis, prefix: str
) -> None:
    first = await client.upsert_many([spec(i) for i in range(3)])
    assert first.count("created") == 3
    before = await client.get("s-0")
    await client.pause("s-2", note="ops")
    again = await client.upsert_many([spec(0), spec(1, every=60), spec(2), spec(3)])
    assert again.outcomes == {
        "s-0": "unchanged", "s-1": "replaced", "s-2": "replaced", "s-3": "created"
    }  # fmt: skip
    after = await client.get("s-0")
    assert after.generation == before.generation == 1
    assert after.next_run == before.next_run
    assert (await client.get("s-1")).generation == 2
    assert not (await client.get("s-2")).paused  # the given spec is not paused: replaced
    # The same list again writes nothing at all.
    calls = await redis.info("commandstats")
    assert (await client.upsert_many([spec(0), spec(1, every=60), spec(2), spec(3)])).count(
        "unchanged"
    ) == 4
    calls2 = await redis.info("commandstats")
    assert calls2.get("cmdstat_hset") == calls.get("cmdstat_hset")


async def test_upsert_many_keeps_the_every_grid_of_a_replaced_schedule(client: Client) -> None:
    await client.add(spec(0, every=3600))
    old = await client.get("s-0")
    await client.upsert_many([spec(0, every=3600, description="changed")])
    new = await client.get("s-0")
    assert new.generation == 2
    assert new.next_run == old.next_run


async def test_add_many_race_with_another_writer_is_reported(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    store: ScheduleStore = (await client._partitions()).schedules[0]
    real = store.time_ms

    async def late_writer() -> int:  # after the check, before the write
        await Client(client._redis, client.settings).add(spec(1, task="other.task"))
        return await real()

    monkeypatch.setattr(store, "time_ms", late_writer)
    result = await client.add_many([spec(0), spec(1), spec(2)])
    assert result.outcomes == {"s-0": "created", "s-1": "exists", "s-2": "created"}
    assert (await client.get("s-1")).task == "other.task"


async def test_bulk_input_errors(client: Client) -> None:
    with pytest.raises(InvalidArgument, match="schedules"):
        await client.add_many(Schedule(**spec(0)))  # type: ignore[arg-type]
    assert await client.add_many([]) == BulkResult({})
    with pytest.raises(InvalidSchedules, match=r"\[0\]: give an rsched.Schedule or a dict"):
        await client.add_many([42])  # type: ignore[list-item]
    with pytest.raises(InvalidSchedules, match=r"\[1\] 7: id: 7 is not a valid schedule id"):
        await client.add_many([spec(0), spec(1, id=7)])
    with pytest.raises(InvalidSchedules, match=r"\[1\]: id: required"):
        await client.add_many([spec(0), {k: v for k, v in spec(1).items() if k != "id"}])


async def test_many_schedules_in_several_script_calls(
    client: Client, redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rsched._store.schedules.BULK_WRITE", 7)
    monkeypatch.setattr("rsched._store.schedules.BULK_READ", 11)
    async with redis.pubsub() as pubsub:
        await pubsub.subscribe(f"{{{prefix}}}:wake")
        assert await pubsub.get_message(timeout=2)  # the subscription is confirmed
        result = await client.add_many([spec(i, every=60 + i) for i in range(50)])
        assert result.count("created") == 50
        wakes = []
        while msg := await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2):
            wakes.append(msg)
    # Once per script call at most, and only when it brings the head forward: the calls run a
    # few at once, so which of them does depends on their order.
    assert 1 <= len(wakes) <= 3
    assert len(await indexed_ids(redis, Keys(prefix))) == 50
    now = datetime.now(UTC)
    s = await client.get("s-49")
    assert s.next_run is not None
    assert timedelta(seconds=100) < s.next_run - now < timedelta(seconds=112)


async def test_upsert_many_script_replays_and_refuses_bad_input(redis: Redis, prefix: str) -> None:
    store = ScheduleStore(redis, Keys(prefix))
    k = store.keys
    audit = store.audit_arg()
    keys = [k.schedules, k.queues, k.ops(1), k.parked, k.audit, k.schedule("a"), k.pending("a")]
    keys += (k.parked_of("a"), k.specs("a"))
    item = ["a", "add", "", "4000000000000", "0", "default", "", "0", "0", "2", "task", "t.x"]
    args = [k.wake, "op-1", "1000", "", audit, *item]
    assert await store.call("upsert_many", keys, args) == "5:1:1"
    assert await store.call("upsert_many", keys, args) == "5:1:1"  # replayed, not re-run
    assert await store.call("upsert_many", keys, [k.wake, "op-2", "1000", "", audit, *item]) == "-9"
    # The same id twice in one call: the second is a replace of the first.
    twice = [*keys[:5], *[k.schedule("d"), k.pending("d"), k.parked_of("d"), k.specs("d")] * 2]
    d = ["d", "upsert", "", "4000000000000", "0", "default", "", "0", "0", "2", "task", "t.x"]
    reply = await store.call("upsert_many", twice, [k.wake, "op-5", "1000", "", audit, *d, *d])
    assert reply == "5:1:1,5:2:0"
    # Malformed: the second item's field count runs past the arguments. Nothing written.
    bad = [*keys[:5], k.schedule("b"), k.pending("b"), k.parked_of("b"), k.specs("b")]
    bad += (k.schedule("c"), k.pending("c"), k.parked_of("c"), k.specs("c"))
    b = ["b", "upsert", "", "4000000000000", "0", "default", "", "0", "0", "0"]
    c = ["c", "upsert", "", "4000000000000", "0", "default", "", "0", "0", "4", "task", "t.x"]
    assert await store.call("upsert_many", bad, [k.wake, "op-3", "1000", "", audit, *b, *c]) == "-7"
    assert not await redis.exists(k.schedule("b"))
    # One item's key of the wrong type: that item only.
    await redis.set(k.schedule("c"), "x")
    c[-1:] = ["t.x"]
    c[9] = "2"
    reply = await store.call("upsert_many", bad, [k.wake, "op-4", "1000", "", audit, *b, *c])
    assert reply == "5:1:1,-6"
    # A malformed audit argument: nothing written.
    refused = [k.wake, "op-6", "1000", "", "{}", *item]
    assert await store.call("upsert_many", keys, refused) == "-7"
    with pytest.raises(StateError):
        await Client(redis, Settings(prefix=prefix)).add_many([{"id": "c", "task": "t.x",
                                                               "every": 5}])  # fmt: skip


async def test_large_payloads_go_in_smaller_calls(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rsched._store.schedules.BULK_WRITE_BYTES", 3_000)
    monkeypatch.setattr("rsched._store.schedules.BULK_WRITE", 4)
    big = {"blob": "x" * 1_000}  # 1,011 bytes encoded: two fit under 3,000
    items, problems = Validator(65_536).validate(
        [spec(i, payload=big) for i in range(5)] + [spec(i) for i in range(5, 14)], mode="add"
    )
    assert not problems
    sizes = [len(chunk) for chunk in _chunks([(item, 0) for item in items])]
    assert sizes == [2, 2, 4, 4, 2]
    result = await client.add_many([spec(i, payload=big) for i in range(10)])
    assert result.count("created") == 10
    assert (await client.get("s-9")).payload == big


def test_sync_client_has_the_bulk_methods(redis_url: str, prefix: str) -> None:
    with SyncClient(redis_url, prefix) as c:
        assert c.add_many([spec(0), spec(1)]).count("created") == 2
        assert c.upsert_many([spec(0), spec(1, every=5)]).outcomes == {
            "s-0": "unchanged",
            "s-1": "replaced",
        }
