"""The engine benchmark: herd dispatch, steady-state lag, CPU, memory and the raw ceiling.

Every measurement runs against a private server (bench._servers) that is flushed between
runs, and a real ``rsched.Scheduler`` in its own process (bench._scheduler_proc) so that its
CPU time is its own. Times of fire come from the job stream entries themselves (``fired_at``
is Redis TIME inside the fire script), so the bench's own polling does not bias them.

``python -m bench.engine [--quick] [--repeat N] [--kind redis|valkey] [--profile]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from redis.asyncio import Redis

from bench._os import SchedReading, affinity, pin, proc_cpu_s, realtime
from bench._servers import BenchServer
from rsched._core.calendars import Calendar
from rsched._core.codes import Code
from rsched._core.fire_plan import FireItem, PlannedSpec, plan
from rsched._core.keys import Keys
from rsched._core.schedule import Schedule
from rsched._core.settings import SchedulerSettings, Settings
from rsched._redis.connection import connect
from rsched._redis.scripts import names as script_names
from rsched._redis.scripts import source
from rsched._store import parking
from rsched._store.calendars import CalendarStore
from rsched._store.firing import FiringStore
from rsched._store.leases import LeaseStore
from rsched._store.schedules import ScheduleStore

RESULTS_DIR = Path(__file__).resolve().parent / "results"
PREFIX = "bench"
CHUNK = 2_000
DAY_MS = 86_400_000
# Where bench schedules wait before a herd is set up: far enough ahead that none fires, near
# enough that the scheduler does not park them (rsched._store.parking: beyond 15 minutes),
# which would leave them where the bench's retime does not look.
SETUP_AHEAD_MS = 10 * 60_000
# A herd counts the commands that took this long or longer inside Redis (SLOWLOG).
SLOWLOG_US = 5_000
HOUR_MS = 3_600_000

# Reads (scheduled_at, fired_at - scheduled_at) pairs straight out of a job stream, so that 100k
# entries do not have to travel to Python field by field. Read-only.
#   KEYS[1] stream   ARGV[1] start id (inclusive '-' or exclusive '(id')   ARGV[2] count
#   returns {last id or '', sched, lag, sched, lag, ...}
LAGS_LUA = """
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', tonumber(ARGV[2]))
local out = {''}
for _, e in ipairs(entries) do
  out[1] = e[1]
  local f, s, at = e[2], nil, nil
  for i = 1, #f, 2 do
    if f[i] == 'scheduled_at' then s = tonumber(f[i + 1])
    elseif f[i] == 'fired_at' then at = tonumber(f[i + 1]) end
  end
  out[#out + 1] = s
  out[#out + 1] = at - s
end
return out
"""

# Moves schedules to a new next run (their index score, the only place the engine keeps it), as
# if time had passed; for setting up a herd. KEYS[1]: schedules zset.
#   ARGV: one next_ms per id, then the ids in the same order.
RETIME_LUA = """
local n = #ARGV / 2
for i = 1, n do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[n + i])
end
return n
"""

# The same Redis writes a fire does, with no checks, policy or history: per id one XADD of a
# job entry and one HSET + ZADD moving it on. The server-side floor of dispatching N jobs.
#   KEYS[1] schedules zset, KEYS[2] stream, then one hash per id; ARGV: ids, then sched, next
RAW_FIRE_LUA = """
local n = #KEYS - 2
local sched, nxt = ARGV[n + 1], ARGV[n + 2]
local t = redis.call('TIME')
local at = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
for i = 1, n do
  local sid = ARGV[i]
  redis.call('XADD', KEYS[2], '*', 'execution_id', sid .. '@' .. sched, 'schedule_id', sid,
             'task', 'bench.task', 'payload', '{}', 'scheduled_at', sched, 'fired_at', at,
             'attempt', '1', 'generation', '1', 'origin', 'schedule', 'opts', '{}')
  redis.call('HSET', KEYS[i + 2], 'next_run', nxt, 'last_run', sched)
  redis.call('ZADD', KEYS[1], nxt, sid)
end
return n
"""


# --- small helpers ----------------------------------------------------------------------------


def pct(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (0 when empty)."""
    if not sorted_values:
        return 0.0
    return float(sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))])


