"""A herd over a deployment of partitions led by 1, 2 or 3 scheduler processes, and how long the
partitions of a killed one take to be led again.

``python -m bench.schedulers [--partitions 16] [--schedulers 1 2 3] [--size 10000]``: on a
private server, N schedules spread over the partitions come due at one instant T with S
``rsched-scheduler`` processes sharing the partitions; reported: T until the last job is in
its stream, then (S > 1) the seconds from a kill -9 of one scheduler until every partition is
led again (default lease settings: ``lease_ttl_ms`` 10 s, ``lease_renew_ms`` 2 s).

``--cluster`` runs it on a local cluster of three primaries (the schedulers in cluster mode).
``--memory N`` measures instead what N schedules cost at rest: ``Client.add_many`` in chunks of
10,000 (``every=3600``, defaults otherwise), ``used_memory`` summed over the primaries before
and after (the replay-protection ``ops`` hashes deleted first), over N. ``--idle SECONDS``
counts the commands the primaries serve per second for an idle deployment (no schedule due):
S schedulers alone, then with one ``rsched-worker`` (``--queues K`` queues) too, default
settings; ``--schedulers 0`` measures the worker alone.
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
from bench.engine import SETUP_AHEAD_MS, Ctx, template
from rsched import Client, Schedule, Settings
from rsched._core.keys import Keys
from rsched._core.partitions import partition_of
from rsched._core.settings import SchedulerSettings
from rsched._redis.connection import connect
from rsched._store.schedules import ScheduleStore

PREFIX = "bench"


def spawn(url: str, partitions: int, cluster: bool, *worker: str) -> subprocess.Popen[bytes]:
    """A scheduler process (or, with ``worker`` arguments, a worker process)."""
    env = {
        **os.environ,
        "RSCHED_REDIS_URL": url,
        "RSCHED_CLUSTER": str(cluster).lower(),
        "RSCHED_PREFIX": PREFIX,
        "RSCHED_PARTITIONS": str(partitions),
        "RSCHED_LOG_LEVEL": "warning",
    }
    module = (
        ["rsched._cli.worker_process", *worker] if worker else ["rsched._cli.scheduler_process"]
    )
    return subprocess.Popen(
        [sys.executable, "-m", *module],
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


def client(server: BenchServer) -> Redis:
    if server.cluster_key is not None:
        return connect(Settings(redis_url=server.url, cluster=True))
    return Redis.from_url(server.url, decode_responses=True)


async def on_every_primary(server: BenchServer, *command: str) -> list[Any]:
    """One command on each primary (the one server when not a cluster), one reply each."""
    replies = []
    for url in server.primary_urls():
        async with Redis.from_url(url, decode_responses=True) as node:
            replies.append(await node.execute_command(*command))  # type: ignore[no-untyped-call]
    return replies


async def used_memory(server: BenchServer) -> int:
    infos = await on_every_primary(server, "INFO", "memory")
    return sum(int(info["used_memory"]) for info in infos)


async def one(server: BenchServer, partitions: int, schedulers: int, size: int) -> dict[str, Any]:
    redis = client(server)
    await on_every_primary(server, "FLUSHALL", "SYNC")
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
        await ctx.create(part, lambda i: spec, lambda i: now + SETUP_AHEAD_MS, now)
    cluster = server.cluster_key is not None
    procs = [spawn(server.url, partitions, cluster) for _ in range(schedulers)]
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
            "cluster": cluster,
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


async def at_rest(server: BenchServer, partitions: int, size: int) -> dict[str, Any]:
    await on_every_primary(server, "FLUSHALL", "SYNC")
    redis = client(server)
    settings = Settings(
        redis_url=server.url,
        prefix=PREFIX,
        partitions=partitions,
        cluster=server.cluster_key is not None,
    )
    started = time.perf_counter()
    async with Client(redis, settings) as sdk:
        await sdk.init(partitions)
        before = await used_memory(server)
        for start in range(0, size, 10_000):
            chunk = range(start, min(start + 10_000, size))
            await sdk.add_many(
                Schedule(id=f"mem-{i:07d}", task="bench.t", every=3600, payload={"n": i})
                for i in chunk
            )
        took = time.perf_counter() - started
        for key in [key async for key in redis.scan_iter(match="*:ops:*", count=1000)]:
            await redis.delete(key)
        await anyio.sleep(1)
        after = await used_memory(server)
    return {
        "partitions": partitions,
        "cluster": server.cluster_key is not None,
        "schedules": size,
        "add_many_s": round(took, 1),
        "bytes_per_schedule": round((after - before) / size),
    }


async def commands_per_s(server: BenchServer, seconds: float) -> tuple[float, dict[str, int]]:
    """Commands per second the primaries served over ``seconds``, and the most called."""
    await on_every_primary(server, "CONFIG", "RESETSTAT")
    await anyio.sleep(seconds)
    calls: dict[str, int] = {}
    for stats in await on_every_primary(server, "INFO", "commandstats"):
        for name, value in stats.items():
            command = name.removeprefix("cmdstat_")
            calls[command] = calls.get(command, 0) + int(value["calls"])
    calls.pop("info", None)  # this reading's own
    top = dict(sorted(calls.items(), key=lambda kv: -kv[1])[:10])
    return round(sum(calls.values()) / seconds, 1), top


async def idle(
    server: BenchServer, partitions: int, schedulers: int, seconds: float, queues: int
) -> None:
    await on_every_primary(server, "FLUSHALL", "SYNC")
    redis = client(server)
    keys = Keys(PREFIX, partitions)
    await redis.hset(keys.meta, "partitions", partitions)
    cluster = server.cluster_key is not None
    procs = [spawn(server.url, partitions, cluster) for _ in range(schedulers)]
    try:
        if schedulers:
            await wait_led_by(redis, keys, min(schedulers, partitions))
            await anyio.sleep(3)
            per_s, top = await commands_per_s(server, seconds)
            print({"partitions": partitions, "schedulers": schedulers, "workers": 0,
                   "commands_per_s": per_s, "top": top}, flush=True)  # fmt: skip
        names = ",".join(["bench", *(f"bench{i}" for i in range(2, queues + 1))])
        app = ["bench.worker:worker", "--queues", names]
        procs.append(spawn(server.url, partitions, cluster, *app))
        await anyio.sleep(5)
        per_s, top = await commands_per_s(server, seconds)
        print({"partitions": partitions, "schedulers": schedulers, "workers": 1, "queues": queues,
               "commands_per_s": per_s, "top": top}, flush=True)  # fmt: skip
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(15)
        await redis.aclose()


async def run(args: argparse.Namespace) -> None:
    cluster_key = Keys(PREFIX).leader if args.cluster else None
    with BenchServer(args.kind, cluster_key=cluster_key) as server:
        if args.idle:
            await idle(server, args.partitions, args.schedulers[0], args.idle, args.queues)
            return
        if args.memory:
            print(await at_rest(server, args.partitions, args.memory), flush=True)
            return
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
    parser.add_argument("--cluster", action="store_true", help="a local 3-primary cluster")
    parser.add_argument("--memory", type=int, default=0, help="N schedules at rest instead")
    parser.add_argument("--idle", type=float, default=0, help="commands/s of an idle deployment")
    parser.add_argument("--queues", type=int, default=1, help="--idle: the worker's queues")
    anyio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
