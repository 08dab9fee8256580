"""A schedule's history as one compact record per run: written by the fire, updated in place by
the worker scripts through the run's life, read back as the events it stands for; old JSON
events beside them; the cap counts runs; trimming by age; what 100 runs cost."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest
from redis.asyncio import Redis

from rsched import Client, Schedule, Settings
from rsched._core.codes import Code
from rsched._core.fire_plan import FireItem, FireSpec
from rsched._core.history import expand_record, fragment, stored_events
from rsched._core.keys import Keys
from rsched._redis.scripts import ScriptCaller
from rsched._store.firing import FiringStore
from rsched._store.leases import LeaseStore
from rsched._store.queues import QueueStore
from rsched._store.schedules import ScheduleStore
from rsched._store.worker_calls import Done
from tests.support.history import from_b62, int_b62

WORKER = "host-1:4242:9f3a1c"
INDEX_ENTRY = 110  # what one member of the schedules index costs, at most (bench/README.md)
Entry = tuple[str, dict[str, str]]


class Runs:
    """Drives the scripts a scheduler and a worker run, one step at a time."""

    def __init__(self, redis: Redis, settings: Settings, sid: str = "s") -> None:
        self.redis, self.sid = redis, sid
        self.keys = Keys(settings.prefix)
        self.client = Client(redis, settings)
        self.store = ScheduleStore.from_settings(redis, settings, self.keys)
        self.firing = FiringStore.from_settings(redis, settings, self.keys)
        self.queues = QueueStore.from_settings(redis, settings, self.keys)
        self.lease = ""
        self.last = 0

    async def setup(self, **spec: Any) -> Runs:
        await self.client.add(Schedule(id=self.sid, task="t", every=3600, **spec))
        await self.queues.create_groups(["default"])
        lease, _ = await LeaseStore(self.redis, self.keys).acquire("test", 60_000)
        assert lease is not None
        self.lease = lease
        return self

    async def fire(self, late_ms: int = 3) -> int:
        """Fire the schedule's occurrence of ``late_ms`` ago, on time; returns its code."""
        now = await self.store.time_ms()
        while now <= self.last:  # runs faster than a ms: the next occurrence must not be ahead
            await anyio.sleep(0.001)
            now = await self.store.time_ms()
        sched = max(now - late_ms, self.last + 1)  # two occurrences never share a time
        self.last = sched
        await self.redis.zadd(self.keys.schedules, {self.sid: sched})
        stored = await self.redis.hgetall(self.keys.schedule(self.sid))
        fields = {str(f): str(v) for f, v in stored.items()}
        spec = FireSpec.from_hash(fields)
        item = FireItem(
            self.sid, fields["version"], sched, sched, sched + 3_600_000, "fire", 0, spec
        )
        codes = await self.firing.fire(self.lease, [item])
        assert codes is not None
        return codes[0]

    async def take(self) -> Entry:
        got = await self.queues.take([("default", "normal")], WORKER, 10)
        (entry,) = [e for _, batch in got for e in batch]
        return entry

    async def start(self, entry: Entry, deliveries: int = 1) -> None:
        eid, f = entry
        extra = fragment({"worker": WORKER, "deliveries": deliveries})
        await self.queues.start("default", WORKER, [(eid, f["execution_id"], self.sid,
                                                     int(f["attempt"]), extra)])  # fmt: skip

    async def end(self, entry: Entry, event: str = "completed", **extra: Any) -> None:
        eid, f = entry
        done = Done(eid, f["execution_id"], self.sid, int(f["attempt"]), event, fragment(extra))
        assert await self.queues.complete("default", [done]) == 1

    async def fail(self, entry: Entry, event: str = "failed", **extra: Any) -> None:
        eid, f = entry
        nxt = {**f, "attempt": str(int(f["attempt"]) + 1)}
        await self.queues.retry(
            "default",
            eid,
            next_fields=[v for pair in nxt.items() for v in pair],
            delay_ms=0,
            execution_id=f["execution_id"],
            schedule_id=self.sid,
            attempt=int(f["attempt"]),
            event=event,
            extra=fragment(extra),
        )

    async def bury(self, entry: Entry, first_event: str = "", **extra: Any) -> None:
        eid, f = entry
        await self.queues.dead(
            "default", eid, raw=f, reason=str(extra.get("reason", "max_retries")),
            worker=WORKER, first_event=first_event, extra=fragment(extra),
        )  # fmt: skip

    async def raw(self) -> list[str]:
        return [str(r) for r in await self.redis.lrange(self.keys.history(self.sid), 0, -1)]

    async def events(self) -> list[dict[str, Any]]:
        """The stored events, oldest first."""
        return list(reversed(await self.store.history(self.sid, 1000)))


