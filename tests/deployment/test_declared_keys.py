"""Every key a script touches is one of its KEYS: a cluster decides ASK / TRYAGAIN during a slot's
migration from the declared keys only (docs/scaling.md).

The scripts run here with a prelude that wraps redis.call / redis.pcall: a key argument not in
KEYS fails the call with UNDECLARED, which every test records and checks. They are driven
through the real SDK, scheduler, worker and retention paths. On a single server fire.lua builds
its items' names from prefixes by design (no slot moves there): its undeclared keys are checked
on the cluster, where it declares them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ResponseError

import rsched
from rsched._core.codes import Code
from rsched._core.fire_plan import OVERLAPS, FireItem, FireSpec
from rsched._core.keys import Keys
from rsched._core.schedule import Schedule
from rsched._core.settings import SchedulerSettings, Settings
from rsched._redis import scripts
from rsched._redis.connection import connect
from rsched._redis.scripts import ScriptCaller
from rsched._scheduler.retention import Retention
from rsched._scheduler.scheduler import Scheduler
from rsched._store.job_logs import RunNews
from rsched._store.queues import QueueStore
from rsched._store.schedules import ScheduleStore
from tests.support.history import int_b62
from tests.support.leading import firing, leases
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings
from tests.support.workload import (
    calendars_tour,
    calendars_tour_end,
    deadlines_and_failures,
    excluded,
    flows_ended,
    flows_tour,
    labelled_runs,
    labels_tour,
    limited_task,
    limits_tour,
    ok_and_failing_tasks,
    park_and_bring_back,
    paused,
    some_schedules,
    stalled_flow,
)

pytestmark = pytest.mark.cluster

HOUR_MS = 3_600_000

# Shadows `redis` for the script after it: a call's key arguments (the first; every argument of
# DEL and EXISTS; the streams of XREADGROUP; none of TIME and PUBLISH) must be in KEYS.
_PRELUDE = """
local redis = (function(real, lenient)
  local declared = {}
  for _, key in ipairs(KEYS) do declared[key] = true end
  local NO_KEY = {TIME = true, PUBLISH = true}
  local ALL_KEYS = {DEL = true, EXISTS = true}
  local function check(cmd, ...)
    if lenient then return end
    local name, args = string.upper(cmd), {...}
    local keys = {args[1]}
    if NO_KEY[name] then return end
    if ALL_KEYS[name] then keys = args end
    if name == 'XREADGROUP' then
      for i = 1, #args do
        if string.upper(args[i]) == 'STREAMS' then
          keys = {}
          for j = i + 1, i + (#args - i) / 2 do keys[#keys + 1] = args[j] end
        end
      end
    end
    for _, key in ipairs(keys) do
      if not declared[key] then
        error({err = 'UNDECLARED ' .. name .. ' ' .. tostring(key)})
      end
    end
  end
  return setmetatable({
    call = function(cmd, ...) check(cmd, ...) return real.call(cmd, ...) end,
    pcall = function(cmd, ...) check(cmd, ...) return real.pcall(cmd, ...) end,
  }, {__index = real})
end)(redis, LENIENT)
"""


class Strict:
    """What the strict scripts saw: the scripts called, and every undeclared key."""

    def __init__(self) -> None:
        self.ran: set[str] = set()
        self.undeclared: list[str] = []


@pytest.fixture
def strict(monkeypatch: pytest.MonkeyPatch, topology: str) -> Iterator[Strict]:
    seen = Strict()
    original = scripts.source

    def source(name: str) -> str:
        shebang, _, body = original(name).partition("\n")
        # fire.lua with prefixes only (5 KEYS, then any label index keys {p}:runs:...) is the
        # single server's layout.
        single = "(#KEYS <= 5 or string.find(KEYS[6], '}:runs:', 1, true) ~= nil)"
        lenient = single if name == "fire" and topology == "single" else "false"
        return f"{shebang}\n{_PRELUDE.replace('LENIENT', lenient)}\n{body}"

    monkeypatch.setattr(scripts, "source", source)
    for method in ("call", "call_packed", "call_read"):
        monkeypatch.setattr(ScriptCaller, method, _recording(getattr(ScriptCaller, method), seen))
    read_response = AbstractConnection.read_response

    async def reading(self: AbstractConnection, *args: Any, **kwargs: Any) -> Any:
        try:
            return await read_response(self, *args, **kwargs)
        except ResponseError as exc:
            if "UNDECLARED" in str(exc):
                seen.undeclared.append(str(exc))
            raise

    monkeypatch.setattr(AbstractConnection, "read_response", reading)
    yield seen
    assert seen.undeclared == []


def _recording(method: Any, seen: Strict) -> Any:
    async def recording(self: ScriptCaller, name: str, *args: Any, **kwargs: Any) -> Any:
        seen.ran.add(name)
        return await method(self, name, *args, **kwargs)

    return recording


async def _lease(store: ScheduleStore) -> str:
    lease, _ = await leases(store).acquire("test-owner", 60_000)
    assert lease is not None
    return lease


async def _item(store: ScheduleStore, sid: str, action: str, missed: int = 0) -> FireItem:
    """An occurrence of ``sid`` due 10 ms ago (the index moved to it), to fire as ``action``."""
    now = await store.time_ms()
    await store.redis.zadd(store.keys.schedules, {sid: now - 10})
    (fields,) = await store.fields([sid])
    spec = FireSpec.from_hash(fields)
    return FireItem(sid, fields["version"], now - 10, now - 10, now + HOUR_MS, action, missed, spec)


async def _fire(store: ScheduleStore, lease: str, items: Sequence[FireItem]) -> list[int]:
    codes = await firing(store).fire(lease, items)
    assert codes is not None
    return codes


async def test_fire_declares_the_keys_of_every_policy_and_action(
    redis: Redis, settings: Settings, strict: Strict
) -> None:
    store = ScheduleStore(redis, Keys(settings.prefix), history_limit=100)
    lease = await _lease(store)
    for overlap, debounce in [(o, d) for o in sorted(OVERLAPS) for d in (None, 3600.0)]:
        sid = f"s-{overlap}" if debounce is None else f"d-{overlap}"
        spec = Schedule(id=sid, task="t", every=3600, overlap=overlap, queue=f"q-{overlap}")
        # A debounce puts the jobs in the queue's delayed set, and merges what piles up; its
        # labels index what is skipped or merged (the label index keys the fire declares).
        labels = {} if debounce is None else {"tour": "f", "d": overlap}
        await store.save(spec.model_copy(update={"debounce": debounce, "labels": labels}))
        # catch_up: queued behind one another (pending) unless overlap=allow
        await _fire(store, lease, [await _item(store, sid, "catch_up", 1)])
        await anyio.sleep(0.003)  # another occurrence (its execution id is its ms)
        await _fire(store, lease, [await _item(store, sid, "catch_up", 1)])
        # on time behind a live run: skipped, buffered, fired beside or cancelling it
        await _fire(store, lease, [await _item(store, sid, "fire")])
        # behind a lost run (marker expired): what is pending is released first
        await redis.hset(store.keys.schedule(sid), "run_until", "1")
        await _fire(store, lease, [await _item(store, sid, "fire")])
        for action, missed in (("misfire", 2), ("skip", 1), ("limit", 3)):
            await _fire(store, lease, [await _item(store, sid, action, missed)])
    # A batch of several schedules and policies, then stale items: removed by hand (the index
    # heals) or paused.
    items = [
        await _item(store, f"{k}-{overlap}", "fire") for overlap in sorted(OVERLAPS) for k in "sd"
    ]
    assert Code.FIRED in await _fire(store, lease, items)
    await redis.delete(store.keys.schedule("s-allow"))
    await store.pause("s-skip", None)
    stale = [await _item(store, "s-skip", "fire")]
    stale.append(stale[0]._replace(schedule_id="s-allow"))
    assert await _fire(store, lease, stale) == [Code.STALE, Code.STALE]
    assert await redis.zscore(store.keys.schedules, "s-allow") is None
    assert await redis.xlen(store.keys.run_label("tour=f")) > 0
    assert "fire" in strict.ran


async def test_the_prelude_refuses_an_undeclared_key(
    redis: Redis, settings: Settings, strict: Strict, topology: str
) -> None:
    if topology == "single":
        pytest.skip("fire.lua names no item keys on a single server, by design")
    store = ScheduleStore(redis, Keys(settings.prefix), history_limit=100)
    await store.save(Schedule(id="a", task="t", every=3600))
    lease = await _lease(store)
    fires = firing(store)
    fires.declare_keys = False  # the single server's layout: prefixes only
    with pytest.raises(ResponseError, match="UNDECLARED"):
        await fires.fire(lease, [await _item(store, "a", "fire")])
    assert strict.undeclared
    strict.undeclared.clear()


async def test_every_script_declares_every_key_it_touches(
    redis: Redis, settings: Settings, strict: Strict
) -> None:
    fast = SchedulerSettings(lease_ttl_ms=1000, lease_renew_ms=200, max_idle_ms=200)
    settings = fast_settings(settings.model_copy(update={"scheduler": fast}))
    keys = Keys(settings.prefix)
    store, queues = ScheduleStore(redis, keys, history_limit=100), QueueStore(redis, keys)
    worker = rsched.Worker(settings=settings, queues=["default", "gated"])
    ran: list[str] = []
    gate = anyio.Event()
    ok_and_failing_tasks(worker, ran)
    limited: list[str] = []
    limited_task(worker, limited)

    @worker.task("t.gated")
    async def gated(job: rsched.Job) -> None:
        ran.append(job.execution_id)
        await gate.wait()

    async with rsched.Client.from_settings(settings) as client:
        await some_schedules(client)
        await deadlines_and_failures(client)
        await calendars_tour(client)
        await labels_tour(client)
        flows = await flows_tour(client)
        # A run that ends dead releases the occurrence waiting behind it.
        await client.add({"id": "d", "task": "t.fail", "every": 3600, "overlap": "buffer_one"})
        await client.trigger("d")
        await client.trigger("d")
        # cancel_previous: the first job is superseded before it starts (start.lua).
        await client.add({"id": "c", "task": "t.ok", "every": 3600, "overlap": "cancel_previous"})
        await client.trigger("c")
        await client.trigger("c")
        # A cancelled job releases what waits; one whose spec moved it to another queue leaves
        # the release to the schedule's next fire.
        await client.add(
            {"id": "x", "task": "t.ok", "every": 3600, "overlap": "buffer_all", "queue": "idle"}
        )
        first = (await client.trigger("x")).execution_id
        await client.trigger("x")
        await client.cancel(first)
        await client.update("x", task="t.gated", queue="gated")
        await client.trigger("x")
        await client.cancel(str(await redis.hget(keys.schedule("x"), "run")))
        await client.trigger("x")
        await client.enqueue("t.fail", max_retries=1)
        for _ in range(3):  # one at a time: two wait aside, then resume
            await client.enqueue("t.limited", {"n": 1})
        await client.enqueue("t.ok", delay=0.2)
        for _ in range(2):  # a debounce window opened, then joined
            await client.enqueue("t.ok", debounce_key="burst", debounce=0.05)
        await client.add({"id": "deb", "task": "t.ok", "every": 3600, "debounce": 0.05})
        await client.trigger("deb")
        await client.trigger("deb")
        now = await client.server_time()
        await client.backfill("deb", now - timedelta(hours=3), now)
        queued = await client.enqueue("t.ok", queue="idle")
        await client.cancel(queued.execution_id)
        # A lost run's backlog, released by the leader's sweep.
        await client.add(
            {"id": "r", "task": "t.ok", "every": 3600, "overlap": "buffer_all", "queue": "idle"}
        )
        await client.trigger("r")
        await client.trigger("r")
        await redis.hset(keys.schedule("r"), "run_until", "1")
        await redis.zadd(keys.backlogs, {"r": 1})
        lease = await _lease(store)
        await park_and_bring_back(store, lease)
        assert await firing(store).release_lost(lease) == 1
        assert await leases(store).renew(lease, 1000)
        assert await leases(store).release(lease)
        scheduler = Scheduler(connect(settings), settings)
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(scheduler.run)
                await tg.start(worker.run)
                await eventually(lambda: _has_dead(client))
                await eventually(lambda: len(ran) >= 8)
                await eventually(lambda: len(limited) == 3)
                await eventually(lambda: "fire" in strict.ran)  # not only jobs of the client's
                await eventually(lambda: "expire" in strict.ran)
                await eventually(lambda: paused(client, "pf"))
                await eventually(lambda: excluded(client))
                await eventually(lambda: labelled_runs(client))
                await eventually(lambda: flows_ended(client, flows))
                # the occurrence the end on "idle" left pending, released into "gated"
                await eventually(lambda: any(e.startswith("x@") for e in ran))
                gate.set()
                scheduler.stop()
                worker.stop()
        finally:
            await scheduler.redis.aclose()
        await client.job(ran[0])
        listed = await client.list(limit=1)
        await client.list(limit=1, cursor=listed.cursor)
        await client.requeue(task="t.fail")
        await client.remove("a")
        await calendars_tour_end(client)
    old = f"{int_b62(await store.time_ms() - 400 * 86_400_000)}|f5|c2,1"
    await redis.rpush(keys.history("m1"), old)
    async with rsched.Client.from_settings(settings) as client:
        await stalled_flow(client, redis, keys)
    swept = await Retention(redis, settings, lambda: True).sweep()
    assert swept.history >= 1
    assert swept.flows_repaired == 1
    await queues.reclaim([(("default", "normal"), "0-0")], "nobody", 0, 10)
    await queues.hand_back("default", "nobody", ["0-1"], 0)
    await queues.heartbeat("default", "nobody", ["0-1"])
    await queues.write_news([RunNews("j", 1, "t", (0.5, "", 1), [b'[1,"info","m"]'])], 60_000)
    async with rsched.Client.from_settings(settings) as client:
        await limits_tour(client, queues)
    assert set(scripts.names()) - strict.ran == set(), "scripts this test never ran"


async def _has_dead(client: rsched.Client) -> bool:
    return bool((await client.dead_letters()).items)
