"""What partitions cost the reads that span a deployment: list and stats at N=1 and N=16.

Against a private server (bench._servers); the client runs in this process. For each N, a fresh
prefix gets ``--size`` schedules through add_many (timed), then ``list(limit=100)`` (the first
page and a page deep in the index), a walk of every page and ``stats()`` are timed, median of
``--repeat`` calls. bench/README.md, "Partitions".

``python -m bench.partitions [--size N] [--repeat N] [--kind redis|valkey] [--partitions N ...]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from bench._servers import BenchServer
from bench.bulk import dicts
from bench.engine import table
from rsched import Client, Settings


async def median_ms(fn: Callable[[], Awaitable[Any]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


async def one(url: str, partitions: int, size: int, repeat: int) -> list[Any]:
    settings = Settings(redis_url=url, prefix=f"p{partitions}", partitions=partitions)
    async with Client.from_settings(settings) as client:
        started = time.perf_counter()
        await client.add_many(dicts(size))
        add_s = round(time.perf_counter() - started, 2)
        first = await median_ms(lambda: client.list(limit=100), repeat)
        cursor = None
        for _ in range(size // 200):
            cursor = (await client.list(limit=100, cursor=cursor)).cursor
        deep = await median_ms(lambda: client.list(limit=100, cursor=cursor), repeat)
        started = time.perf_counter()
        seen = [s async for s in client.iter_schedules(page_size=1000)]
        walk_s = round(time.perf_counter() - started, 2)
        assert len(seen) == size
        stats = await median_ms(client.stats, repeat)
    return [partitions, add_s, first, deep, walk_s, stats]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.partitions", description=__doc__)
    p.add_argument("--size", type=int, default=10_000, help="schedules (10000)")
    p.add_argument("--repeat", type=int, default=20, help="calls per timed read (20)")
    p.add_argument("--kind", choices=["redis", "valkey"], default="redis", help="server binary")
    p.add_argument("--partitions", type=int, nargs="+", default=[1, 16])
    return p


async def run(args: argparse.Namespace) -> None:
    with BenchServer(args.kind) as server:
        rows = [await one(server.url, n, args.size, args.repeat) for n in args.partitions]
        title = f"Partitions: {server.version()}, {args.size} schedules, median of {args.repeat}"
    headers = (
        "N", "add_many s", "list first ms", "list deep ms", "walk all (1000/page) s", "stats ms",
    )  # fmt: skip
    print(table(title, headers, rows))


def main(argv: list[str] | None = None) -> int:
    anyio.run(run, parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