def machine() -> dict[str, Any]:
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [title]
    for n, row in enumerate(cells):
        lines.append(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# --- a bench run's Redis side -----------------------------------------------------------------


async def read_slowlog(node: Redis) -> list[tuple[int, str, int]]:
    """(µs, command, unix time s) of each SLOWLOG entry since the last reset, oldest first;
    a script by its name."""
    entries = await node.execute_command("SLOWLOG", "GET", "10000")  # type: ignore[no-untyped-call]
    names = {hashlib.sha1(source(n).encode()).hexdigest(): n for n in script_names()}
    out = []
    for entry in entries:
        args = [str(a) for a in entry[3]]
        name = args[0].upper()
        if name == "EVALSHA" and len(args) > 1:
            name = f"EVALSHA {names.get(args[1], args[1][:8])}"
        out.append((int(entry[2]), name, int(entry[1])))
    return out[::-1]


@dataclass
class Ctx:
    server: BenchServer
    redis: Redis
    keys: Keys
    store: ScheduleStore
    # The server holding the keys, for what a server answers for itself (stats, SLOWLOG,
    # FLUSHALL): ``redis`` itself, or on a cluster a plain client of the keys' primary.
    node: Redis
    profile_dir: Path | None = None
    metrics: bool = False  # the scheduler serves /metrics (counting on)
    exclude: bool = False  # every herd schedule names an exclusion calendar
    log_dir: Path = field(default_factory=lambda: RESULTS_DIR)

    @classmethod
    def new(
        cls, server: BenchServer, redis: Redis, profile_dir: Path | None, node: Redis | None = None
    ) -> Ctx:
        keys = Keys(PREFIX)
        store = ScheduleStore(redis, keys)
        return cls(server, redis, keys, store, node or redis, profile_dir)

    async def reset(self) -> None:
        # SYNC: Valkey frees a plain FLUSHALL lazily, which would skew the next memory reading.
        await self.node.execute_command("FLUSHALL", "SYNC")  # type: ignore[no-untyped-call]
        await self.node.config_resetstat()

    async def now_ms(self) -> int:
        return await self.store.time_ms()

    async def create(
        self,
        ids: Sequence[str],
        spec: Callable[[int], dict[str, str]],
        next_ms: Callable[[int], int],
        created_ms: int,
        *,
        park: bool = False,
    ) -> float:
        """Write schedules through upsert.lua, pipelined; returns the seconds it took. They go
        to the index; with ``park``, those due more than 15 minutes ahead go to their parked
        buckets, as the SDK's writes put them."""
        started = time.perf_counter()
        upsert = self.store.script("upsert")
        await self.store.ensure_loaded(["upsert"])  # a cluster pipeline does not load it
        k = self.keys
        park_after = parking.PARK_AFTER_MS if park else ""
        for start in range(0, len(ids), CHUNK):
            async with self.redis.pipeline(transaction=False) as pipe:
                for i in range(start, min(start + CHUNK, len(ids))):
                    sid = ids[i]
                    flat = [v for pair in spec(i).items() for v in pair]
                    op_key, op_id = k.new_op()
                    keys = [
                        k.schedules,
                        k.schedule(sid),
                        k.pending(sid),
                        k.queues,
                        op_key,
                        k.parked_of(sid),
                        k.parked,
                        k.audit,
                        k.specs(sid),
                    ]
                    args: list[str | int] = [
                        sid, "upsert", "", str(next_ms(i)), "0", "default", k.wake,
                        op_id, created_ms, park_after, self.store.audit_arg(), "", 0, 0, *flat,
                    ]  # fmt: skip
                    pipe.execute_command("EVALSHA", upsert.sha, len(keys), *keys, *args)
                for res in await pipe.execute():
                    if res[0] != Code.OK:
                        raise RuntimeError(f"upsert.lua refused a bench schedule: {res}")
        took = time.perf_counter() - started
        if not park and None in await self.redis.zmscore(k.schedules, list(ids)):
            raise RuntimeError("not every bench schedule reached the index")
        await self.store.load(ids[0])  # the stored form must read back as a valid schedule
        return took

    async def used_memory(self) -> int:
        return int((await self.node.info("memory"))["used_memory"])

    async def drop_op_keys(self) -> None:
        """Replay-protection hashes expire 5 minutes after their last write; drop them now so
        memory is at rest (and give the server's incremental rehashing a moment to settle)."""
        keys = [key async for key in self.node.scan_iter(match=self.keys.ops("*"), count=5_000)]
        if keys:
            await self.redis.unlink(*keys)
        await anyio.sleep(1.0)

    async def retime(self, ids: Sequence[str], next_ms: Callable[[int], int]) -> None:
        script = self.redis.register_script(RETIME_LUA)
        for start in range(0, len(ids), 5_000):
            chunk = range(start, min(start + 5_000, len(ids)))
            keys = [self.keys.schedules]
            args: list[str | int] = [*(next_ms(i) for i in chunk), *(ids[i] for i in chunk)]
            await script(keys=keys, args=args)

    async def lags(self) -> list[tuple[int, int]]:
        """(scheduled_at, lag ms) of every job entry in the default queue's stream."""
        script = self.redis.register_script(LAGS_LUA)
        out: list[tuple[int, int]] = []
        start = "-"
        while True:
            res = await script(keys=[self.keys.queue("default")], args=[start, 10_000])
            flat = res[1:]
            out.extend((int(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2))
            if len(flat) < 20_000:
                return out
            start = "(" + str(res[0])

    async def slowlog_reset(self, slower_than_us: int = SLOWLOG_US) -> None:
        await self.node.config_set("slowlog-log-slower-than", slower_than_us)
        await self.node.config_set("slowlog-max-len", 10_000)
        await self.node.slowlog_reset()

    async def slowlog(self) -> list[tuple[int, str, int]]:
        return await read_slowlog(self.node)

    async def first_entry_ms(self) -> int | None:
        """The millisecond part of the default queue stream's first entry id."""
        first = await self.redis.xrange(self.keys.queue("default"), count=1)
        return int(str(first[0][0]).split("-")[0]) if first else None

    async def stream_len(self) -> int:
        return int(await self.redis.xlen(self.keys.queue("default")))

    async def evalsha_stats(self) -> tuple[int, int]:
        """(calls, server µs) of EVALSHA so far: the scripts' own time inside Redis."""
        stats = await self.node.info("commandstats")
        entry = stats.get("cmdstat_evalsha", {})
        return int(entry.get("calls", 0)), int(entry.get("usec", 0))


class SchedulerProc:
    """The benchmarked scheduler in a child process."""

    def __init__(self, ctx: Ctx, name: str) -> None:
        self.ctx = ctx
        self.name = name
        self.proc: anyio.abc.Process | None = None
        self.log = ctx.log_dir / f"scheduler-{name}.log"

    async def __aenter__(self) -> SchedulerProc:
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "RSCHED_REDIS_URL": self.ctx.server.url,
            "RSCHED_PREFIX": self.ctx.keys.prefix,
            "RSCHED_CLUSTER": str(self.ctx.server.cluster_key is not None).lower(),
        }
        if self.ctx.metrics:
            env["RSCHED_METRICS_PORT"] = "0"
        cmd = [sys.executable, "-m", "bench._scheduler_proc"]
        if self.ctx.profile_dir is not None:
            cmd += ["--profile", str(self.ctx.profile_dir / f"scheduler-{self.name}.prof")]
        with self.log.open("wb") as out:
            self.proc = await anyio.open_process(cmd, stdout=out, stderr=out, env=env)
        with anyio.fail_after(30):
            while await self.ctx.redis.get(self.ctx.keys.leader) is None:
                if self.proc.returncode is not None:
                    raise RuntimeError(f"bench scheduler exited: {self.log.read_text()[-2000:]}")
                await anyio.sleep(0.02)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu_s(self) -> float:
        assert self.proc is not None
        try:
            return proc_cpu_s(self.proc.pid)
        except FileNotFoundError:
            raise RuntimeError(
                f"the bench scheduler exited early; its log:\n{self.log.read_text()[-3000:]}"
            ) from None

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.terminate()
        with anyio.move_on_after(15):
            await self.proc.wait()
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


# --- the measurements -------------------------------------------------------------------------


#: The calendar every schedule of a herd names with ``--exclude``: a year of holidays, none of
#: them the herd's day, so every occurrence is looked up and still fires.
BENCH_CALENDAR = Calendar.build(
    "bench-holidays",
    dates=[f"2030-{m:02d}-{d:02d}" for m in range(1, 13) for d in (1, 15)],
    ranges=["2030-08-01..2030-08-20"],
)


def template(
    kind: str, payload: dict[str, Any] | None = None, *, exclude: bool = False
) -> dict[str, str]:
    """Spec fields of a bench schedule with rsched's defaults (only the trigger and task set;
    with ``exclude``, the bench calendar named)."""
    trigger: dict[str, Any] = {"cron": "0 * * * *"} if kind == "cron" else {"every": 3600}
    named = {"exclude": [BENCH_CALENDAR.name]} if exclude else {}
    sched = Schedule(id="template", task="bench.task", payload=payload or {}, **trigger, **named)
    return sched.spec_fields()


async def herd(ctx: Ctx, n: int, kind: str, timeout_s: float) -> dict[str, Any]:
    """N schedules come due at the same instant T; how long until all are jobs, and how late."""
    await ctx.reset()
    ids = [f"herd-{kind}-{i:06d}" for i in range(n)]
    spec = template(kind, exclude=ctx.exclude)
    if ctx.exclude:
        await CalendarStore(ctx.redis, ctx.keys).put(BENCH_CALENDAR)
    now = await ctx.now_ms()
    create_s = await ctx.create(ids, lambda i: spec, lambda i: now + SETUP_AHEAD_MS, now)
    await ctx.drop_op_keys()
    async with SchedulerProc(ctx, f"herd-{kind}-{n}") as sched:
        await anyio.sleep(0.3)  # idle and leading, as a scheduler is before a herd
        # As before a real herd, the scheduler gets its whole prefetch window to warm its cache
        # (plus the time the retime below takes).
        lead_ms = SchedulerSettings().prefetch_ms + 500 + n // 100
        t_ms = await ctx.now_ms() + lead_ms
        cpu0, rcpu0 = sched.cpu_s(), proc_cpu_s(ctx.server.pid())
        _, usec0 = await ctx.evalsha_stats()
        await ctx.retime(ids, lambda i: t_ms)
        await ctx.redis.publish(ctx.keys.wake, str(t_ms))
        await ctx.slowlog_reset()  # from here on, every slow command is the scheduler's
        redis_pid = ctx.server.pid()
        redis_os0, sched_os0 = SchedReading.of(redis_pid), SchedReading.of(sched.pid)
        # Until T the scheduler reads the specs it will need (prefetch); from T on it fires.
        await anyio.sleep(max(0.0, (t_ms - await ctx.now_ms()) / 1000))
        cpu_t, rcpu_t = sched.cpu_s(), proc_cpu_s(ctx.server.pid())
        redis_os_t, load_t = SchedReading.of(redis_pid), os.getloadavg()[0]
        calls_t, usec_t = await ctx.evalsha_stats()
        seen_ms = 0
        with anyio.move_on_after(timeout_s):
            # Polling (not an event): the jobs are written by another process.
            while await ctx.stream_len() < n:  # noqa: ASYNC110
                await anyio.sleep(0.002)
            seen_ms = int(time.time() * 1000)
        cpu1, rcpu1 = sched.cpu_s(), proc_cpu_s(ctx.server.pid())
        redis_os1, sched_os1 = SchedReading.of(redis_pid), SchedReading.of(sched.pid)
        calls1, usec1 = await ctx.evalsha_stats()
        slow = await ctx.slowlog()
        cpus = {"server": affinity(redis_pid), "scheduler": affinity(sched.pid)}
    first_ms = await ctx.first_entry_ms()
    lags = sorted(lag for _, lag in await ctx.lags())
    fired = len(lags)
    return {
        "kind": kind,
        "n": n,
        "create_s": round(create_s, 3),
        "fired": fired,
        "complete": fired >= n,
        # T until the poller saw the last job (upper bound) and until the last batch began.
        "dispatched_s": round((seen_ms - t_ms) / 1000, 3) if seen_ms else None,
        "last_fire_s": round(lags[-1] / 1000, 3) if lags else None,
        "lag_p50_ms": pct(lags, 0.50),
        "lag_p99_ms": pct(lags, 0.99),
        "lag_max_ms": float(lags[-1]) if lags else 0.0,
        # T until the first job entry's stream id (Redis' clock when the XADD ran).
        "first_job_ms": first_ms - t_ms if first_ms is not None else None,
        # Commands of SLOWLOG_US or more inside Redis from T on (the scheduler's alone).
        "slow_commands": len(slow),
        "slowest_command_ms": round(max((us for us, _, _ in slow), default=0) / 1000, 2),
        "slow_command_names": sorted({name for _, name, _ in slow}),
        "slow_by_command": {
            name: [
                sum(1 for _, n, _ in slow if n == name),
                max(us for us, n, _ in slow if n == name),
            ]
            for name in sorted({name for _, name, _ in slow})
        },
        # Each slow command as [unix time s, µs, command], and T (ms, the server's clock), to
        # place them beside other records of the machine (a kernel trace).
        "slowlog": [[at, us, name] for us, name, at in slow],
        "t_unix_ms": t_ms,
        # Before T: setting the herd up (the bench's retime) and the scheduler's prefetch.
        "before_t_scheduler_cpu_s": round(cpu_t - cpu0, 3),
        "before_t_redis_cpu_s": round(rcpu_t - rcpu0, 3),
        "before_t_script_server_s": round((usec_t - usec0) / 1e6, 3),
        # From T on: the herd itself.
        "scheduler_cpu_s": round(cpu1 - cpu_t, 3),
        "redis_cpu_s": round(rcpu1 - rcpu_t, 3),
        "script_calls": calls1 - calls_t,
        "script_server_s": round((usec1 - usec_t) / 1e6, 3),
        # What the OS did to the server and the scheduler over the SLOWLOG's window (from its
        # reset until all jobs were seen): time runnable but waiting for a CPU, preemptions.
        "redis_os": redis_os1.since(redis_os0),
        "redis_os_from_t": redis_os1.since(redis_os_t),
        "scheduler_os": sched_os1.since(sched_os0),
        "load_avg_1m": round(load_t, 2),
        "cpus": cpus,
    }


async def steady(ctx: Ctx, n: int, duration_s: float, warmup_s: float) -> dict[str, Any]:
    """N ``every=60`` schedules with anchors spread over a minute; lag of each fire."""
    await ctx.reset()
    period = 60_000
    ids = [f"steady-{i:06d}" for i in range(n)]
    base = template("every")
    base["every"] = "60"
    # No worker drains the queue here: with the default overlap=skip every occurrence after
    # the first would be skipped (its previous run never finishes), so let them all fire.
    base["overlap"] = "allow"
    now = await ctx.now_ms()
    anchors = [now + i * period // n for i in range(n)]

    def spec(i: int) -> dict[str, str]:
        return {**base, "start_at": str(anchors[i])}

    await ctx.create(ids, spec, lambda i: now + SETUP_AHEAD_MS, now)
    await ctx.drop_op_keys()
    async with SchedulerProc(ctx, f"steady-{n}") as sched:
        await anyio.sleep(0.3)
        start = await ctx.now_ms() + 1_000 + n // 20  # after the retime below is done

        def first_after_start(i: int) -> int:
            steps = max(0, (start - anchors[i]) // period + 1)
            return anchors[i] + steps * period

        await ctx.retime(ids, first_after_start)
        await ctx.redis.publish(ctx.keys.wake, str(start))
        await anyio.sleep(max(0.0, (start - await ctx.now_ms()) / 1000) + warmup_s)
        cpu0, rcpu0, t0 = sched.cpu_s(), proc_cpu_s(ctx.server.pid()), time.monotonic()
        measured_from = await ctx.now_ms()
        await anyio.sleep(duration_s - warmup_s)
        cpu1, rcpu1, t1 = sched.cpu_s(), proc_cpu_s(ctx.server.pid()), time.monotonic()
        measured_to = await ctx.now_ms()
    lags = sorted(lag for s, lag in await ctx.lags() if measured_from <= s < measured_to)
    wall = t1 - t0
    return {
        "n": n,
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "fires_measured": len(lags),
        "fires_per_s": round(len(lags) / wall, 1) if wall else 0.0,
        "lag_p50_ms": pct(lags, 0.50),
        "lag_p99_ms": pct(lags, 0.99),
        "lag_max_ms": float(lags[-1]) if lags else 0.0,
        "scheduler_cpu_pct": round(100 * (cpu1 - cpu0) / wall, 1),
        "redis_cpu_pct": round(100 * (rcpu1 - rcpu0) / wall, 1),
    }


async def parked_memory(ctx: Ctx, n: int) -> dict[str, Any]:
    """Bytes per schedule at rest once parked: N ``every=3600`` schedules an hour before their
    next run, parked the way the leading scheduler parks them (rsched._store.parking.park under a
    lease, MOVE_LIMIT at a time), in two halves as memory_and_ceiling does. Then what parking
    and bringing back cost: each call's time inside Redis (SLOWLOG from 0.2 ms: each call, not the
    commands inside it)."""
    await ctx.reset()
    ids = [f"mem-{i:06d}" for i in range(n)]
    spec = template("every", payload={"report": "daily", "n": 1})
    lease, _ = await LeaseStore(ctx.redis, ctx.keys).acquire("bench-parking", 600_000)
    assert lease is not None
    used0 = await ctx.used_memory()
    now = await ctx.now_ms()
    park_us: list[int] = []

    async def create_and_park(some: list[str]) -> int:
        await ctx.create(some, lambda i: spec, lambda i: now + HOUR_MS, now)
        await ctx.slowlog_reset(200)
        while await parking.park(ctx.store, lease):
            pass
        park_us.extend(us for us, name, _ in await ctx.slowlog() if name == "EVALSHA park")
        await ctx.drop_op_keys()
        return await ctx.used_memory()

    half = n // 2
    used_half = await create_and_park(ids[:half])
    used1 = await create_and_park(ids[half:])
    index_left = int(await ctx.redis.zcard(ctx.keys.schedules))
    buckets = int(await ctx.redis.zcard(ctx.keys.parked))
    await ctx.slowlog_reset(200)
    started = time.perf_counter()
    while True:
        back = await parking.unpark(ctx.store, lease, everything=True)
        if not back or not back[0]:
            break
    unpark_s = time.perf_counter() - started
    unpark_us = [us for us, name, _ in await ctx.slowlog() if name == "EVALSHA unpark"]
    if await ctx.redis.zcard(ctx.keys.schedules) != n:
        raise RuntimeError("not every parked schedule came back")
    return {
        "parked_bytes_per_schedule": round((used1 - used0) / n, 1),
        "parked_marginal_bytes_per_schedule": round((used1 - used_half) / (n - half), 1),
        "parked_index_left": index_left,
        "parked_buckets": buckets,
        "park_calls": len(park_us),
        "park_server_s": round(sum(park_us) / 1e6, 3),
        "park_slowest_ms": round(max(park_us, default=0) / 1000, 2),
        "unpark_s": round(unpark_s, 3),
        "unpark_calls": len(unpark_us),
        "unpark_server_s": round(sum(unpark_us) / 1e6, 3),
        "unpark_slowest_ms": round(max(unpark_us, default=0) / 1000, 2),
    }


async def memory_and_ceiling(ctx: Ctx, n: int) -> dict[str, Any]:
    """Bytes per schedule at rest and after one fire; then the fire script and raw Redis alone."""
    await ctx.reset()
    ids = [f"mem-{i:06d}" for i in range(n)]
    spec = template("every", payload={"report": "daily", "n": 1})
    k = ctx.keys
    used0 = await ctx.used_memory()
    now = await ctx.now_ms()
    due_at = now - 1_000  # due already (inside the misfire grace): every item fires on time
    # In two halves: after a bulk create the server keeps ~0.5 MB in no key, whatever N is,
    # which the average over N includes and the second half's slope does not.
    half = n // 2
    await ctx.create(ids[:half], lambda i: spec, lambda i: due_at, now - 2_000)
    await ctx.drop_op_keys()
    used_half = await ctx.used_memory()
    await ctx.create(ids[half:], lambda i: spec, lambda i: due_at, now - 2_000)
    await ctx.drop_op_keys()
    used1 = await ctx.used_memory()
    one_hash = int(await ctx.redis.memory_usage(k.schedule(ids[0])) or 0)
    index = int(await ctx.redis.memory_usage(k.schedules, samples=0) or 0)

    # Ceiling 1: the fire script on pre-planned batches (no due read, no planning), sent the
    # way the scheduler sends them (batch_size items, max_in_flight calls at once).
    cfg = SchedulerSettings()
    lease, _ = await LeaseStore(ctx.redis, ctx.keys).acquire("bench-ceiling", 600_000)
    assert lease is not None
    nxt = due_at + HOUR_MS
    # Planned the way the scheduler plans (all bench schedules share one spec and version).
    stored = await ctx.redis.hgetall(k.schedule(ids[0]))
    planned_spec = PlannedSpec.from_hash({str(f): str(v) for f, v in stored.items()})
    fire_now = await ctx.now_ms()
    planned: list[FireItem] = [
        item for sid in ids for item in plan(sid, planned_spec, due_at, fire_now)
    ]
    nxt = planned[0].next or nxt
    batches = [planned[i : i + cfg.batch_size] for i in range(0, n, cfg.batch_size)]
    calls0, usec0 = await ctx.evalsha_stats()
    firing = FiringStore(ctx.redis, ctx.keys)
    limiter = anyio.CapacityLimiter(cfg.max_in_flight)
    codes: list[int] = []

    async def send(batch: list[FireItem]) -> None:
        async with limiter:
            got = await firing.fire(lease, batch)
        assert got is not None
        codes.extend(got)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for batch in batches:
            tg.start_soon(send, batch)
    fire_script_s = time.perf_counter() - started
    calls1, usec1 = await ctx.evalsha_stats()
    if codes.count(1) != n:
        raise RuntimeError(f"the fire script fired {codes.count(1)} of {n}: {set(codes)}")

    used2 = await ctx.used_memory()
    stream_bytes = int(await ctx.redis.memory_usage(k.queue("default"), samples=0) or 0)
    history = int(await ctx.redis.memory_usage(k.history(ids[0])) or 0)
    hash_fired = int(await ctx.redis.memory_usage(k.schedule(ids[0])) or 0)

    # Ceiling 2: the same writes with no checks or policy, from one Lua loop per batch.
    await ctx.redis.delete(k.queue("default"))
    raw = ctx.redis.register_script(RAW_FIRE_LUA)
    started = time.perf_counter()
    for start in range(0, n, cfg.batch_size):
        chunk = ids[start : start + cfg.batch_size]
        await raw(
            keys=[k.schedules, k.queue("default"), *(k.schedule(s) for s in chunk)],
            args=[*chunk, nxt, nxt + HOUR_MS],
        )
    raw_lua_s = time.perf_counter() - started

    # Ceiling 3: plain pipelined XADD + HSET + ZADD from Python (what a client-side loop costs).
    await ctx.redis.delete(k.queue("default"))
    job = template("every")
    started = time.perf_counter()
    for start in range(0, n, CHUNK):
        async with ctx.redis.pipeline(transaction=False) as pipe:
            for sid in ids[start : start + CHUNK]:
                pipe.xadd(
                    k.queue("default"),
                    {"execution_id": f"{sid}@{nxt}", "schedule_id": sid, "task": job["task"],
                     "payload": "{}", "scheduled_at": nxt, "fired_at": nxt, "attempt": 1,
                     "generation": 1, "origin": "schedule", "opts": "{}"},
                )  # fmt: skip
                pipe.hset(k.schedule(sid), mapping={"next_run": nxt + HOUR_MS, "last_run": nxt})
                pipe.zadd(k.schedules, {sid: nxt + HOUR_MS})
            await pipe.execute()
    raw_pipeline_s = time.perf_counter() - started

    return {
        "n": n,
        "bytes_per_schedule": round((used1 - used0) / n, 1),
        "marginal_bytes_per_schedule": round((used1 - used_half) / (n - half), 1),
        "hash_bytes": one_hash,
        "index_bytes_per_schedule": round(index / n, 1),
        "after_fire_bytes_per_schedule": round((used2 - used0 - stream_bytes) / n, 1),
        "history_bytes_one_fire": history,
        "hash_after_fire_bytes": hash_fired,
        "stream_bytes_per_job": round(stream_bytes / n, 1),
        "fire_script_s": round(fire_script_s, 3),
        "fire_script_server_s": round((usec1 - usec0) / 1e6, 3),
        "fire_script_calls": calls1 - calls0,
        "raw_lua_s": round(raw_lua_s, 3),
        "raw_pipeline_s": round(raw_pipeline_s, 3),
    }


# --- driver -----------------------------------------------------------------------------------


@dataclass
class Plan:
    herd_sizes: list[int]
    repeat: int
    steady_n: int
    steady_s: float
    warmup_s: float
    memory_n: int

    @classmethod
    def of(cls, args: argparse.Namespace) -> Plan:
        if args.quick:
            plan = cls([1_000, 10_000], args.repeat or 1, 10_000, 15.0, 5.0, 10_000)
        else:
            plan = cls([1_000, 10_000, 100_000], args.repeat or 3, 100_000, 125.0, 65.0, 100_000)
        if args.sizes:
            plan.herd_sizes = args.sizes
        return plan


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__)
    p.add_argument("--quick", action="store_true", help="smaller sizes, well under a minute")
    p.add_argument("--repeat", type=int, default=0, help="herd runs per size (best + median)")
    p.add_argument("--kind", choices=["redis", "valkey"], default="redis", help="server binary")
    p.add_argument(
        "--cluster", action="store_true", help="a local 3-primary cluster (RSCHED_CLUSTER)"
    )
    p.add_argument(
        "--sizes", type=int, nargs="+", help="herd sizes instead of the defaults (e.g. 100000)"
    )
    p.add_argument(
        "--only",
        choices=["herd", "steady", "memory"],
        action="append",
        help="one part (repeatable)",
    )
    p.add_argument("--profile", action="store_true", help="cProfile the scheduler process")
    p.add_argument(
        "--pin",
        action="store_true",
        help="the server alone on one CPU, the bench and scheduler on the others",
    )
    p.add_argument(
        "--server-fifo",
        action="store_true",
        help="run the server in SCHED_FIFO, above every ordinary process (root)",
    )
    p.add_argument(
        "--metrics", action="store_true", help="the scheduler serves /metrics (its cost)"
    )
    p.add_argument(
        "--exclude",
        action="store_true",
        help="every herd schedule names an exclusion calendar (the cost of looking it up)",
    )
    return p


def _best_median(runs: list[dict[str, Any]], key: str) -> tuple[float, float]:
    values = [r[key] for r in runs if r[key] is not None]
    if not values:
        return float("nan"), float("nan")
    return min(values), statistics.median(values)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    plan = Plan.of(args)
    only = set(args.only or ["herd", "steady", "memory"])
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": machine(), "quick": args.quick, "plan": plan.__dict__}
    cluster_key = Keys(PREFIX).leader if args.cluster else None
    with BenchServer(args.kind, cluster_key=cluster_key) as server:
        report["machine"]["server"] = server.version() + (" cluster of 3" if args.cluster else "")
        if args.pin:
            report["machine"]["pinned"] = pin_apart(server)
        if args.server_fifo:
            for pid in server.pids():
                realtime(pid)
            report["machine"]["server_sched"] = "SCHED_FIFO 1"
        redis = Redis.from_url(server.url, decode_responses=True)
        node = redis
        if args.cluster:
            redis = connect(Settings(redis_url=server.url, cluster=True))
            node = Redis.from_url(server.node_url, decode_responses=True)
        profile_dir = RESULTS_DIR if args.profile else None
        ctx = Ctx.new(server, redis, profile_dir, node)
        ctx.metrics, ctx.exclude = args.metrics, args.exclude
        try:
            print(
                f"machine: {report['machine']['nproc']} cores, {report['machine']['cpu']}, "
                f"{report['machine']['server']}, python {report['machine']['python']}, "
                f"load {report['machine']['load_avg_1m']}",
                flush=True,
            )
            if args.pin:
                pinned = report["machine"]["pinned"]
                print(
                    f"pinned: server on CPU {pinned['server']}, bench and scheduler on CPU "
                    f"{pinned['bench']}",
                    flush=True,
                )
            if args.server_fifo:
                print("server: SCHED_FIFO priority 1 (no ordinary process preempts it)")
            if "herd" in only:
                report["herd"] = await _herds(ctx, plan)
            if "steady" in only:
                print(f"\nsteady state: {plan.steady_n:,} schedules for {plan.steady_s:g} s ...")
                report["steady"] = await steady(ctx, plan.steady_n, plan.steady_s, plan.warmup_s)
                print(_steady_table(report["steady"]), flush=True)
            if "memory" in only:
                report["memory"] = await memory_and_ceiling(ctx, plan.memory_n)
                report["memory"].update(await parked_memory(ctx, plan.memory_n))
                print("\n" + _memory_table(report["memory"]), flush=True)
        finally:
            await redis.aclose()
            if node is not redis:
                await node.aclose()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = RESULTS_DIR / f"engine-{stamp}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"\nresults: {out}")
    return report


def pin_apart(server: BenchServer) -> dict[str, list[int]]:
    """The server's processes on one CPU, this process (and so the scheduler processes it
    starts from now on) on the others: the OS then has no reason to preempt the server for
    them. Other processes on the machine are left where they are."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit(f"--pin needs at least 2 CPUs, this process may use {cpus}")
    server_cpu, rest = {cpus[-1]}, set(cpus[:-1])
    for pid in server.pids():
        pin(pid, server_cpu)
    pin(os.getpid(), rest)
    return {"server": sorted(server_cpu), "bench": sorted(rest)}


async def _herds(ctx: Ctx, plan: Plan) -> list[dict[str, Any]]:
    rows: list[list[Any]] = []
    summary: list[dict[str, Any]] = []
    for n in plan.herd_sizes:
        for kind in ("cron", "every"):
            runs = [await herd(ctx, n, kind, timeout_s=60) for _ in range(plan.repeat)]
            best, median = _best_median(runs, "dispatched_s")
            by_median = sorted(runs, key=lambda r: r["dispatched_s"] or float("inf"))
            mid = by_median[len(by_median) // 2]
            summary.append({"kind": kind, "n": n, "best_s": best, "median_s": median, "runs": runs})
            rows.append([
                kind, n, best, median, mid["last_fire_s"], mid["lag_p50_ms"], mid["lag_p99_ms"],
                mid["lag_max_ms"], mid["first_job_ms"], max(r["slow_commands"] for r in runs),
                max(r["slowest_command_ms"] for r in runs),
                max(r["redis_os"]["run_delay_ms"] for r in runs),
                max(r["redis_os"]["involuntary_switches"] for r in runs),
                round(n / median) if median and median > 0 else "-",
                mid["scheduler_cpu_s"], mid["redis_cpu_s"], mid["script_server_s"],
                mid["before_t_scheduler_cpu_s"], mid["before_t_script_server_s"],
                "" if all(r["complete"] for r in runs) else "INCOMPLETE",
            ])  # fmt: skip
            print(
                f"  herd {kind} {n:,}: best {best:.3f} s, median {median:.3f} s; first job "
                f"{', '.join(str(r['first_job_ms']) for r in runs)} ms; commands >= 5 ms "
                f"{', '.join(str(r['slow_commands']) for r in runs)} (slowest "
                f"{max(r['slowest_command_ms'] for r in runs)} ms, "
                f"{', '.join(sorted({c for r in runs for c in r['slow_command_names']}))}); "
                f"server run delay "
                f"{', '.join(str(r['redis_os']['run_delay_ms']) for r in runs)} ms, preempted "
                f"{', '.join(str(r['redis_os']['involuntary_switches']) for r in runs)} times; "
                f"load {', '.join(str(r['load_avg_1m']) for r in runs)}",
                flush=True,
            )
    print(
        "\n"
        + table(
            f"Herd: N recurring schedules all due at T (best/median of {plan.repeat}; slow "
            "commands, run delay and preemptions: the most of any run; other columns from the "
            "median run)",
            [
                "trigger", "N", "best s", "median s", "last fire s", "lag p50 ms",
                "lag p99 ms", "lag max ms", "first job ms", "cmds >= 5 ms", "slowest cmd ms",
                "redis run delay ms", "redis preempted", "jobs/s", "sched CPU s", "redis CPU s",
                "script s", "prefetch sched CPU s", "prefetch script s", "",
            ],
            rows,
        )
    )  # fmt: skip
    return summary


def _steady_table(r: dict[str, Any]) -> str:
    return table(
        "Steady state: every=60 schedules, anchors spread uniformly over the minute",
        ["N", "measured s", "fires", "fires/s", "lag p50 ms", "lag p99 ms", "lag max ms",
         "sched CPU %", "redis CPU %"],
        [[r["n"], r["duration_s"] - r["warmup_s"], r["fires_measured"], r["fires_per_s"],
          r["lag_p50_ms"], r["lag_p99_ms"], r["lag_max_ms"], r["scheduler_cpu_pct"],
          r["redis_cpu_pct"]]],
    )  # fmt: skip


def _memory_table(r: dict[str, Any]) -> str:
    n = r["n"]
    mem = table(
        f"Redis memory ({n:,} every= schedules, small payload, defaults)",
        ["measure", "bytes"],
        [
            ["used_memory delta / schedule, at rest", r["bytes_per_schedule"]],
            ["  per added schedule (slope from N/2 to N)", r["marginal_bytes_per_schedule"]],
            ["  MEMORY USAGE of one schedule hash", r["hash_bytes"]],
            ["  index zset / schedule", r["index_bytes_per_schedule"]],
            ["parked (next run > 15 min away), at rest / schedule", r["parked_bytes_per_schedule"]],
            ["  per added schedule (slope from N/2 to N)", r["parked_marginal_bytes_per_schedule"]],
            [
                "  parking them: calls / Redis s / slowest call ms",
                f"{r['park_calls']} / {r['park_server_s']} / {r['park_slowest_ms']}",
            ],
            [
                "  bringing all back: s / calls / Redis s / slowest call ms",
                f"{r['unpark_s']} / {r['unpark_calls']} / {r['unpark_server_s']} / "
                f"{r['unpark_slowest_ms']}",
            ],
            ["after one fire, excluding the stream / schedule", r["after_fire_bytes_per_schedule"]],
            ["  history list after one fire", r["history_bytes_one_fire"]],
            ["  schedule hash after one fire (run state)", r["hash_after_fire_bytes"]],
            ["stream bytes / job entry", r["stream_bytes_per_job"]],
        ],
    )
    ceiling = table(
        f"Ceiling: firing {n:,} due schedules with no scheduler around it",
        ["path", "seconds", "jobs/s"],
        [
            ["fire.lua on pre-planned batches (scheduler's batch size/concurrency)",
             r["fire_script_s"], round(n / r["fire_script_s"])],
            ["  of which inside Redis (commandstats)", r["fire_script_server_s"],
             round(n / r["fire_script_server_s"]) if r["fire_script_server_s"] else "-"],
            ["raw Lua loop: XADD + HSET + ZADD, no checks", r["raw_lua_s"],
             round(n / r["raw_lua_s"])],
            ["raw pipelined XADD + HSET + ZADD from Python", r["raw_pipeline_s"],
             round(n / r["raw_pipeline_s"])],
        ],
    )  # fmt: skip
    return mem + "\n\n" + ceiling


def main(argv: list[str] | None = None) -> int:
    # Unknown options belong to another benchmark when run through ``python -m bench``.
    args, unknown = parser().parse_known_args(argv)
    if unknown:
        print(f"bench.engine: ignoring {' '.join(unknown)}", file=sys.stderr)
    anyio.run(run, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