def without_times(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in ("at", "late_ms", "scheduled_at")}
            for e in events]  # fmt: skip


async def test_a_completed_run_is_one_record_updated_in_place(
    redis: Redis, settings: Settings
) -> None:
    runs = await Runs(redis, settings).setup()
    assert await runs.fire(late_ms=5) == 1
    (record,) = await runs.raw()
    sched = from_b62(record.split("|")[0])
    assert record == f"{int_b62(sched)}|f{int_b62((await runs.events())[0]['late_ms'])}"
    entry = await runs.take()
    await runs.start(entry)
    await runs.end(entry, duration_ms=1234.4)
    (record,) = await runs.raw()  # the same record, rewritten
    codes = [token[0] for token in record.split("|")[1:]]
    assert codes == ["f", "r", "c"]
    assert ",jU" in record  # 1234 ms in base 62
    fired, running, completed = await runs.events()
    exec_id = f"s@{sched}"
    assert fired == {
        "event": "fired", "scheduled_at": sched, "at": fired["at"], "late_ms": fired["at"] - sched,
        "execution_id": exec_id, "origin": "schedule",
    }  # fmt: skip
    assert fired["late_ms"] >= 5
    assert running == {"event": "running", "execution_id": exec_id, "attempt": 1,
                       "at": running["at"], "deliveries": 1}  # fmt: skip
    assert completed == {"event": "completed", "execution_id": exec_id, "attempt": 1,
                         "at": completed["at"], "duration_ms": 1234.0}  # fmt: skip
    assert fired["at"] <= running["at"] <= completed["at"] <= await runs.store.time_ms()


async def test_retries_timeouts_and_dead_letters_in_one_record(
    redis: Redis, settings: Settings
) -> None:
    runs = await Runs(redis, settings).setup()
    await runs.fire()
    first = await runs.take()
    await runs.start(first)
    await runs.fail(first, duration_ms=20.6, error_type="ValueError", error="bad | input, 100%")
    second = await runs.take()
    await runs.start(second, deliveries=2)
    await runs.fail(second, "retry", duration_ms=3, reason="later, please")
    third = await runs.take()
    await runs.start(third)
    await runs.bury(third, "timed_out", duration_ms=1000, error_type="TimeoutError",
                    error="timed out after 1s", reason="timeout")  # fmt: skip
    (record,) = await runs.raw()
    assert [t[0] for t in record.split("|")[1:]] == ["f", "r", "F", "r", "R", "r", "T", "D"]
    events = await runs.events()
    exec_id = events[0]["execution_id"]
    assert without_times(events) == [
        {"event": "fired", "execution_id": exec_id, "origin": "schedule"},
        {"event": "running", "execution_id": exec_id, "attempt": 1, "deliveries": 1},
        {"event": "failed", "execution_id": exec_id, "attempt": 1, "retry_in_ms": 0,
         "duration_ms": 21.0, "error_type": "ValueError", "error": "bad | input, 100%"},
        {"event": "running", "execution_id": exec_id, "attempt": 2, "deliveries": 2},
        {"event": "retried", "execution_id": exec_id, "attempt": 2, "retry_in_ms": 0,
         "duration_ms": 3.0, "reason": "later, please"},
        {"event": "running", "execution_id": exec_id, "attempt": 3, "deliveries": 1},
        {"event": "timed_out", "execution_id": exec_id, "attempt": 3, "duration_ms": 1000.0,
         "reason": "timeout", "error_type": "TimeoutError", "error": "timed out after 1s"},
        {"event": "dead", "execution_id": exec_id, "attempt": 3, "duration_ms": 1000.0,
         "reason": "timeout", "error_type": "TimeoutError", "error": "timed out after 1s"},
    ]  # fmt: skip
    times = [e["at"] for e in events]
    assert times == sorted(times)


