"""Commands a worker sends to a cluster: idle (blocking reads only) and busy (running no-op jobs).

A local cluster of three primaries (rsched._embedded_cluster) and one ``rsched-worker`` process
in cluster mode. Every node's ``INFO commandstats`` is reset, then read after the worker idled
for ``--idle-s`` seconds, and again around a run of ``--jobs`` no-op jobs; the tables give each
command's calls per second (idle) and per job (busy), summed over every node, with the bench's
own commands (the jobs' XADD, its polling) taken out.

``python -m bench.cluster_commands [--kind redis|valkey] [--idle-s S] [--jobs N]``
Every run uses private servers on free loopback ports; port 6379 is never touched.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections import Counter
from collections.abc import Sequence

import anyio
import redis
from redis.asyncio import Redis

from bench._servers import BenchServer
from bench.worker import _fill, _spawn_worker, _stop
from rsched._keys import GROUP, Keys


def _stats(urls: Sequence[str]) -> Counter[str]:
    """Calls per command, summed over the nodes of ``urls``."""
    total: Counter[str] = Counter()
    for url in urls:
        with redis.Redis.from_url(url, decode_responses=True) as node:
            for name, fields in node.info("commandstats").items():
                total[name.removeprefix("cmdstat_")] += int(fields["calls"])
    return total


def _reset(urls: Sequence[str]) -> None:
    for url in urls:
        with redis.Redis.from_url(url, decode_responses=True) as node:
            node.config_resetstat()


def _table(title: str, counts: Counter[str], per: float, unit: str) -> str:
    rows = [f"{title}: {sum(counts.values()) / per:.2f} commands {unit}"]
    for name, calls in counts.most_common():
        if calls > 0:
            rows.append(f"  {name:<28} {calls / per:10.3f}")
    return "\n".join(rows)


async def measure(kind: str, idle_s: float, jobs: int) -> str:
    prefix = f"bc{uuid.uuid4().hex[:8]}"
    keys = Keys(prefix)
    stream = keys.queue("bench")
    with BenchServer(kind, cluster_key=keys.queues) as server:
        urls = server.primary_urls()
        proc = _spawn_worker(server.url, prefix, 16, "warning", cluster=True)
        node = Redis.from_url(server.node_url, decode_responses=True)
        try:
            # Started once its group exists on the queue's stream.
            for _ in range(300):
                if await node.exists(stream):
                    break
                await anyio.sleep(0.1)
            await anyio.sleep(2.0)
            _reset(urls)
            await anyio.sleep(idle_s)
            idle = _stats(urls)
            _reset(urls)
            started = time.perf_counter()
            await _fill(node, stream, jobs)
            polls = Counter[str]()
            while True:
                polls["xlen"] += 1
                if not int(await node.xlen(stream)):
                    polls["xpending"] += 1
                    if not int((await node.xpending(stream, GROUP))["pending"]):
                        break
                await anyio.sleep(0.05)
            took = time.perf_counter() - started
            busy = _stats(urls)
            busy["xadd"] -= jobs
            busy -= polls
        finally:
            await node.aclose()
            _stop(proc)
        return "\n".join(
            [
                f"{server.version()}, cluster of {len(urls)} primaries, one idle worker",
                _table(f"idle, {idle_s:g} s", +idle, idle_s, "per second"),
                _table(f"busy, {jobs} jobs in {took:.2f} s", +busy, jobs, "per job"),
            ]
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", default="redis", choices=["redis", "valkey"])
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--jobs", type=int, default=2000)
    args = parser.parse_args(argv)
    print(anyio.run(measure, args.kind, args.idle_s, args.jobs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
