"""What ``durability="replicated"`` costs: a herd and an add_many against a primary with one
replica on loopback, with and without the WAIT (docs/durability.md, "What it costs").

A private primary and a private replica of one kind (persistence off); the runs alternate
between the durability levels (each first in every other run), so that a busy moment of a
shared machine hits both alike.
- add_many: N ``every`` schedules through ``Client.add_many`` (wall time).
- enqueue_ms: the mean time of one ``Client.enqueue``, 1,000 one after the other.
- herd: N ``every`` schedules whose first run is the same instant T, fired by an
  ``rsched.Scheduler`` running in this process; from T to the stream id (the server's clock at
  the XADD) of the last of the N jobs.

``python -m bench.durability [--n 10000] [--runs 3] [--kind redis|valkey]``
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from redis.asyncio import Redis

from rsched import Client, Scheduler, Settings
from rsched._core.keys import Keys
from rsched._core.settings import DurabilityLevel
from rsched._devtools.embedded import EmbeddedServer, binary_path
from rsched._redis.connection import connect

LEVELS: tuple[DurabilityLevel, ...] = ("async", "replicated")
HERD_LEAD_S = 3.0
ENQUEUES = 1_000


async def _add_many(settings: Settings, n: int) -> float:
    entries = [{"id": f"bulk-{i:06d}", "task": "bench.task", "every": 3600} for i in range(n)]
    async with Client.from_settings(settings) as client:
        started = time.perf_counter()
        await client.add_many(entries)
        return time.perf_counter() - started


async def _enqueue(settings: Settings, n: int) -> float:
    """Mean ms of one enqueue, ``n`` of them one after the other."""
    async with Client.from_settings(settings) as client:
        await client.enqueue("bench.task")  # the connection and the script, loaded
        started = time.perf_counter()
        for _ in range(n):
            await client.enqueue("bench.task")
        return (time.perf_counter() - started) / n * 1000


async def _herd(settings: Settings, n: int) -> float:
    at = datetime.now(UTC) + timedelta(seconds=HERD_LEAD_S)
    entries = [
        {"id": f"herd-{i:06d}", "task": "bench.task", "every": 3600, "start_at": at}
        for i in range(n)
    ]
    async with Client.from_settings(settings.model_copy(update={"durability": "async"})) as c:
        await c.add_many(entries)
    stream = Keys(settings.prefix).queue("default")
    redis: Any = Redis.from_url(settings.url, decode_responses=True)
    sched_redis = connect(settings)
    scheduler = Scheduler(sched_redis, settings)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(scheduler.run)
            with anyio.fail_after(HERD_LEAD_S + 120):
                while int(await redis.xlen(stream)) < n:  # noqa: ASYNC110 - polling Redis
                    await anyio.sleep(0.005)
            scheduler.stop()
        (last_id, _), *_ = await redis.xrevrange(stream, count=1)
        return (int(last_id.split("-")[0]) - at.timestamp() * 1000) / 1000
    finally:
        await redis.aclose()
        await sched_redis.aclose()


async def run(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    binary = binary_path(args.kind)
    results: dict[str, dict[str, list[float]]] = {
        part: {level: [] for level in LEVELS} for part in ("add_many", "herd", "enqueue_ms")
    }
    with (
        EmbeddedServer(appendonly=False, binary=binary) as primary,
        EmbeddedServer(appendonly=False, binary=binary) as replica,
    ):
        async with Redis.from_url(replica.url, decode_responses=True) as link:
            await link.execute_command("REPLICAOF", "127.0.0.1", str(primary.port))  # type: ignore[no-untyped-call]
            with anyio.fail_after(30):
                while (await link.info("replication")).get("master_link_status") != "up":  # noqa: ASYNC110
                    await anyio.sleep(0.05)
        for run_no in range(args.runs):
            # Each level goes first in every other run: what runs first pays for the warm-up.
            for level in LEVELS if run_no % 2 == 0 else LEVELS[::-1]:
                settings = Settings(
                    redis_url=primary.url, prefix=f"b{uuid.uuid4().hex[:8]}", durability=level
                )
                took = await _add_many(settings, args.n)
                results["add_many"][level].append(took)
                herd = await _herd(
                    settings.model_copy(update={"prefix": settings.prefix + "h"}), args.n
                )
                results["herd"][level].append(herd)
                one = await _enqueue(settings, ENQUEUES)
                results["enqueue_ms"][level].append(one)
                print(
                    f"run {run_no + 1} {level:>10}: add_many {took:.3f} s, herd {herd:.3f} s, "
                    f"one enqueue {one:.3f} ms"
                )
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.durability", description=__doc__)
    p.add_argument("--n", type=int, default=10_000, help="schedules per run (10000)")
    p.add_argument("--runs", type=int, default=3, help="runs per level, in turns (3)")
    p.add_argument("--kind", choices=["redis", "valkey"], default="redis", help="server binary")
    args = p.parse_args(argv)
    results = anyio.run(run, args)
    print(f"\n{args.n:,} schedules, {args.kind}, primary + 1 replica on loopback, {args.runs} runs")
    print(f"{'':<10} {'level':<12} {'best':>8} {'median':>9}")
    for part, by_level in results.items():
        for level, times in by_level.items():
            best, median = min(times), statistics.median(times)
            print(f"{part:<10} {level:<12} {best:>8.3f} {median:>9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