async def test_cancelled_and_superseded_runs(redis: Redis, settings: Settings) -> None:
    runs = await Runs(redis, settings).setup(overlap="cancel_previous")
    await runs.fire()
    first = await runs.take()
    await runs.start(first)
    await runs.end(first, "cancelled", duration_ms=7, reason="cancel_previous")
    await runs.fire()  # waits in the stream: cancelled by an operator
    waiting = (await runs.raw())[0]
    exec_id = f"s@{from_b62(waiting.split('|')[0])}"
    await runs.client.cancel(exec_id)
    await runs.fire()  # started after a newer run replaced it: superseded
    old = await runs.take()
    await runs.fire()
    await runs.start(old)
    records = await runs.raw()
    assert len(records) == 4  # one a run, cancel_requested with the fire that asked for it
    events = await runs.events()
    by_run: dict[str, list[dict[str, Any]]] = {}
    for event in events:  # (events of one millisecond may come in either order across runs)
        by_run.setdefault(event["execution_id"], []).append(event)
    names = [[(e["event"], e.get("reason")) for e in run] for run in by_run.values()]
    assert names == [
        [("fired", None), ("running", None), ("cancelled", "cancel_previous")],
        [("fired", None), ("cancelled", "cancelled")],
        [("fired", None), ("cancelled", "superseded")],
        [("cancel_requested", None), ("fired", None)],
    ]  # fmt: skip
    superseded = by_run[old[1]["execution_id"]][-1]
    requested, fired = list(by_run.values())[-1]
    assert superseded["by"] == requested["execution_id"]
    assert requested["cancelled"] == superseded["execution_id"]
    assert requested["at"] == fired["at"]


async def test_skips_misfires_buffers_and_releases(redis: Redis, settings: Settings) -> None:
    runs = await Runs(redis, settings).setup(overlap="buffer_one")
    await runs.fire()
    first = await runs.take()
    await runs.start(first)
    assert await runs.fire() == 3  # buffered
    assert await runs.fire() == 2  # skipped: buffer full
    await runs.end(first, duration_ms=5)  # releases the buffered one
    events = await runs.events()
    buffered = next(e for e in events if e["event"] == "buffered")
    assert buffered["policy"] == "buffer_one"
    assert buffered["origin"] == "schedule"
    skipped = next(e for e in events if e["event"] == "skipped")
    assert (skipped["reason"], skipped["policy"]) == ("buffer_full", "buffer_one")
    released = next(e for e in events if e["event"] == "released")
    assert released["execution_id"] == buffered["execution_id"]
    assert released["after"] == first[1]["execution_id"]
    assert released["scheduled_at"] == buffered["scheduled_at"]
    assert "reason" not in released
    records = await runs.raw()
    assert len(records) == 3  # the first run, the skip, the buffered run with its release
    assert [t[0] for t in records[0].split("|")[1:]] == ["s"]
    assert [t[0] for t in records[1].split("|")[1:]] == ["b", "e"]  # updated below the head


async def test_misfire_records(redis: Redis, settings: Settings) -> None:
    runs = await Runs(redis, settings).setup()
    now = await runs.store.time_ms()
    version = str(await redis.hget(runs.keys.schedule("s"), "version"))
    items = []
    for i, action in enumerate(("skip", "limit", "misfire")):
        sched = now - 60_000 * (3 - i)
        await redis.zadd(runs.keys.schedules, {"s": sched})
        items = [FireItem("s", version, sched, sched, sched + 1, action, missed=40 + i)]
        assert await runs.firing.fire(runs.lease, items) == [4 if action != "misfire" else 1]
    events = await runs.events()
    assert without_times(events) == [
        {"event": "misfired", "policy": "skip", "missed": 40},
        {"event": "misfired", "policy": "catch_up", "missed": 41, "reason": "catch_up_limit"},
        {"event": "fired", "execution_id": events[2]["execution_id"], "origin": "misfire",
         "missed": 42},
    ]  # fmt: skip
    assert events[0]["late_ms"] >= 180_000


