"""Schedule writes through ScheduleStore on real servers: validation, re-sends, pause, trigger."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from rsched import (
    InvalidSchedule,
    Schedule,
    ScheduleCompleted,
    ScheduleExists,
    ScheduleNotFound,
)
from rsched._core.codes import Code
from rsched._core.errors import Conflict
from rsched._core.keys import Keys
from rsched._core.schedule import to_ms
from rsched._core.settings import Settings
from rsched._core.timing import first_run_ms
from rsched._redis.scripts import pack_command
from rsched._store.schedules import ScheduleStore
from tests.support.leading import firing, leases
from tests.support.placement import next_score
from tests.support.worker_app import any_


@pytest.fixture
def store(redis: Redis, settings: Settings) -> ScheduleStore:
    return ScheduleStore(redis, Keys(settings.prefix), max_payload_bytes=1024)


async def snapshot(redis: Redis, prefix: str) -> dict[str, Any]:
    """Every key of the prefix with its serialized value (DUMP) and whether it expires."""
    out: dict[str, Any] = {}
    async for key in redis.scan_iter(match=f"{{{prefix}}}:*"):
        dump = await redis.execute_command("DUMP", key, NEVER_DECODE=True)  # type: ignore[no-untyped-call]
        out[key] = (dump, await redis.pttl(key) > 0)
    return out


async def test_write_and_load(store: ScheduleStore) -> None:
    gen, created = await store.save(
        Schedule(id="r", task="reports.nightly", cron="0 2 * * *", timezone="Europe/Rome")
    )
    assert (gen, created) == (1, True)
    loaded = await store.load("r")
    assert loaded.cron == "0 2 * * *"
    assert loaded.timezone == "Europe/Rome"
    assert loaded.generation == 1
    assert loaded.next_run is not None
    assert loaded.next_run.astimezone(UTC).hour in (0, 1)  # 02:00 in Rome
    fields = await store.redis.hgetall(store.keys.schedule("r"))
    # Only what differs from the defaults is stored, plus engine state.
    assert set(fields) == {
        "task", "cron", "timezone", "version",
    }  # fmt: skip
    assert loaded.created_at is not None
    assert fields["version"] == f"1:{to_ms(loaded.created_at)}"
    assert loaded.updated_at == loaded.created_at  # stored only once the schedule changes
    # The next run lives in the index only, and reads take it from there.
    score = await next_score(store.redis, store.keys, "r")
    assert score == loaded.next_run.timestamp() * 1000
    gen, created = await store.save(Schedule(id="r", task="reports.nightly", cron="0 3 * * *"))
    assert (gen, created) == (2, False)
    assert (
        await store.redis.hget(store.keys.schedule("r"), "version")
        == "2:" + fields["version"].partition(":")[2]
    )
    assert await store.redis.hexists(store.keys.schedule("r"), "updated_at")


async def test_modes(store: ScheduleStore) -> None:
    spec = Schedule(id="m", task="t", every=60)
    with pytest.raises(ScheduleNotFound):
        await store.save(spec, mode="replace")
    await store.save(spec, mode="add")
    with pytest.raises(ScheduleExists):
        await store.save(spec, mode="add")
    with pytest.raises(Conflict):
        await store.save(spec, expect_gen=7)
    assert (await store.save(spec, expect_gen=1))[0] == 2
    await store.remove("m")
    with pytest.raises(ScheduleNotFound):
        await store.remove("m")
    with pytest.raises(ScheduleNotFound):
        await store.load("m")


async def test_every_anchor_and_window(store: ScheduleStore) -> None:
    now = await store.time_ms()
    await store.save(Schedule(id="e", task="t", every=30))
    nxt = int(await next_score(store.redis, store.keys, "e") or 0)
    assert now + 30_000 <= nxt < now + 31_000
    start = datetime.now(UTC) + timedelta(hours=1)
    await store.save(Schedule(id="w", task="t", every=30, start_at=start))
    assert await next_score(store.redis, store.keys, "w") == int(start.timestamp() * 1000)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Schedule(id="x", task="t", cron="61 * * * *"), "cron"),
        (lambda: Schedule(id="x", task="t", cron="0 0 30 2 *"), "cron"),
        (lambda: Schedule(id="x", task="t", cron="*/0 * * * *"), "cron"),
        (lambda: Schedule(id="x", task="t", cron="0 2 * * *", timezone="PST"), "timezone"),
        (lambda: Schedule(id="x", task="t", cron="0 2 * * *", timezone="Mars/Base"), "timezone"),
        (lambda: Schedule(id="bad id!", task="t", every=5), "id"),
        (lambda: Schedule(id="x{y}", task="t", every=5), "id"),
        (lambda: Schedule(id="x", task="t", every=0), "every"),
        (lambda: Schedule(id="x", task="t", every=-5), "every"),
        (lambda: Schedule(id="x", task="t", every=timedelta(0)), "every"),
        (lambda: Schedule(id="x", task="t", every=5, payload={"b": "x" * 70_000}), "payload"),
        (lambda: Schedule(id="x", task="t", every=5, payload=[1]), "payload"),
        (lambda: Schedule(id="x", task="t", every=5, cron="* * * * *"), ""),
        (lambda: Schedule(id="x", task="t"), ""),
    ],
)
async def test_bad_input_names_the_field(
    store: ScheduleStore, prefix: str, make: Callable[[], Schedule], field: str
) -> None:
    await store.save(Schedule(id="keep", task="t", every=60))
    before = await snapshot(store.redis, prefix)
    with pytest.raises(InvalidSchedule) as caught:
        await store.save(make())
    assert [f for f, _ in caught.value.errors] == [field]
    assert await snapshot(store.redis, prefix) == before


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"at": datetime.now(UTC) - timedelta(minutes=1)}, "at"),
        ({"every": 5, "end_at": datetime.now(UTC) - timedelta(minutes=1)}, "end_at"),
        (
            {
                "cron": "0 0 1 1 *",
                "start_at": datetime.now(UTC) + timedelta(days=2),
                "end_at": datetime.now(UTC) + timedelta(days=3),
            },
            "end_at",
        ),
        ({"every": 5, "payload": {"big": "x" * 2000}}, "payload"),  # store limit 1024
    ],
)
async def test_bad_input_checked_against_redis_time(
    store: ScheduleStore, prefix: str, spec: dict[str, Any], field: str
) -> None:
    await store.save(Schedule(id="keep", task="t", every=60))
    before = await snapshot(store.redis, prefix)
    with pytest.raises(InvalidSchedule) as caught:
        await store.save(Schedule(id="x", task="t", **spec))
    assert [f for f, _ in caught.value.errors] == [field]
    assert field in str(caught.value)
    assert await snapshot(store.redis, prefix) == before


def test_first_run_ms() -> None:
    now = 1_800_000_000_000
    at = Schedule(id="a", task="t", at=datetime.fromtimestamp(now / 1000 + 5, UTC))
    assert first_run_ms(at, now) == now + 5_000
    with pytest.raises(InvalidSchedule, match=r"at: .* is in the past"):
        first_run_ms(at, now + 5_000)
    # An existing one-off that already passed simply has nothing left to run.
    assert first_run_ms(at, now + 10_000, creating=False) is None
    every = Schedule(id="e", task="t", every=10)
    assert first_run_ms(every, now) == now + 10_000
    assert first_run_ms(every, now, created_ms=now - 25_000) == now + 5_000
    used_up = Schedule(id="u", task="t", every=10, max_runs=2, runs=2)
    assert first_run_ms(used_up, now, creating=False) is None


async def test_resent_writes_apply_once(
    store: ScheduleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # redis-py re-sends a script call after a connection error; the op key makes it a no-op.
    fixed = store.keys.ops(0)
    monkeypatch.setattr(Keys, "new_op", lambda _: (fixed, "fixed-request"))
    spec = Schedule(id="r", task="t", every=60, overlap="allow")
    assert await store.save(spec) == (1, True)
    assert await store.save(spec) == (1, True)
    assert (await store.load("r")).generation == 1

    monkeypatch.setattr(Keys, "new_op", lambda _: (fixed, "trigger-request"))
    first = await store.trigger("r", "default")
    assert await store.trigger("r", "default") == first
    assert await store.redis.xlen(store.keys.queue("default")) == 1
    assert await store.redis.hget(store.keys.schedule("r"), "runs") == "1"

    monkeypatch.setattr(Keys, "new_op", lambda _: (fixed, "remove-request"))
    await store.remove("r")
    await store.remove("r")  # replayed: no ScheduleNotFound for the re-sent call
    assert await store.redis.exists(store.keys.schedule("r")) == 0


async def test_trigger_goes_through_overlap(store: ScheduleStore) -> None:
    await store.save(Schedule(id="t1", task="t", cron="0 0 1 1 *", max_runs=2))
    code, exec_id = await store.trigger("t1", "default")
    assert code == Code.FIRED
    assert exec_id.startswith("t1@")
    entries: Any = await store.redis.xrange(store.keys.queue("default"))
    (entry,) = entries
    assert entry[1]["origin"] == "manual"
    assert entry[1]["execution_id"] == exec_id
    assert await store.redis.hget(store.keys.schedule("t1"), "run") == exec_id
    # The previous run is still marked running: overlap=skip skips the second trigger.
    code, _ = await store.trigger("t1", "default")
    assert code == Code.SKIPPED
    events = [e["event"] for e in await store.history("t1", 10)]
    assert events == ["skipped", "fired"]
    # Triggers count towards max_runs; the regular occurrences did not move.
    await store.redis.hdel(store.keys.schedule("t1"), "run")
    assert (await store.trigger("t1", "default"))[0] == Code.FIRED
    loaded = await store.load("t1")
    assert loaded.completed
    with pytest.raises(ScheduleCompleted, match="has completed; nothing to trigger"):
        await store.trigger("t1", "default")
    with pytest.raises(ScheduleNotFound):
        await store.trigger("nope", "default")


async def test_triggers_in_one_millisecond_get_their_own_execution_ids(
    store: ScheduleStore,
) -> None:
    await store.save(Schedule(id="fast", task="t", every=3600, overlap="allow"))
    ids = [(await store.trigger("fast", "default"))[1] for _ in range(30)]
    assert len(set(ids)) == 30
    times = [int(i.partition("@")[2]) for i in ids]
    assert times == sorted(times)


async def test_buffer_one_and_cancel_previous(store: ScheduleStore) -> None:
    await store.save(Schedule(id="b", task="t", every=3600, overlap="buffer_one"))
    assert (await store.trigger("b", "default"))[0] == Code.FIRED
    assert (await store.trigger("b", "default"))[0] == Code.BUFFERED
    assert (await store.trigger("b", "default"))[0] == Code.SKIPPED
    (member,) = any_(await store.redis.zrange(store.keys.pending("b"), 0, -1))
    fields = orjson.loads(member)
    assert dict(zip(fields[::2], fields[1::2], strict=True))["task"] == "t"
    await store.save(Schedule(id="c", task="t", every=3600, overlap="cancel_previous"))
    _, first = await store.trigger("c", "default")
    async with store.redis.pubsub() as pubsub:
        await pubsub.subscribe(store.keys.cancel)
        await pubsub.get_message(timeout=1)
        assert (await store.trigger("c", "default"))[0] == Code.FIRED
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2)
    assert message is not None
    assert message["data"] == first
    # A new spec drops the occurrence buffered under the old one.
    await store.save(Schedule(id="b", task="t2", every=3600, overlap="buffer_one"))
    assert await store.redis.exists(store.keys.pending("b")) == 0


async def test_pause_and_resume(store: ScheduleStore) -> None:
    await store.save(Schedule(id="p", task="t", every=60))
    await store.pause("p", "deploy in progress")
    loaded = await store.load("p")
    assert loaded.paused
    assert loaded.pause_note == "deploy in progress"
    assert await next_score(store.redis, store.keys, "p") == float("inf")
    now = await store.time_ms()
    nxt = first_run_ms(loaded, now, created_ms=now, creating=False)
    with pytest.raises(Conflict):
        await store.resume("p", 5, nxt)
    await store.resume("p", loaded.generation, nxt)
    resumed = await store.load("p")
    assert not resumed.paused
    assert resumed.pause_note is None
    assert await next_score(store.redis, store.keys, "p") == nxt
    with pytest.raises(ScheduleNotFound):
        await store.pause("nope", None)


async def test_wake_published_when_a_schedule_becomes_the_earliest(store: ScheduleStore) -> None:
    await store.save(Schedule(id="paused", task="t", every=60))
    await store.pause("paused", None)  # the only entry now scores +inf
    async with store.redis.pubsub() as pubsub:
        await pubsub.subscribe(store.keys.wake)
        await pubsub.get_message(timeout=1)
        await store.save(Schedule(id="first", task="t", every=600))
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2)
        assert message is not None
        score = await next_score(store.redis, store.keys, "first")
        assert message["data"] == str(int(score or 0))
        await store.save(Schedule(id="later", task="t", every=900))  # not earlier: no wake
        assert await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2) is None


def test_pack_command_matches_the_protocol() -> None:
    assert pack_command(["EVALSHA", "ab", "1", "k:é"]) == (
        b"*4\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$4\r\nk:\xc3\xa9\r\n"
    )


async def test_batch_reads_and_fires_after_the_script_cache_is_flushed(
    store: ScheduleStore,
) -> None:
    # Batch calls are packed by ScheduleStore and sent by SHA; a server without the script loaded
    # (restarted, or SCRIPT FLUSH) must load it and answer, not fail.
    await store.save(Schedule(id="a", task="t", every=60))
    await store.redis.set(store.keys.schedule("s"), "not a hash")
    await store.redis.script_flush()
    found = await firing(store).plan_fields(["a", "missing", "s"], ["task", "cron"])
    assert found == [{"task": "t"}, {}, None]
    assert await firing(store).plan_fields([], ["task"]) == []
    await store.redis.script_flush()
    lease, _ = await leases(store).acquire("owner", 60_000)
    assert lease is not None
    assert await firing(store).fire(lease, []) == []


async def test_due_reads_runs_of_a_shared_score(store: ScheduleStore) -> None:
    # A herd: more entries share one score than one probe covers, plus members rsched never
    # writes (a space, empty) inside the run, and entries of other scores around it.
    now = await store.time_ms()
    herd = {f"h{i:05d}": now - 10 for i in range(2_500)}
    await store.redis.zadd(
        store.keys.schedules,
        {**herd, "h01000 x": now - 10, "": now - 10, "early": now - 20, "late": now + 60_000},
    )
    at, due, next_ms = await firing(store).due(10_000)
    assert at >= now
    assert next_ms == now + 60_000
    assert due == [("early", now - 20), *sorted(herd.items())]
    # The limit counts entries, left out or not, and cuts a run anywhere.
    _, due, _ = await firing(store).due(1_500)
    assert due[0] == ("early", now - 20)
    assert len(due) == 1_498


async def test_read_hashes_gives_each_hash_with_its_next_run_in_one_reply(
    store: ScheduleStore,
) -> None:
    """lua/read_hashes.lua: in the index or parked, missing, of another type, paused; in pages
    of READ_HASHES, in the order asked."""
    await store.save(Schedule(id="soon", task="t", every=60, payload={"k": "v é"}))
    await store.save(Schedule(id="far", task="t", cron="0 3 1 1 *"))  # parked: a year off
    await store.save(Schedule(id="held", task="t", every=60, paused=True))
    await store.redis.set(store.keys.schedule("odd"), "not a hash")
    assert await store.redis.zscore(store.keys.parked_of("far"), "far") is not None
    soon, missing, odd, far, held = await store.read_hashes(
        ["soon", "missing", "odd", "far", "held"]
    )
    assert soon is not None
    assert float(soon["next_run"]) == await next_score(store.redis, store.keys, "soon")
    assert orjson.loads(soon["payload"]) == {"k": "v é"}
    assert (missing, odd) == ({}, None)
    assert far is not None
    assert float(far["next_run"]) == await next_score(store.redis, store.keys, "far")
    assert held is not None
    assert "next_run" not in held
    assert held["status"] == "paused"
    assert await store.read_hashes([]) == []
    many = [f"m{i:04d}" for i in range(1_050)]  # past one call's READ_HASHES
    for sid in many:
        await store.save(Schedule(id=sid, task="t", every=60))
    read = await store.read_hashes([*many[::-1], "missing"])
    assert [h and h.get("task") for h in read] == ["t"] * 1_050 + [{}]
