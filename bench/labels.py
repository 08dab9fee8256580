"""The labels benchmark: finding schedules among 100k by label (the index) and by task (a
bounded scan), and the memory of an index entry.

Against a private server (bench._servers); the client runs in this process. What each number
means: bench/README.md, "Labels".

``python -m bench.labels [--kind redis|valkey] [--size N] [--repeat N]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from bench._servers import BenchServer
from rsched import Client, Settings
from rsched._core.keys import Keys
from rsched._redis.connection import connect

PREFIX = "bench"
TEAMS = 100


def specs(n: int) -> list[dict[str, Any]]:
    """n schedules, all labelled env=prod, each of one of TEAMS teams; 1% of another task."""
    return [
        {
            "id": f"lab-{i:06d}",
            "task": "bench.other" if i % 100 == 7 else "bench.task",
            "every": 3600,
            "labels": {"env": "prod", "team": f"t{i % TEAMS}"},
        }
        for i in range(n)
    ]


async def best_and_median(fn: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - started) * 1000)
    return min(times), statistics.median(times)


async def run(kind: str, size: int, repeat: int) -> None:
    with BenchServer(kind) as server:
        settings = Settings(redis_url=server.url, prefix=PREFIX)
        redis = connect(settings)
        client = Client(redis, settings)
        try:
            await client.add_many(specs(size))
            keys = Keys(PREFIX)
            print(f"{server.version()}: {size:,} schedules, each labelled env=prod and team=t<n>")
            for pair, count in (("env=prod", size), ("team=t7", size // TEAMS)):
                used = int(await redis.memory_usage(keys.label(pair), samples=0) or 0)
                print(f"  index {pair:<10} {count:>7,} ids  {used / count:6.1f} B an entry")
            cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                ("select team=t7 (1%)", lambda: client.select(labels={"team": "t7"})),
                (
                    "select team=t7, env=prod (AND)",
                    lambda: client.select(labels={"team": "t7", "env": "prod"}),
                ),
                (
                    "list team=t7, a page of 50",
                    lambda: client.list(labels={"team": "t7"}, limit=50),
                ),
                ("select env=prod (every one)", lambda: client.select(labels={"env": "prod"})),
                ("select task (scan, 1%)", lambda: client.select(task="bench.other")),
                (
                    "select team=t7 and task",
                    lambda: client.select(labels={"team": "t7"}, task="bench.other"),
                ),
            ]
            for name, fn in cases:
                best, median = await best_and_median(fn, repeat)
                print(f"  {name:<34} best {best:7.1f} ms  median {median:7.1f} ms")
        finally:
            await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", choices=["redis", "valkey"], default="redis")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    anyio.run(run, args.kind, args.size, args.repeat)


if __name__ == "__main__":
    main()