def fired_json(at: int, sched: int) -> bytes:
    return orjson.dumps({"event": "fired", "scheduled_at": sched, "at": at, "late_ms": at - sched,
                         "execution_id": f"s@{sched}", "origin": "schedule"})  # fmt: skip


async def test_old_json_events_and_records_read_and_page_together(
    redis: Redis, settings: Settings
) -> None:
    """A deployment upgraded in place: the events the previous release pushed stay readable
    beneath (and among) the new records, in time order, and cursors page across both."""
    runs = await Runs(redis, settings).setup()
    key = runs.keys.history("s")
    now = await runs.store.time_ms()
    old_sched = now - 10_000
    old = [
        orjson.dumps({"event": "completed", "execution_id": f"s@{old_sched}", "attempt": 1,
                      "at": old_sched + 50, "duration_ms": 40.5}),
        orjson.dumps({"event": "running", "execution_id": f"s@{old_sched}", "attempt": 1,
                      "at": old_sched + 8, "worker": WORKER, "deliveries": 1}),
        fired_json(old_sched + 5, old_sched),
        fired_json(old_sched - 60_000 + 5, old_sched - 60_000),
    ]  # fmt: skip
    await redis.rpush(key, *old)
    for _ in range(3):
        await runs.fire()
        entry = await runs.take()
        await runs.start(entry)
        await runs.end(entry, duration_ms=1)
    page = await runs.client.history("s", limit=100)
    assert len(page) == 13
    times = [e.at for e in page]
    assert times == sorted(times, reverse=True)
    assert page.items[-3].extra == {"worker": WORKER, "deliveries": 1}  # as stored
    assert page.items[-4].duration_ms == 40.5
    seen, cursor = [], None
    while True:
        part = await runs.client.history("s", limit=2, cursor=cursor)
        seen += [(e.event, e.at, e.execution_id) for e in part]
        if part.cursor is None:
            break
        cursor = part.cursor
    assert seen == [(e.event, e.at, e.execution_id) for e in page]
    fired = await runs.client.history("s", status="fired", limit=100)
    assert len(fired) == 5
    # The worker of a run fired by the previous release finds no record of it: a new one.
    sched = now - 100_000
    await redis.lpush(key, fired_json(sched + 1, sched))
    await runs.queues.start("default", WORKER, [("0-1", f"s@{sched}", "s", 1, "")])
    head = (await runs.raw())[0]
    assert head.startswith(f"{int_b62(sched)}|r")


async def test_the_cap_counts_runs(redis: Redis, settings: Settings) -> None:
    runs = await Runs(redis, settings.model_copy(update={"history_limit": 3})).setup()
    for _ in range(5):
        await runs.fire()
        entry = await runs.take()
        await runs.start(entry)
        await runs.end(entry, duration_ms=2)
    assert await redis.llen(runs.keys.history("s")) == 3
    page = await runs.client.history("s", limit=100)
    assert [e.event for e in page] == ["completed", "running", "fired"] * 3


async def test_retention_trims_records_by_their_newest_event(
    redis: Redis, settings: Settings
) -> None:
    runs = await Runs(redis, settings).setup()
    key = runs.keys.history("s")
    now = await runs.store.time_ms()
    day = 86_400_000
    ended_long_ago = f"{int_b62(now - 40 * day)}|f5|r3|c2,1"
    still_running = f"{int_b62(now - 40 * day)}|f5|r{int_b62(39 * day)}"  # its newest: 1 day ago
    await redis.rpush(key, still_running, ended_long_ago)
    await redis.rpush(key, fired_json(now - 41 * day, now - 41 * day))
    caller = ScriptCaller(redis)
    removed = await caller.call("trim_history", [key], [now - 30 * day])
    assert removed == 2
    assert await runs.raw() == [still_running]


