"""QueueStore: enqueue validation, dead letters (list, inspect, requeue, purge), statistics."""

from __future__ import annotations

import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.job import Lane
from rsched._core.keys import GROUP, Keys
from rsched._core.settings import Settings
from rsched._store.queues import QueueStore
from tests.support.worker_app import any_


@pytest.fixture
def store(redis: Redis, settings: Settings) -> QueueStore:
    return QueueStore(redis, Keys(settings.prefix), max_payload_bytes=1000)


async def make_dead(store: QueueStore, tasks: list[str], queue: str = "default") -> list[str]:
    """Enqueue one job per task and dead-letter each (as a worker would); returns their ids."""
    await store.create_groups([queue])
    for task in tasks:
        await store.enqueue(task, {"task": task}, queue=queue)
    read = await store.read([(queue, "normal")], "c1", len(tasks), 100)
    ids = []
    for _, entries in read:
        for entry_id, fields in entries:
            dead_id = await store.dead(
                queue, entry_id, raw=fields, reason="max_retries", error_type="E",
                error_message="m", traceback="tb",
            )  # fmt: skip
            assert dead_id is not None
            ids.append(dead_id)
    return ids


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": "bad task"}, "task"),
        ({"task": "t", "queue": "a*b"}, "queue"),
        ({"task": "t", "payload": {"x": "y" * 2000}}, "payload: .* over the 1000-byte limit"),
        ({"task": "t", "payload": {"x": object()}}, "payload: not JSON"),
        ({"task": "t", "delay_s": -1}, "delay_s"),
        ({"task": "t", "max_retries": -1}, "max_retries"),
        ({"task": "t", "timeout_s": 0}, "timeout_s"),
        ({"task": "t", "execution_id": "a b"}, "execution_id"),
    ],
)
async def test_enqueue_validates(
    store: QueueStore, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(rsched.InvalidJob, match=message):
        await store.enqueue(**kwargs)  # type: ignore[arg-type]


@pytest.mark.cluster
async def test_enqueue_writes_a_job_entry(store: QueueStore, redis: Redis) -> None:
    exec_id = await store.enqueue(
        "t", {"a": 1}, queue="q1", max_retries=0, timeout_s=5, execution_id="my-id"
    )
    assert exec_id == rsched.Enqueued("my-id", created=True)
    [(_, fields)] = await any_(redis).xrange(store.keys.queue("q1"))
    assert fields["task"] == "t"
    assert fields["payload"] == '{"a":1}'
    assert fields["attempt"] == "1"
    assert fields["opts"] == '{"max_retries":0,"timeout_s":5.0}'
    assert int(fields["scheduled_at"]) == int(fields["fired_at"])
    assert "q1" in await store.queue_names()


@pytest.mark.cluster
async def test_delayed_jobs_are_promoted_when_due(store: QueueStore, redis: Redis) -> None:
    await store.enqueue("t", delay_s=0.2)
    assert await redis.xlen(store.keys.queue("default")) == 0
    moved, wait_ms = await store.promote(["default"])
    assert moved == 0
    assert wait_ms is not None
    assert 0 < wait_ms <= 200
    # A member someone else wrote still moves (as a malformed entry), never blocks the set.
    await redis.zadd(store.keys.delayed_queue("default"), {"not json": 0})
    moved, _ = await store.promote(["default"])
    assert moved == 1
    entries = await any_(redis).xrange(store.keys.queue("default"))
    assert entries[-1][1] == {"malformed": "not json"}


@pytest.mark.cluster
async def test_one_promote_call_covers_every_queue_and_level(
    store: QueueStore, redis: Redis
) -> None:
    k = store.keys
    await redis.zadd(k.delayed_queue("a"), {orjson.dumps(["execution_id", "a1"]).decode(): 0})
    high = orjson.dumps(["execution_id", "b1", "priority", "high"]).decode()
    await redis.zadd(k.delayed_queue("b"), {high: 0})
    await store.enqueue("t", queue="c", delay_s=60)
    moved, wait_ms = await store.promote(["a", "b", "c"], limit=1)  # the limit spans queues
    assert moved == 1
    moved, wait_ms = await store.promote(["a", "b", "c"])
    assert moved == 1
    assert await redis.xlen(k.queue("a")) == 1
    assert await redis.xlen(k.queue("b", "high")) == 1  # a retry keeps its level
    assert wait_ms is not None
    assert 50_000 < wait_ms <= 60_000
    assert await store.promote([]) == (0, None)
    # A key of the wrong type in one queue: nothing moves in any.
    await redis.zadd(k.delayed_queue("a"), {orjson.dumps(["execution_id", "a2"]).decode(): 0})
    await redis.zadd(k.delayed_queue("b"), {orjson.dumps(["execution_id", "b2"]).decode(): 0})
    await redis.set(k.queue("b", "low"), "x")
    with pytest.raises(rsched.StateError, match="queue 'a,b'"):
        await store.promote(["a", "b"])
    assert await redis.zcard(k.delayed_queue("a")) == 1
    await redis.set(k.delayed_queue("c"), "x")
    with pytest.raises(rsched.StateError):
        await store.promote(["c"])


@pytest.mark.cluster
async def test_dead_letter_pages_filters_and_lookup(store: QueueStore) -> None:
    ids = await make_dead(store, ["a", "b", "a", "c", "a"])
    page, cursor = await store.dead_letters(limit=2)
    assert [d.entry_id for d in page] == ids[::-1][:2]  # newest first
    assert cursor is not None
    page2, cursor2 = await store.dead_letters(limit=2, cursor=cursor)
    assert [d.entry_id for d in page2] == ids[::-1][2:4]
    page3, cursor3 = await store.dead_letters(limit=2, cursor=cursor2)
    assert [d.entry_id for d in page3] == ids[:1]
    assert cursor3 is None
    only_a, _ = await store.dead_letters(task="a")
    assert [d.entry_id for d in only_a] == [ids[4], ids[2], ids[0]]
    letter = await store.dead_letter("default", ids[1])
    assert letter.task == "b"
    assert letter.payload == {"task": "b"}
    assert letter.traceback == "tb"
    assert letter.job_fields["task"] == "b"
    with pytest.raises(rsched.DeadLetterNotFound):
        await store.dead_letter("default", "1-1")
    with pytest.raises(rsched.InvalidArgument):
        await store.dead_letters(limit=0)


@pytest.mark.cluster
async def test_requeue_by_ids_and_by_filter(store: QueueStore, redis: Redis) -> None:
    ids = await make_dead(store, ["a", "b", "a", "c"])
    stream = store.keys.queue("default")
    assert await store.requeue("default", [ids[1], "1-1"]) == 1
    assert await store.requeue("default", task="a") == 2
    assert await store.requeue("default", [ids[3]], task="a") == 0  # filter applies to ids
    remaining, _ = await store.dead_letters()
    assert [d.task for d in remaining] == ["c"]
    entries = await any_(redis).xrange(stream)
    assert sorted(f["task"] for _, f in entries) == ["a", "a", "b"]
    assert all(f["attempt"] == "1" for _, f in entries)
    assert await store.requeue("default") == 1
    assert (await store.dead_letters())[0] == []


@pytest.mark.cluster
async def test_purge_by_ids_filter_and_all(store: QueueStore) -> None:
    ids = await make_dead(store, ["a", "b", "a", "c", "d"])
    assert await store.purge("default", [ids[0]]) == 1
    assert await store.purge("default", [ids[0]]) == 0
    assert await store.purge("default", task="a") == 1
    assert await store.purge("default", [ids[1]], task="zzz") == 0
    assert await store.purge("default") == 3
    assert (await store.dead_letters())[0] == []


@pytest.mark.cluster
async def test_queue_stats(store: QueueStore, redis: Redis) -> None:
    await store.create_groups(["q"])
    for _ in range(3):
        await store.enqueue("t", queue="q")
    await store.enqueue("t", queue="q", delay_s=60)
    await store.read([("q", "normal")], "c1", 2, 100)
    await make_dead(store, ["x"], queue="dq")
    stats = await store.queue_stats()
    q = stats["q"]
    assert q["length"] == 3
    assert q["pending"] == 2
    assert q["consumers"] == 1
    assert q["delayed"] == 1
    assert q["dead"] == 0
    assert q["oldest_pending_ms"] is not None
    assert 0 <= q["oldest_pending_ms"] < 60_000
    assert stats["dq"]["dead"] == 1
    assert stats["dq"]["pending"] == 0
    assert stats["dq"]["oldest_pending_ms"] is None
    pending = await redis.xpending(store.keys.queue("q"), GROUP)
    assert pending["pending"] == 2


async def test_scripts_are_safe_to_run_twice(store: QueueStore, redis: Redis) -> None:
    await store.create_groups(["default"])
    await store.enqueue("t")
    [(_, [(entry_id, fields)])] = await store.read([("default", "normal")], "c1", 1, 100)
    from rsched._store.worker_calls import Done

    done = Done(entry_id, fields["execution_id"], None, 1, "completed")
    assert await store.complete("default", [done]) == 1
    assert await store.complete("default", [done]) == 0
    assert await redis.xlen(store.keys.queue("default")) == 0
    assert await store.dead("default", entry_id, raw=fields, reason="x") is None
    retried = await store.retry(
        "default", entry_id, next_fields=["task", "t"], delay_ms=0, execution_id="e",
        schedule_id=None, attempt=1, event="failed", extra="",
    )  # fmt: skip
    assert retried is None
    assert await redis.xlen(store.keys.queue("default")) == 0


async def test_enqueue_re_sent_after_a_lost_reply_writes_once(
    store: QueueStore, redis: Redis
) -> None:
    keys = [store.keys.queue("q"), store.keys.delayed_queue("q"), store.keys.queues]
    op, op_id = store.keys.new_op()
    args = ["q", 0, op_id, "execution_id", "e1", "task", "t", "payload", "{}", "attempt", "1"]
    first = await store.call("enqueue", [*keys, op], args)
    again = await store.call("enqueue", [*keys, op], args)
    assert first == again
    assert await redis.xlen(store.keys.queue("q")) == 1


async def test_heartbeat_reports_entries_this_consumer_no_longer_holds(
    store: QueueStore, redis: Redis
) -> None:
    await store.create_groups(["default"])
    await store.enqueue("t")
    await store.enqueue("t")
    [(_, entries)] = await store.read([("default", "normal")], "c1", 2, 100)
    mine, taken = entries[0][0], entries[1][0]
    await any_(redis).xclaim(store.keys.queue("default"), GROUP, "c2", 0, [taken])
    assert await store.heartbeat("default", "c1", [mine, taken, "1-1"]) == [taken, "1-1"]
    [(_, claimed)] = await store.reclaim([(("default", "normal"), "0-0")], "c3", 60_000, 10)
    assert claimed == []  # both were just refreshed or claimed: nothing is idle


async def test_heartbeat_and_hand_back_reach_every_entry(store: QueueStore, redis: Redis) -> None:
    await store.create_groups(["default"])
    for _ in range(3):
        await store.enqueue("t")
    [(_, entries)] = await store.read([("default", "normal")], "c1", 3, 100)
    ids = [entry_id for entry_id, _ in entries]
    stream = store.keys.queue("default")

    async def idle_ms() -> list[int]:
        pending = await redis.xpending_range(stream, GROUP, "-", "+", 10)
        return [int(p["time_since_delivered"]) for p in pending]

    await any_(redis).xclaim(stream, GROUP, "c1", 0, ids, idle=120_000, justid=True)
    assert await store.heartbeat("default", "c1", ids) == []
    assert all(ms < 60_000 for ms in await idle_ms())  # every one refreshed, not the first only
    year_ms = 365 * 86_400_000
    assert await store.hand_back("default", "c1", ids, 10 * year_ms) == 3
    assert all(ms > year_ms for ms in await idle_ms())
    [(_, claimed)] = await store.reclaim([(("default", "normal"), "0-0")], "c2", 60_000, 10)
    assert [entry_id for entry_id, _, _ in claimed] == ids


@pytest.mark.cluster
async def test_reclaim_takes_over_several_streams_within_one_count(
    store: QueueStore, redis: Redis
) -> None:
    await store.create_groups(["a", "b"])
    for queue in ("a", "b"):
        for _ in range(2):
            await store.enqueue("t", queue=queue)
        await store.read([(queue, "normal")], "gone", 10, 100)  # a worker that died
    await redis.set(store.keys.queue("c"), "x")
    a: Lane = ("a", "normal")
    b: Lane = ("b", "normal")
    c: Lane = ("c", "normal")  # not a stream: nothing to reclaim
    d: Lane = ("d", "high")  # no stream, no group: nothing either
    late: Lane = ("b", "high")  # past the count: keeps its start id
    got = await store.reclaim([(c, "0-0"), (d, "0-0"), (a, "0-0"), (b, "0-0"), (late, "7-7")],
                              "me", 0, 3)  # fmt: skip
    assert [len(claimed) for _, claimed in got] == [0, 0, 2, 1, 0]
    assert [cursor for cursor, _ in got][:2] == ["0-0", "0-0"]
    assert got[4][0] == "7-7"
    assert {deliveries for _, claimed in got for _, _, deliveries in claimed} == {2}
    [(_, rest)] = await store.reclaim([(b, got[3][0])], "me", 0, 10)  # from b's cursor on
    assert len(rest) == 1
    assert rest[0][0] != got[3][1][0][0]


@pytest.mark.cluster
async def test_take_reads_across_queues_up_to_count_and_refuses_wrong_types(
    store: QueueStore, redis: Redis
) -> None:
    await store.create_groups(["a", "b"])
    for queue in ("a", "b"):
        for _ in range(3):
            await store.enqueue("t", queue=queue)
    a: Lane = ("a", "normal")
    b: Lane = ("b", "normal")
    x: Lane = ("x", "normal")
    got = await store.take([b, a], "c1", 4)
    assert [(lane, len(entries)) for lane, entries in got] == [(b, 3), (a, 1)]
    assert got[0][1][0][1]["task"] == "t"
    assert await store.take([a, b], "c1", 10) != []
    assert await store.take([a, b], "c1", 10) == []
    await redis.set(store.keys.queue("x"), "not a stream")
    with pytest.raises(rsched.StateError):
        await store.take([a, x], "c1", 10)


async def test_forget_consumers_keeps_busy_and_recent_ones(store: QueueStore) -> None:
    await store.create_groups(["default"])
    await store.enqueue("t")
    await store.read([("default", "normal")], "busy", 1, 100)  # holds a pending entry
    await any_(store.redis).xgroup_createconsumer(store.keys.queue("default"), GROUP, "idle")
    assert await store.forget_consumers(["default"], keep="me", idle_ms=60_000) == 0
    assert await store.forget_consumers(["default"], keep="me", idle_ms=-1) == 1
    names = {
        c["name"]
        for c in await any_(store.redis).xinfo_consumers(store.keys.queue("default"), GROUP)
    }
    assert names == {"busy"}


async def test_expire_records_a_job_past_its_deadline_once_and_leaves_the_others(
    store: QueueStore, redis: Redis
) -> None:
    from rsched._core.codes import Code
    from rsched._store.worker_calls import Expiring

    await store.create_groups(["default"])
    for _ in range(2):
        await store.enqueue("t")
    [(_, entries)] = await store.read([("default", "normal")], "c1", 2, 100)
    now = await store.time_ms()
    late, soon = (
        Expiring(eid, f["execution_id"], None, 1, by, '["x",null,"t","default","expired"]')
        for (eid, f), by in zip(entries, (now - 1, now + 60_000), strict=True)
    )
    at, codes = await store.expire("default", [late, soon])
    assert (codes, at >= now) == ([Code.EXPIRED, Code.OK], True)
    # Re-sent after a lost reply: nothing recorded twice, and still not to be run.
    assert (await store.expire("default", [late, soon]))[1] == [Code.NOT_PENDING, Code.OK]
    assert await redis.xlen(store.keys.runs) == 1
    assert await redis.xlen(store.keys.queue("default")) == 1  # the one within its deadline
    assert int((await redis.xpending(store.keys.queue("default"), GROUP))["pending"]) == 1


async def test_expire_refuses_malformed_items_writing_nothing(
    store: QueueStore, redis: Redis
) -> None:
    await store.create_groups(["default"])
    await store.enqueue("t")
    keys = [store.keys.queue("default"), store.keys.runs]
    for items in ("nope", '[["1-0","e","",1,"soon"]]'):
        assert await store.call("expire", keys, [GROUP, 10, 10, items]) == -7  # BAD_ARGS
    assert await redis.xlen(store.keys.queue("default")) == 1
