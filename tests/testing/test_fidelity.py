"""fakeredis runs rsched's scripts as a real server does: the same tour of the engine (schedules,
policies, retries, dead letters, limits, flows, calendars, debounce, deadlines, operators'
writes) on a TestEnv over fakeredis and over the private server of each kind, compared script
by script (every reply, in order) and key by key (every key's content at the end)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import lupa
import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched._redis import scripts
from rsched._redis.scripts import ScriptCaller, VirtualClock
from rsched.testing import TestEnv

START = datetime(2030, 3, 1, 8, tzinfo=UTC)
# What differs between two runs of the same tour whatever the server: random ids (request ids,
# enqueued jobs' execution ids, the lease's owner) and measured durations.
_RANDOM = (
    (re.compile(r"[0-9a-f]{32}"), "<hex>"),
    (re.compile(r"rsched\.testing:[0-9a-f]{6}"), "rsched.testing:<owner>"),
    (re.compile(r'("duration_ms":|"dur":)\s*[0-9.]+'), r"\1 <ms>"),
    (re.compile(r'("tour-worker",)[0-9.]+,'), r"\1<ms>,"),  # a run record's duration
    # A history record's run outcome: its time (the end less the duration) and duration.
    (re.compile(r"\|([a-z])-?[0-9A-Za-z]+,[0-9A-Za-z]+"), r"|\1<d>"),
    # The same of a retried, failed, timed-out or dead attempt (its duration can be 0 ms).
    (re.compile(r"\|([CFTRDWE])-?[0-9A-Za-z]+,[0-9A-Za-z]*"), r"|\1<d>"),
    (re.compile(r"\d+\.\d+"), "<float>"),
    # A run's start is its end less its duration; a lease's age and time left its key's TTL.
    (re.compile(r"started_at=datetime\.datetime\([^)]*\)"), "started_at=<t>"),
    (re.compile(r"'lease_(left|age)_ms': \d+"), r"'lease_\1_ms': <ms>"),
    # Redis's cjson writes "/" as "\/", fakeredis's as "/": the same JSON (docs/testing.md).
    (re.compile(r"\\/"), "/"),
)

_DURATIONS = ("duration_ms", "dur")

Calls = list[tuple[str, Any]]


def normal(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, str):
        if value[:1] in ("[", "{"):
            # JSON from cjson: an object's keys come in the order of the Lua table's slots,
            # which differs between Lua builds (Redis's, Valkey's, lupa's).
            try:
                return normal(orjson.loads(value))
            except orjson.JSONDecodeError:
                pass
        for pattern, replacement in _RANDOM:
            value = pattern.sub(replacement, value)
        return value
    if isinstance(value, list | tuple):
        if len(value) > 4 and value[3] == "tour-worker":  # a run record: its duration
            value = [*value[:4], "<ms>", *value[5:]]
        return [normal(v) for v in value]
    if isinstance(value, dict):
        out = {normal(k): "<ms>" if k in _DURATIONS else normal(v) for k, v in value.items()}
        job = out.get("job")
        if isinstance(job, list):  # a dead letter's job: its fields in the order of pairs()
            out["job"] = dict(zip(job[::2], job[1::2], strict=True))
        return out
    return value


def tour_worker() -> rsched.Worker:
    worker = rsched.Worker(["default", "mail"])
    worker.consumer = "tour-worker"  # the same name on both servers

    @worker.task("ok")
    async def ok(job: rsched.Job) -> dict[str, int]:
        job.log("ran")
        return {"n": job.attempt}

    @worker.task("flaky")
    async def flaky(job: rsched.Job) -> None:
        if job.attempt < 2:
            raise rsched.Retry(delay_s=30)
        raise ValueError("boom")

    @worker.task("limited", limits=[rsched.Limit("customer:{c}", concurrency=1)])
    async def limited(job: rsched.Job) -> None:
        pass

    return worker


async def tour(env: TestEnv) -> list[Any]:
    """The engine's tour; returns what the client read on the way."""
    client = env.client
    out: list[Any] = []
    await client.set_calendar("holidays", dates=["2030-03-02"])
    await client.add(rsched.Schedule(id="nightly", task="ok", cron="0 2 * * *",
                                     timezone="Europe/Rome", exclude=["holidays"]))  # fmt: skip
    await client.add_many([
        {"id": f"m{i}", "task": "ok", "every": 3600, "overlap": "buffer_one"} for i in range(3)
    ])  # fmt: skip
    await client.upsert_many([{"id": "m2", "task": "ok", "every": 1800}])
    await client.add({"id": "flaky", "task": "flaky", "every": 86_400, "max_retries": 1})
    await client.add({"id": "gone", "task": "ok", "every": 60})
    await client.pause("m0")
    await client.resume("m0")
    await client.update("m1", every=7200)
    await client.trigger("m1")
    await client.backfill("m2", START - timedelta(hours=3), START)
    await client.remove("gone")
    await client.enqueue("ok", {"x": 1}, queue="mail", delay=90, execution_id="mail-1")
    await client.enqueue("ok", {"d": 1}, debounce_key="k", debounce=60)
    await client.enqueue("ok", {"d": 2}, debounce_key="k", debounce=60)
    await client.enqueue("ok", {}, start_deadline=5, execution_id="late-one")
    await client.enqueue("limited", {"c": "a"}, execution_id="limited-1")
    await client.enqueue("limited", {"c": "a"}, execution_id="limited-2")
    await client.enqueue("nobody", {}, execution_id="nobody-1")
    await client.run_flow(
        rsched.chain(rsched.step("ok", {"s": 1}), rsched.step("ok", {"s": 2})), flow_id="f1"
    )
    await client.enqueue("ok", {}, delay=3600, execution_id="to-cancel")
    out.append(await client.cancel("to-cancel"))
    await client.run_flow(rsched.chain(rsched.step("ok"), rsched.step("ok")), flow_id="f2",
                          queue="elsewhere")  # fmt: skip
    out.append(await client.cancel_flow("f2"))
    out.append(await client.set_limit("customer:*", concurrency=1))
    out.append(await client.limits())
    out.append(await client.job("mail-1"))
    out.append(await client.select(task="ok"))
    out.append(await env.advance("2d"))
    dead = await client.dead_letters("default")
    out.append(dead)
    await client.requeue("default", [d.entry_id for d in dead.items if d.task == "nobody"])
    await client.purge("default", [d.entry_id for d in dead.items if d.task == "flaky"])
    out.append(await env.advance("1h"))
    out.append(await client.history("nightly"))
    out.append(await client.runs(limit=100))
    out.append([s.model_dump() for s in (await client.list()).items])
    out.append(await client.stats())
    return out


