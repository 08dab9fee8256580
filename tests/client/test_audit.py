"""The audit trail and the spec history end to end against real servers: one record per
change from the SDK (actor, source, generations, fields changed), calendars and limits, re-sent
calls, the spec history's cap, rollback, bad input and retention (docs/audit.md)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from redis.asyncio import Redis

import rsched
from rsched import AuditRecord, Client, InvalidArgument, ScheduleNotFound, Settings
from rsched._core.audit import authored
from rsched._core.keys import Keys
from rsched._scheduler.retention import Retention


def spec(sid: str = "r", **over: Any) -> dict[str, Any]:
    return {"id": sid, "task": "reports.build", "cron": "0 2 * * *", **over}


async def records(client: Client, sid: str | None = None) -> list[AuditRecord]:
    """Every record of the trail (of ``sid``), oldest first."""
    return list(reversed([r async for r in client.iter_audit(sid)]))


@pytest.fixture
async def client(redis: Redis, settings: Settings) -> Client:
    return Client(redis, settings, actor="alice@ops-1")


async def test_each_action_writes_one_record(client: Client) -> None:
    await client.add(spec(payload={"kind": "sales"}))
    await client.update("r", cron="*/5 * * * *")
    await client.update("r", cron="*/5 * * * *")  # the same spec: nothing written
    await client.pause("r", note="db migration")
    await client.resume("r")
    await client.resume("r")  # not paused: nothing changes, nothing recorded
    fired = await client.trigger("r")
    await client.upsert(spec(cron="0 3 * * *"))
    await client.remove("r")
    got = await records(client, "r")
    assert [r.action for r in got] == [
        "add", "update", "pause", "resume", "trigger", "upsert", "remove",
    ]  # fmt: skip
    assert {(r.actor, r.source) for r in got} == {("alice@ops-1", "sdk")}
    add, update, pause, resume, trigger, upsert, remove = got
    assert (add.generation_before, add.generation_after) == (None, 1)
    assert add.changes == {}  # its spec is its generation 1 (the hash, then the spec history)
    assert (update.generation_before, update.generation_after) == (1, 2)
    assert update.changes == {"cron": ("0 2 * * *", "*/5 * * * *")}
    assert pause.changes == {"status": (None, "paused"), "pause_note": (None, "db migration")}
    assert (pause.generation_before, pause.generation_after) == (2, 2)
    assert resume.changes == {"status": ("paused", None), "pause_note": ("db migration", None)}
    assert trigger.note == f"{fired.execution_id} fired"
    assert trigger.changes == {}
    assert (upsert.generation_before, upsert.generation_after) == (2, 3)
    # An upsert replaces the whole spec: the payload it leaves out is gone.
    assert upsert.changes == {
        "cron": ("*/5 * * * *", "0 3 * * *"),
        "payload": ('{"kind":"sales"}', None),
    }
    assert (remove.generation_before, remove.generation_after) == (3, None)
    # Newest first, and filtered by actor.
    page = await client.audit(limit=2)
    assert [r.action for r in page.items] == ["remove", "upsert"]
    assert page.cursor is not None
    assert (await client.audit(actor="bob")).items == []
    assert [r.action for r in (await client.audit(since="1h", limit=100)).items][-1] == "add"
    assert update.as_dict()["changes"]["cron"] == ["0 2 * * *", "*/5 * * * *"]


async def test_actor_defaults_and_bad_input(redis: Redis, settings: Settings) -> None:
    nobody = Client(redis, settings)
    await nobody.add(spec("a"))
    (record,) = await records(nobody, "a")
    assert (record.actor, record.source) == (None, "sdk")
    from_settings = Client(redis, settings.model_copy(update={"actor": "deploy-bot"}))
    await from_settings.pause("a")
    assert (await records(nobody, "a"))[-1].actor == "deploy-bot"
    for bad in ("x" * 65, "has space", "semi;colon", ""):
        with pytest.raises(InvalidArgument, match=r"^actor: ") as caught:
            Client(redis, settings, actor=bad)
        assert caught.value.field == "actor"
    with pytest.raises(InvalidArgument, match=r"^source: "):
        Client(redis, settings, source="elsewhere")
    with pytest.raises(ValueError, match="actor"):
        Settings(actor="two words")
    with pytest.raises(InvalidArgument, match=r"^actor: "):
        await nobody.audit(actor="no spaces allowed")
    with pytest.raises(InvalidArgument, match=r"^cursor: "):
        await nobody.audit(cursor="nope")
    # A bad actor never reaches a script: nothing written.
    assert len(await records(nobody)) == 2


async def test_large_values_are_digested(client: Client) -> None:
    await client.add(spec())
    await client.update("r", payload={"blob": "x" * 500})
    _, record = await records(client, "r")
    old, new = record.changes["payload"]
    assert old is None
    assert new is not None
    assert re.fullmatch(r"#[0-9a-f]{12} 5\d\dB", new), new
    assert len(new) < 30


async def test_bulk_and_calendars_and_limits(client: Client) -> None:
    await client.add_many([spec("a"), spec("b")])
    await client.upsert_many([spec("a"), spec("b", cron="0 4 * * *"), spec("c")])  # a unchanged
    got = await records(client)
    # What a bulk write creates is one record for the call, naming every id; a replace its own.
    assert [(r.action, r.id, r.ids) for r in got] == [
        ("add", "a", ("a", "b")),
        ("upsert", "b", ()),
        ("upsert", "c", ("c",)),
    ]
    assert (got[0].generation_after, got[0].note) == (1, "2 created")
    assert got[1].changes == {"cron": ("0 2 * * *", "0 4 * * *")}
    assert [r.action for r in await records(client, "b")] == ["add", "upsert"]
    assert got[0].as_dict()["ids"] == ["a", "b"]

    await client.set_calendar("holidays", dates=["2030-12-25"])
    await client.set_calendar("holidays", dates=["2030-12-25", "2030-12-26"])
    await client.remove_calendar("holidays")
    cal = await records(client, "holidays")
    assert [r.action for r in cal] == ["calendar_set", "calendar_set", "calendar_remove"]
    assert cal[1].changes == {"dates": ('["2030-12-25"]', '["2030-12-25","2030-12-26"]')}
    assert cal[2].changes["dates"] == ('["2030-12-25","2030-12-26"]', None)
    assert {r.actor for r in cal} == {"alice@ops-1"}

    await client.set_limit("crm", concurrency=2)
    await client.set_limit("crm", concurrency=2)  # the same numbers: nothing to record
    await client.set_limit("customer:*", rate="10/m")
    await client.clear_limit("crm")
    await client.clear_limit("crm")  # nothing set: nothing to record
    lim = [r for r in await records(client) if r.action.startswith("limit_")]
    assert [(r.action, r.id) for r in lim] == [
        ("limit_set", "crm"), ("limit_set", "customer:*"), ("limit_clear", "crm"),
    ]  # fmt: skip
    assert lim[0].changes == {"numbers": (None, '{"c":2}')}
    assert lim[2].changes == {"numbers": ('{"c":2}', None)}


async def test_resent_calls_record_once(
    client: Client, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # redis-py re-sends a script call after a connection error: the op key replays the first
    # result, so its record is not written twice.
    keys = Keys(settings.prefix)
    fixed = keys.ops(0)
    store = await client._store("r")
    now = await store.time_ms()
    for n, act in enumerate(("add", "pause", "resume", "trigger", "remove")):
        monkeypatch.setattr(Keys, "new_op", lambda _, n=n: (fixed, f"request-{n}"))
        for _ in range(2):  # the second call is the re-sent one: its first result comes back
            if act == "add":  # the script itself: Client.add refuses an existing id first
                with authored(client.author):
                    got = await store.write(
                        rsched.Schedule(**spec()),
                        mode="add",
                        expect_gen=None,
                        next_ms=now + 3_600_000,
                        created_ms=now,
                    )
                assert got == (1, True)
            else:
                await getattr(client, act)("r")
    assert [r.action for r in await records(client)] == [
        "add", "pause", "resume", "trigger", "remove",
    ]  # fmt: skip
    # Calendars and limits have no op key: a re-sent write finds its own change made and
    # records nothing.
    parts = await client._partitions()
    calendar = rsched.Calendar.build("c", dates=["2030-01-01"])
    for _ in range(2):
        with authored(client.author):
            await parts.calendars._write("c", calendar.to_json())
            await parts.queues[0].set_limit("k", {"c": 1})
    assert [r.action for r in await records(client)][-2:] == ["calendar_set", "limit_set"]


async def test_spec_history_and_rollback(redis: Redis, settings: Settings) -> None:
    client = Client(redis, settings.model_copy(update={"spec_history_limit": 3}), actor="ann")
    await client.add(spec())
    assert await client.spec_history("r") == []  # never changed: nothing kept
    assert not await redis.exists(Keys(settings.prefix).specs("r"))
    for hour in range(3, 8):
        await client.update("r", cron=f"0 {hour} * * *")
    kept = await client.spec_history("r")
    assert [v.generation for v in kept] == [6, 5, 4]  # capped at 3, newest first
    assert kept[0].spec["cron"] == "0 7 * * *"
    assert (kept[0].actor, kept[0].source) == ("ann", "sdk")
    assert kept[0].as_dict()["spec"]["task"] == "reports.build"

    await client.pause("r", note="hold")
    rolled = await client.rollback("r", 4)
    assert rolled.generation == 7
    assert rolled.cron == "0 5 * * *"
    assert rolled.paused  # the pause stays the operator's
    assert rolled.pause_note == "hold"
    last = (await client.audit("r", limit=1)).items[0]
    assert (last.action, last.generation_before, last.generation_after) == ("rollback", 6, 7)
    assert last.changes == {"cron": ("0 7 * * *", "0 5 * * *")}

    before = len(await records(client))
    with pytest.raises(InvalidArgument, match="generation 1 of 'r' is not kept") as caught:
        await client.rollback("r", 1)
    assert caught.value.field == "generation"
    assert "give one of those" in str(caught.value)
    with pytest.raises(InvalidArgument, match=r"^generation: "):
        await client.rollback("r", 0)
    assert (await client.get("r")).generation == 7
    assert len(await records(client)) == before
    with pytest.raises(ScheduleNotFound):
        await client.spec_history("nope")

    await client.add(spec("fresh"))
    with pytest.raises(InvalidArgument, match="has no spec history"):
        await client.rollback("fresh", 1)
    # The history goes with the schedule; its audit records stay.
    await client.remove("r")
    assert not await redis.exists(Keys(settings.prefix).specs("r"))
    assert (await records(client, "r"))[-1].action == "remove"


async def test_first_change_keeps_the_spec_it_replaces(client: Client) -> None:
    await client.add(spec())
    await client.update("r", cron="0 9 * * *")
    first, added = await client.spec_history("r")
    assert (first.generation, first.actor, first.source) == (2, "alice@ops-1", "sdk")
    assert (added.generation, added.actor) == (1, None)  # before it was kept: unknown
    assert added.spec == {"task": "reports.build", "cron": "0 2 * * *"}
    back = await client.rollback("r", 1)
    assert (back.cron, back.generation) == ("0 2 * * *", 3)


async def test_sync_client(settings: Settings) -> None:
    with rsched.SyncClient.from_settings(settings.model_copy(update={"actor": "carol"})) as c:
        c.add(spec())
        c.update("r", cron="0 5 * * *")
        assert [r.action for r in c.iter_audit("r")] == ["update", "add"]
        assert [v.generation for v in c.spec_history("r")] == [2, 1]
        assert c.rollback("r", 1).generation == 3
        assert c.audit("r", limit=1).items[0].actor == "carol"


async def test_retention_trims_the_trail(
    redis: Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client(redis, settings)
    for n in range(5):
        await client.add(spec(f"s{n}"))
    keys = Keys(settings.prefix)
    assert await redis.xlen(keys.audit) == 5
    sweep = await Retention(redis, settings, lambda: True, keys=keys).sweep()
    assert sweep.audit == 0  # young and few: kept
    aged = settings.model_copy(
        update={"retention": settings.retention.model_copy(update={"audit_max_age_s": 60})}
    )
    retention = Retention(redis, aged, lambda: True, keys=keys)
    now = await client._clock.time_ms()

    async def later() -> int:
        return now + 120_000

    monkeypatch.setattr(retention._schedules, "time_ms", later)
    assert (await retention.sweep()).audit == 5
    assert await redis.xlen(keys.audit) == 0


async def test_someone_elses_keys_are_refused_before_any_write(
    client: Client, redis: Redis, settings: Settings
) -> None:
    keys = Keys(settings.prefix)
    await redis.set(keys.audit, "not a stream")
    with pytest.raises(rsched.StateError):
        await client.add(spec())
    assert not await redis.exists(keys.schedule("r"))
    await redis.delete(keys.audit)
    await client.add(spec())
    await redis.xadd(keys.audit, {"other": "entry"})  # not rsched's: skipped by reads
    assert [r.action for r in await records(client)] == ["add"]


@pytest.mark.cluster
async def test_partitions_gathered(redis: Redis, settings: Settings, topology: str) -> None:
    client = Client(redis, settings.model_copy(update={"partitions": 4}), actor="dee")
    ids = [f"p{n}" for n in range(12)]
    for sid in ids:
        await client.add(spec(sid))
    await client.set_calendar("cal", weekdays=["sat"])
    await client.set_limit("lim", concurrency=1)
    seen = [r async for r in client.iter_audit(page_size=5)]
    assert sorted(r.id for r in seen if r.action == "add") == sorted(ids)
    assert {r.id for r in seen} == {*ids, "cal", "lim"}
    times = [r.at for r in seen]
    assert times == sorted(times, reverse=True)
    one = await records(client, "p7")
    assert [(r.action, r.id) for r in one] == [("add", "p7")]
    assert [r.id for r in await records(client, "cal")] == ["cal"]


async def test_a_history_left_by_an_older_writer(
    client: Client, redis: Redis, settings: Settings
) -> None:
    keys = Keys(settings.prefix)
    # An earlier schedule of the same id, removed by an rsched that kept no history, left one.
    await redis.lpush(keys.specs("r"), '[7,1,"old",null,{"task":"t","every":"60.0"}]')
    await client.add(spec())
    await client.update("r", cron="0 4 * * *")
    assert [v.generation for v in await client.spec_history("r")] == [2, 1]
    # A generation written by a writer that keeps no history: the next change fills it in.
    created = str(await redis.hget(keys.schedule("r"), "version")).partition(":")[2]
    await redis.hset(keys.schedule("r"), "version", f"3:{created}")
    await redis.hset(keys.schedule("r"), "cron", "0 5 * * *")
    await client.update("r", cron="0 6 * * *")
    kept = await client.spec_history("r")
    assert [v.generation for v in kept] == [4, 3, 2, 1]
    assert kept[1].spec["cron"] == "0 5 * * *"
