"""A herd over a deployment of partitions led by 1, 2 or 3 scheduler processes, and how long the
partitions of a killed one take to be led again.

``python -m bench.schedulers [--partitions 16] [--schedulers 1 2 3] [--size 10000]``: on a
private server, N schedules spread over the partitions come due at one instant T with S
``rsched-scheduler`` processes sharing the partitions; reported: T until the last job is in
its stream, then (S > 1) the seconds from a kill -9 of one scheduler until every partition is
led again (default lease settings: ``lease_ttl_ms`` 10 s, ``lease_renew_ms`` 2 s).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import Any

import anyio
from redis.asyncio import Redis

from bench._servers import BenchServer
from bench.engine import DAY_MS, Ctx, template
from rsched._keys import Keys
from rsched._partition import partition_of
from rsched._settings import SchedulerSettings
from rsched._store import ScheduleStore

PREFIX = "bench"


def spawn(url: str, partitions: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "RSCHED_REDIS_URL": url,
        "RSCHED_PREFIX": PREFIX,
        "RSCHED_PARTITIONS": str(partitions),
        "RSCHED_LOG_LEVEL": "warning",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "rsched._scheduler_main"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def holders(redis: Redis, keys: Keys) -> list[str | None]:
    async with redis.pipeline(transaction=False) as pipe:
        for k in keys.every_partition():
            pipe.get(k.leader)
        values = await pipe.execute()
    return [str(v).partition(":")[2] if v else None for v in values]


async def wait_led_by(redis: Redis, keys: Keys, count: int, timeout_s: float = 60) -> float:
    """Seconds until every partition is led, by ``count`` distinct schedulers."""
    started = time.monotonic()
    with anyio.fail_after(timeout_s):
        while True:
            led = await holders(redis, keys)
            if None not in led and len(set(led)) == count:
                return time.monotonic() - started
            await anyio.sleep(0.01)


async def one(server: BenchServer, partitions: int, schedulers: int, size: int) -> dict[str, Any]:
    redis = Redis.from_url(server.url, decode_responses=True)
    await redis.execute_command("FLUSHALL", "SYNC")  # type: ignore[no-untyped-call]
    keys = Keys(PREFIX, partitions)
    await redis.hset(keys.meta, "partitions", partitions)
    ctxs = [Ctx(server, redis, k, ScheduleStore(redis, k), redis) for k in keys.every_partition()]
    ids: list[list[str]] = [[] for _ in range(partitions)]
    for i in range(size):
        sid = f"herd-{i:06d}"
        ids[partition_of(sid, partitions)].append(sid)
    spec = template("every")
    now = await ctxs[0].now_ms()
    for ctx, part in zip(ctxs, ids, strict=True):
        await ctx.create(part, lambda i: spec, lambda i: now + DAY_MS, now)
    procs = [spawn(server.url, partitions) for _ in range(schedulers)]
    try:
        await wait_led_by(redis, keys, min(schedulers, partitions))
        await anyio.sleep(0.5)
        t_ms = await ctxs[0].now_ms() + SchedulerSettings().prefetch_ms + 500 + size // 100
        for ctx, part in zip(ctxs, ids, strict=True):
            await ctx.retime(part, lambda i: t_ms)
            await redis.publish(ctx.keys.wake, str(t_ms))
        await anyio.sleep(max(0.0, (t_ms - await ctxs[0].now_ms()) / 1000))
        streams = [k.queue("default") for k in keys.every_partition()]
        # Polling (not an event): the jobs are written by other processes.
        while sum([await redis.xlen(s) for s in streams]) < size:  # noqa: ASYNC110
            await anyio.sleep(0.002)
        herd_s = (int(time.time() * 1000) - t_ms) / 1000
        takeover_s = None
        if schedulers > 1:
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait()
            takeover_s = await wait_led_by(redis, keys, min(schedulers - 1, partitions))
        return {
            "partitions": partitions,
            "schedulers": schedulers,
            "size": size,
            "herd_s": round(herd_s, 3),
            "takeover_s": round(takeover_s, 2) if takeover_s is not None else None,
        }
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(10)
        await redis.aclose()


async def run(args: argparse.Namespace) -> None:
    with BenchServer(args.kind).start() as server:
        for count in args.schedulers:
            for _ in range(args.repeat):
                print(await one(server, args.partitions, count, args.size), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.schedulers")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--schedulers", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--kind", default="redis", choices=["redis", "valkey"])
    anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