async def every_key(redis: Redis) -> dict[str, Any]:
    """Every key's content (read type by type), by name."""
    found: dict[str, Any] = {}
    for key in sorted([str(k) async for k in redis.scan_iter(count=1000)]):
        kind = await redis.type(key)
        if kind == "hash":
            found[key] = await redis.hgetall(key)
        elif kind == "zset":
            found[key] = await redis.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            found[key] = sorted(await redis.smembers(key))
        elif kind == "list":
            found[key] = await redis.lrange(key, 0, -1)
        elif kind == "string":
            found[key] = await redis.get(key)
        elif kind == "stream":
            found[key] = await redis.xrange(key)
    return found


def recording(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """Record the name and reply of every script call, in order."""
    calls: Calls = []
    # A call may go through another (a read-only one falls back to a plain one on a server
    # without EVALSHA_RO, as fakeredis; a packed one to a plain one when the script is not
    # loaded yet): one call, recorded once.
    depth = [0]

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        async def call(self: ScriptCaller, name: str, *args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            try:
                reply = await method(self, name, *args, **kwargs)
            finally:
                depth[0] -= 1
            if not depth[0]:
                calls.append((name, reply))
            return reply

        return call

    for name in ("call", "call_read", "call_packed"):
        monkeypatch.setattr(ScriptCaller, name, wrap(getattr(ScriptCaller, name)))
    return calls


async def run_tour(server: str, prefix: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    with monkeypatch.context() as patched:
        calls = recording(patched)
        async with TestEnv(tour_worker(), start=START, prefix=prefix, server=server) as env:
            read = await tour(env)
            keys = {k: v for k, v in (await every_key(env.redis)).items() if prefix in k}
    # The client writes' operation ids, kept per minute of the real clock: a run that spans a
    # minute's end keeps them in two keys.
    keys["ops"] = sorted(
        (normal(result) for key in [k for k in keys if ":ops:" in k]
         for result in keys.pop(key).values()),
        key=repr,
    )  # fmt: skip
    return calls, read, keys


def by_script(calls: Calls) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for name, reply in calls:
        out.setdefault(name, []).append(normal(reply))
    return out


async def test_fakeredis_runs_the_tour_as_the_server_does(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = await run_tour(redis_url, prefix, monkeypatch)
    fake = await run_tour("fake", prefix, monkeypatch)
    real_calls, fake_calls = by_script(real[0]), by_script(fake[0])
    assert sorted(fake_calls) == sorted(real_calls)
    for name, replies in real_calls.items():
        assert fake_calls[name] == replies, f"{name}: fakeredis replied otherwise"
    for fake_read, real_read in zip(fake[1], real[1], strict=True):
        assert normal(repr(fake_read)) == normal(repr(real_read))
    real_keys, fake_keys = normal(real[2]), normal(fake[2])
    assert sorted(fake_keys) == sorted(real_keys)
    for key, content in real_keys.items():
        assert fake_keys[key] == content, key
    # Every script a TestEnv runs is in the tour (those it never calls are a worker's or a
    # scheduler's between processes: heartbeat, reclaim, registry, parking, retention, a
    # deployment of several partitions; docs/testing.md).
    assert set(real_calls) == RUN_BY_A_TEST_ENV


RUN_BY_A_TEST_ENV = {
    "backfill", "calendar_write", "cancel", "complete", "dead", "debounce", "due", "enqueue",
    "every_id", "expire", "find_job", "fire", "flow_cancel", "flow_create", "flow_start",
    "job_log", "lease_acquire", "lease_release", "lease_renew", "limit_acquire", "limit_cancel",
    "limit_resume", "limit_set", "limits_read", "pause", "plan_fields", "promote",
    "read_hashes", "release_lost", "remove", "requeue", "resume", "retry", "start", "take",
    "trigger", "upsert", "upsert_many",
}  # fmt: skip


@pytest.mark.parametrize("name", scripts.names())
def test_every_script_compiles_in_fakeredis_lua(name: str) -> None:
    """fakeredis runs scripts with lupa's Lua 5.1, which refuses some text Redis takes (a
    ``[[`` inside a ``--[[`` comment)."""
    runtime = lupa.lua51.LuaRuntime(encoding=None)
    load: Callable[[bytes], Any] = runtime.eval(
        "function(s) local f, e = loadstring(s); return e end"
    )
    text = VirtualClock("{p}:virtual_clock", shebang=False).source(name)
    assert load(text.encode()) is None


@pytest.mark.parametrize("name", scripts.names())
def test_the_virtual_scripts_read_no_server_clock(name: str) -> None:
    code = [
        line
        for line in VirtualClock("{p}:virtual_clock").source(name).splitlines()
        if not line.lstrip().startswith("--")
    ]
    assert not [line for line in code if "rcall('TIME')" in line]
    assert not [line for line in code if "XADD" in line and "'*'" in line]


def test_production_scripts_are_untouched() -> None:
    for name in scripts.names():
        assert "virtual_clock" not in scripts.source(name)
