"""The async SDK end to end against real servers: each method and each error path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched import (
    Client,
    InvalidArgument,
    InvalidSchedule,
    RedisUnavailable,
    Schedule,
    ScheduleCompleted,
    ScheduleExists,
    ScheduleNotFound,
    Settings,
)
from rsched._core.keys import Keys
from tests.support.keys import written_keys
from tests.support.placement import move_to


@pytest.fixture
async def client(redis: Redis, settings: Settings) -> Client:
    return Client(redis, settings)


async def jobs(redis: Redis, prefix: str, queue: str = "default") -> list[dict[str, str]]:
    """The fields of each entry of a queue stream, oldest first."""
    entries: Any = await redis.xrange(f"{{{prefix}}}:queue:{queue}")
    return [dict(fields) for _, fields in entries]


def nightly(**over: Any) -> Schedule:
    spec: dict[str, Any] = {
        "id": "nightly",
        "task": "reports.nightly",
        "cron": "0 2 * * *",
        "timezone": "Europe/Rome",
        "payload": {"kind": "sales"},
        "max_runs": 365,
    }
    return Schedule(**{**spec, **over})


async def test_add_get_and_duplicate(client: Client) -> None:
    stored = await client.add(nightly())
    assert stored.generation == 1
    assert stored.next_run is not None
    assert stored.next_run > datetime.now(UTC)
    got = await client.get("nightly")
    assert got.payload == {"kind": "sales"}
    assert got.timezone == "Europe/Rome"
    with pytest.raises(ScheduleExists, match="'nightly' already exists; use upsert"):
        await client.add(nightly())


async def test_add_accepts_a_dict(client: Client) -> None:
    stored = await client.add({"id": "d", "task": "t", "every": 60})
    assert stored.every == 60


async def test_invalid_fields_name_each_field(client: Client, redis: Redis, prefix: str) -> None:
    with pytest.raises(InvalidSchedule) as err:
        await client.add({"id": "bad id", "task": "t", "cron": "0 0 30 2 *", "timezone": "PST"})
    fields = {f for f, _ in err.value.errors}
    assert {"id", "timezone"} <= fields
    assert "timezone" in str(err.value)
    assert await written_keys(redis, prefix) == []


async def test_at_in_the_past_is_rejected_and_nothing_written(
    client: Client, redis: Redis, prefix: str
) -> None:
    past = datetime.now(UTC) - timedelta(hours=1)
    with pytest.raises(InvalidSchedule, match=r"at: .* is in the past"):
        await client.add(Schedule(id="once", task="t", at=past))
    assert await written_keys(redis, prefix) == []


async def test_payload_over_the_limit(redis: Redis, redis_url: str, prefix: str) -> None:
    small = Client(redis, Settings(redis_url=redis_url, prefix=prefix, max_payload_bytes=100))
    with pytest.raises(
        InvalidSchedule, match=r"payload: payload is .* bytes encoded, over the 100"
    ):
        await small.add(Schedule(id="big", task="t", every=5, payload={"x": "y" * 200}))
    with pytest.raises(InvalidSchedule, match="payload"):
        await small.add({"id": "p", "task": "t", "every": 5, "payload": "[1, 2]"})


async def test_upsert_replaces_and_bumps_generation(client: Client) -> None:
    first = await client.upsert(nightly())
    second = await client.upsert(nightly(cron="0 3 * * *"))
    assert (first.generation, second.generation) == (1, 2)
    assert second.cron == "0 3 * * *"
    assert second.created_at == first.created_at


async def test_update_merges_and_revalidates(client: Client) -> None:
    await client.add(nightly())
    updated = await client.update("nightly", every=3600)
    assert updated.every == 3600
    assert updated.cron is None
    assert updated.payload == {"kind": "sales"}
    assert updated.generation == 2
    with pytest.raises(InvalidSchedule, match="overlap"):
        await client.update("nightly", overlap="sometimes")
    with pytest.raises(InvalidSchedule, match="runs: is read-only"):
        await client.update("nightly", runs=3)
    with pytest.raises(ScheduleNotFound, match="schedule 'nope' does not exist"):
        await client.update("nope", every=5)
    assert (await client.get("nightly")).generation == 2
    same = await client.update("nightly", every="1h", payload={"kind": "sales"}, paused=False)
    assert same == updated  # the fields already held: nothing written, the next run kept


async def test_remove(client: Client, redis: Redis, prefix: str) -> None:
    await client.add(nightly())
    await client.remove("nightly")
    with pytest.raises(ScheduleNotFound):
        await client.get("nightly")
    with pytest.raises(ScheduleNotFound):
        await client.remove("nightly")
    assert await redis.zcard(f"{{{prefix}}}:schedules") == 0


async def test_pause_resume(client: Client) -> None:
    await client.add(nightly())
    await client.pause("nightly", note="maintenance")
    paused = await client.get("nightly")
    assert paused.paused
    assert paused.pause_note == "maintenance"
    assert (await client.list(paused=True)).items[0].id == "nightly"
    await client.resume("nightly")
    resumed = await client.get("nightly")
    assert not resumed.paused
    assert resumed.next_run is not None
    with pytest.raises(ScheduleNotFound):
        await client.pause("ghost")
    with pytest.raises(ScheduleNotFound):
        await client.resume("ghost")


async def test_trigger_and_history(client: Client, redis: Redis, prefix: str) -> None:
    await client.add(nightly(overlap="allow"))
    fired = await client.trigger("nightly")
    assert fired.status == "fired"
    assert fired.execution_id.startswith("nightly@")
    entries = await jobs(redis, prefix)
    assert len(entries) == 1
    assert entries[0]["origin"] == "manual"
    history = await client.history("nightly")
    assert isinstance(history, rsched.Page)
    assert history.items[0].event == "fired"
    assert history.items[0].origin == "manual"
    assert history.items[0].execution_id == fired.execution_id
    assert list(await client.history("nightly", status="skipped")) == []
    with pytest.raises(ScheduleNotFound):
        await client.trigger("ghost")
    with pytest.raises(ScheduleNotFound):
        await client.history("ghost")


async def test_completed_schedule_cannot_trigger_or_pause(client: Client) -> None:
    await client.add(Schedule(id="one", task="t", every=60, max_runs=1, overlap="allow"))
    await client.trigger("one")
    assert (await client.get("one")).completed
    completed = r"schedule 'one' has completed \(max_runs reached: 1 of 1\); nothing to "
    with pytest.raises(ScheduleCompleted, match=completed + "trigger"):
        await client.trigger("one")
    with pytest.raises(ScheduleCompleted, match=completed + "pause"):
        await client.pause("one")
    with pytest.raises(ScheduleCompleted, match=completed + "resume"):
        await client.resume("one")


async def test_next_runs(client: Client) -> None:
    await client.add(Schedule(id="hourly", task="t", cron="0 * * * *", timezone="Asia/Tokyo"))
    runs = await client.next_runs("hourly", 3)
    assert len(runs) == 3
    assert all(r.minute == 0 and str(r.tzinfo) == "Asia/Tokyo" for r in runs)
    assert runs[1] - runs[0] == timedelta(hours=1)
    with pytest.raises(InvalidArgument, match="n: give 1-10000"):
        await client.next_runs("hourly", 0)


async def test_list_filters_and_cursor(client: Client) -> None:
    for i in range(30):
        queue = "reports" if i % 3 == 0 else "default"
        await client.add(Schedule(id=f"s{i:02d}", task=f"t{i % 2}", every=60 + i, queue=queue))
    await client.pause("s05")
    page = await client.list(limit=7)
    seen = [s.id for s in page.items]
    while page.cursor:
        page = await client.list(limit=7, cursor=page.cursor)
        seen += [s.id for s in page.items]
    assert sorted(seen) == [f"s{i:02d}" for i in range(30)]
    assert seen[-1] == "s05"  # paused ones sit at the end of the next-run order
    reports = await client.list(queue="reports", limit=100)
    assert {s.id for s in reports.items} == {f"s{i:02d}" for i in range(0, 30, 3)}
    assert reports.cursor is None
    t1 = await client.list(task="t1", paused=False, limit=100)
    assert {s.id for s in t1.items} == {f"s{i:02d}" for i in range(1, 30, 2)} - {"s05"}
    with pytest.raises(InvalidArgument, match="cursor"):
        await client.list(cursor="garbage")
    with pytest.raises(InvalidArgument, match="limit"):
        await client.list(limit=0)


async def test_list_resumes_when_the_cursor_entry_went_away(client: Client) -> None:
    for i in range(10):
        await client.add(Schedule(id=f"x{i}", task="t", every=100 + i))
    page = await client.list(limit=4)
    await client.remove(page.items[-1].id)
    rest = await client.list(limit=100, cursor=page.cursor)
    ids = [s.id for s in page.items] + [s.id for s in rest.items]
    assert sorted(ids) == [f"x{i}" for i in range(10)]


async def test_backfill_is_idempotent(client: Client, redis: Redis, prefix: str) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    await client.add(
        Schedule(id="bf", task="t", every=60, start_at=start, overlap="allow", misfire="skip")
    )
    end = start + timedelta(minutes=5)
    first = await client.backfill("bf", start, end)
    assert first.count("fired") == 6
    again = await client.backfill("bf", start - timedelta(minutes=2), end)
    assert again.count("already_fired") == 6
    assert again.count("fired") == 2  # the interval grid extends back before start_at
    entries = await jobs(redis, prefix)
    assert len(entries) == 8
    assert {e["origin"] for e in entries} == {"backfill"}
    assert entries[0]["execution_id"] == f"bf@{int(start.timestamp() * 1000)}"
    assert entries[-1]["execution_id"] == f"bf@{int(start.timestamp() * 1000) - 60_000}"


async def test_backfill_respects_overlap_and_range_errors(client: Client) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    await client.add(Schedule(id="ov", task="t", every=60, start_at=start))
    result = await client.backfill("ov", start, start + timedelta(minutes=2))
    # overlap=skip: the first run is unfinished, so the others wait their turn behind it.
    assert [result.count(s) for s in ("fired", "buffered", "skipped")] == [1, 2, 0]
    with pytest.raises(InvalidArgument, match=r"end: .* is in the future"):
        await client.backfill("ov", start, datetime.now(UTC) + timedelta(hours=1))
    with pytest.raises(InvalidArgument, match=r"end: .* is before start"):
        await client.backfill("ov", start, start - timedelta(minutes=1))
    await client.add(Schedule(id="minutely", task="t", cron="* * * * *"))
    with pytest.raises(InvalidArgument, match="more than 1000 occurrences"):
        await client.backfill("minutely", start - timedelta(days=2), start)
    with pytest.raises(ScheduleNotFound):
        await client.backfill("ghost", start, start)


async def test_stats(client: Client, redis: Redis, prefix: str) -> None:
    await client.add(nightly())
    await client.add(Schedule(id="p", task="t", every=60))
    await client.pause("p")
    await client.add(Schedule(id="done", task="t", every=60, max_runs=1, overlap="allow"))
    await client.trigger("done")
    # Make one overdue by hand, as after a scheduler outage.
    await move_to(redis, Keys(prefix), "nightly", 1000)
    await redis.set(f"{{{prefix}}}:leader", "7:host:1:abc", px=10_000)
    stats = await client.stats()
    assert stats.schedules == {"total": 3, "active": 1, "paused": 1, "completed": 1}
    assert stats.due == 1
    assert stats.oldest_overdue is not None
    assert stats.oldest_overdue["id"] == "nightly"
    assert stats.leader is not None
    assert stats.leader["owner"] == "host:1:abc"
    assert stats.leader["token"] == 7
    assert stats.queues["default"]["length"] == 1
    orjson.dumps(stats.as_dict())


async def test_redis_unavailable(prefix: str) -> None:
    async with Client.from_url("redis://127.0.0.1:1/0", prefix=prefix) as client:
        with pytest.raises(RedisUnavailable, match=r"cannot reach Redis at redis://127\.0\.0\.1:1"):
            await client.get("x")


async def test_from_url_context_manager(redis_url: str, prefix: str, redis: Redis) -> None:
    async with rsched.Client.from_url(redis_url, prefix=prefix) as client:
        await client.add(nightly())
        assert (await client.get("nightly")).id == "nightly"


async def add_dead_letter(redis: Redis, prefix: str, queue: str, n: int, task: str) -> str:
    """A dead letter as a worker writes it after the last retry."""
    job = [
        "execution_id",
        f"e{n}",
        "task",
        task,
        "payload",
        orjson.dumps({"n": n}).decode(),
        "attempt",
        "4",
    ]
    return str(
        await redis.xadd(
            f"{{{prefix}}}:dead:{queue}",
            {
                "reason": "max_retries",
                "execution_id": f"e{n}",
                "task": task,
                "schedule_id": "",
                "error_type": "ValueError",
                "error_message": "boom",
                "traceback": "Traceback ...",
                "deliveries": "1",
                "worker": "w1",
                "job": orjson.dumps(job).decode(),
            },
        )
    )


async def test_enqueue(client: Client, redis: Redis, prefix: str) -> None:
    done = await client.enqueue("emails.send", {"to": "a@example.com"}, queue="mail")
    assert done.created
    eid = done.execution_id
    entries = await jobs(redis, prefix, "mail")
    assert [(e["execution_id"], e["task"]) for e in entries] == [(eid, "emails.send")]
    await client.enqueue("emails.send", queue="mail", delay=timedelta(minutes=5))
    assert len(await jobs(redis, prefix, "mail")) == 1  # held back until due
    with pytest.raises(rsched.InvalidJob, match="payload"):
        await client.enqueue("t", {"x": object()})
    with pytest.raises(rsched.InvalidJob, match="task"):
        await client.enqueue("bad task")


async def test_dead_letters_list_show_requeue_purge(
    client: Client, redis: Redis, prefix: str
) -> None:
    await client.enqueue("warmup", queue="mail")  # registers the queue
    for n in range(3):
        await add_dead_letter(redis, prefix, "mail", n, "emails.send" if n < 2 else "other")
    letters = await client.dead_letters("mail", limit=2)
    assert [d.execution_id for d in letters] == ["e2", "e1"]
    assert letters.cursor is not None
    rest = await client.dead_letters("mail", limit=2, cursor=letters.cursor)
    assert [d.execution_id for d in rest] == ["e0"]
    assert rest.cursor is None
    exact = await client.dead_letters("mail", limit=3)  # the last page says so
    assert (len(exact), exact.cursor) == (3, None)
    assert [d.execution_id async for d in client.iter_dead_letters("mail", page_size=1)] == [
        "e2",
        "e1",
        "e0",
    ]
    sent = [d.execution_id async for d in client.iter_dead_letters("mail", task="emails.send")]
    assert sent == ["e1", "e0"]
    one = await client.dead_letter("mail", letters.items[0].entry_id)
    assert (one.error_type, one.error_message, one.payload) == ("ValueError", "boom", {"n": 2})
    with pytest.raises(rsched.DeadLetterNotFound, match="'1-1' does not exist in queue 'mail'"):
        await client.dead_letter("mail", "1-1")
    assert (await client.stats()).dead_letters == 3
    assert await client.requeue("mail", task="emails.send") == 2
    assert [e["execution_id"] for e in await jobs(redis, prefix, "mail")][-2:] == ["e0", "e1"]
    assert await client.purge("mail") == 1
    assert (await client.stats()).queues["mail"]["dead"] == 0


async def test_concurrent_updates_all_land(client: Client) -> None:
    await client.add(Schedule(id="busy", task="t", every=60))

    async def change(i: int) -> None:
        await client.update("busy", payload={"writer": i})

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(change, i)
    final = await client.get("busy")
    assert final.generation == 6  # every write landed once, none was lost to a conflict
    assert final.payload["writer"] in range(5)


async def test_remove_forgets_backfills_and_file_index(
    client: Client, redis: Redis, prefix: str
) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=3)
    await client.add(
        Schedule(id="f", task="t", every=60, start_at=start, overlap="allow", source="file:x")
    )
    await redis.sadd(f"{{{prefix}}}:source:file:x", "f")
    assert (await client.backfill("f", start, start)).count("fired") == 1
    await client.remove("f")
    assert await redis.exists(f"{{{prefix}}}:backfilled:f") == 0
    assert await redis.smembers(f"{{{prefix}}}:source:file:x") == set()
    # Re-created under the same id, the schedule's past can be backfilled again.
    await client.add(Schedule(id="f", task="t", every=60, start_at=start, overlap="allow"))
    assert (await client.backfill("f", start, start)).count("fired") == 1


async def test_backfill_refuses_a_hand_edited_schedule(
    client: Client, redis: Redis, prefix: str
) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=3)
    await client.add(Schedule(id="h", task="t", every=60, start_at=start, overlap="allow"))
    await redis.hset(f"{{{prefix}}}:schedule:h", "max_retries", "lots")
    with pytest.raises(rsched.StateError, match="'h'"):
        await client.backfill("h", start, start + timedelta(minutes=1))
    assert await jobs(redis, prefix) == []