@pytest.mark.slow
async def test_a_hundred_runs_cost_less_than_a_kilobyte(redis: Redis, settings: Settings) -> None:
    """The budget of docs/keys.md: a schedule that has run 100 times, default settings."""
    runs = await Runs(redis, settings, sid="nightly-report-0001").setup()
    for _ in range(100):
        await runs.fire()
        entry = await runs.take()
        await runs.start(entry)
        await runs.end(entry, duration_ms=0.4)  # (what a run takes here: no time)
    k = runs.keys
    history = int(await redis.memory_usage(k.history(runs.sid), samples=0) or 0)
    hash_bytes = int(await redis.memory_usage(k.schedule(runs.sid), samples=0) or 0)
    assert await redis.llen(k.history(runs.sid)) == settings.history_limit == 15
    # Redis 7.0: 552 B (Valkey 9: ~400 B); the index entry adds ~100 B (docs/keys.md).
    assert history <= 560, history
    assert hash_bytes + history + INDEX_ENTRY <= 1024, (hash_bytes, history)
    events = stored_events(await runs.raw(), runs.sid)
    assert len(events) == 45  # fired, running, completed: the last 15 runs


def test_an_occurrence_merged_into_a_debounce_window_names_the_window() -> None:
    # zz = 2205; the window's run is 5 ms older (its scheduled ms less this one's: -5).
    assert expand_record("zz|s3,debounced,,manual,,-5", "s") == [
        {"event": "skipped", "reason": "debounced", "into": "s@2200", "scheduled_at": 2205,
         "at": 2208, "late_ms": 3, "execution_id": "s@2205", "origin": "manual"},
    ]  # fmt: skip


def test_records_it_cannot_read_whole_still_give_what_they_can() -> None:
    assert expand_record("zz|f1|q5,new|r2", "s") == [
        {"event": "fired", "scheduled_at": 2205, "at": 2206, "late_ms": 1,
         "execution_id": "s@2205", "origin": "schedule"},
        {"event": "running", "execution_id": "s@2205", "attempt": 1, "at": 2207, "deliveries": 1},
    ]  # fmt: skip
    # (a newer rsched's token 'q' is left out, its time kept)
    assert [e["event"] for e in expand_record("zz|f1|r!|c1", "s")] == ["fired"]
    assert stored_events(["not json", "[1]", "zz|f1"], "s") == [
        {"event": "fired", "scheduled_at": 2205, "at": 2206, "late_ms": 1,
         "execution_id": "s@2205", "origin": "schedule"},
        {"event": "unreadable", "raw": "not json"},
        [1],
    ]  # fmt: skip


async def test_error_text_is_escaped_and_cut_whole(redis: Redis, settings: Settings) -> None:
    runs = await Runs(redis, settings).setup()
    await runs.fire()
    entry = await runs.take()
    await runs.start(entry)
    message = "a|b,c%d " + "é" * 150  # 308 bytes of UTF-8
    await runs.bury(entry, duration_ms=1, error_type="ValueError", error=message)
    (record,) = await runs.raw()
    assert record.count("|") == 3  # fired, running, dead: the text's own are escaped
    assert len(record.encode()) < 300
    dead = (await runs.events())[-1]
    assert dead["event"] == "dead"
    assert dead["error"] == message[: len(dead["error"])]
    assert len(dead["error"].encode()) <= 200
    assert dead["error"].endswith("é")  # cut between two characters, not inside one


async def test_worker_scripts_leave_a_history_of_another_type_alone(
    redis: Redis, settings: Settings
) -> None:
    """The job runs and is acknowledged; nothing is written for its schedule (its history
    someone overwrote, nor its run marker)."""
    runs = await Runs(redis, settings).setup()
    k = runs.keys
    assert await runs.fire() == Code.FIRED
    eid, f = await runs.take()
    await redis.delete(k.history(runs.sid))
    await redis.set(k.history(runs.sid), "not a list")
    item = (eid, f["execution_id"], runs.sid, 1, fragment({"worker": WORKER, "deliveries": 1}))
    assert await runs.queues.start("default", WORKER, [item]) == [Code.OK]
    marker = await redis.hgetall(k.schedule(runs.sid))
    assert marker["run"] == f["execution_id"]
    assert "run_state" not in marker
    await runs.end((eid, f))
    assert await redis.get(k.history(runs.sid)) == "not a list"
    assert await redis.hgetall(k.schedule(runs.sid)) == marker
