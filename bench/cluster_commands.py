"""Commands a worker sends to a cluster: idle (blocking reads only) and busy (running no-op jobs).

A local cluster of three primaries (rsched._devtools.embedded_cluster) and one ``rsched-worker``
process in cluster mode, watched while it idles for ``--idle-s`` seconds and while it runs
``--jobs`` no-op jobs. The tables give the commands the worker sent (MONITOR on every primary: its
round trips, scripts' own commands left out) per second (idle) and per job (busy), and the commands
the nodes ran in all (``INFO commandstats``, which counts the commands inside scripts too), with the
bench's own (the jobs' XADD, its polling) taken out.

``python -m bench.cluster_commands [--kind redis|valkey] [--idle-s S] [--jobs N]``
Every run uses private servers on free loopback ports; port 6379 is never touched.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence

import anyio
import redis
from redis.asyncio import Redis

from bench._servers import BenchServer
from bench.worker import _fill, _spawn_worker, _stop
from rsched._core.keys import GROUP, Keys


def _stats(urls: Sequence[str]) -> Counter[str]:
    """Calls per command, summed over the nodes of ``urls``."""
    total: Counter[str] = Counter()
    for url in urls:
        with redis.Redis.from_url(url, decode_responses=True) as node:
            for name, fields in node.info("commandstats").items():
                total[name.removeprefix("cmdstat_")] += int(fields["calls"])
    return total


#: Commands whose second word names what they do.
_CONTAINERS = frozenset({"client", "cluster", "command", "config", "script", "xgroup", "xinfo"})


class _Monitor(threading.Thread):
    """The commands clients send to one node (not those its scripts run), until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.sent: Counter[str] = Counter()
        self.done = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        client = redis.Redis.from_url(self.url, decode_responses=True)
        with client.monitor() as monitor:  # type: ignore[no-untyped-call]
            self.ready.set()
            while not self.done.is_set():
                try:
                    seen = monitor.next_command()
                except (redis.RedisError, OSError):
                    return  # the node went away
                if seen["client_type"] == "tcp" and not self.done.is_set():
                    words = seen["command"].lower().split()
                    name = " ".join(words[:2] if words[0] in _CONTAINERS else words[:1])
                    self.sent[name] += 1

    def __enter__(self) -> _Monitor:
        self.start()
        self.ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        with redis.Redis.from_url(self.url) as node:
            node.ping()  # what the monitor sees last: it stops there
        self.join(5)


def _watching(urls: Sequence[str]) -> list[_Monitor]:
    return [_Monitor(url) for url in urls]


def _sent(monitors: Sequence[_Monitor]) -> Counter[str]:
    total: Counter[str] = Counter()
    for monitor in monitors:
        total += monitor.sent
    return total


def _reset(urls: Sequence[str]) -> None:
    for url in urls:
        with redis.Redis.from_url(url, decode_responses=True) as node:
            node.config_resetstat()


def _table(title: str, sent: Counter[str], ran: Counter[str], per: float, unit: str) -> str:
    rows = [
        f"{title}: the worker sent {sum(sent.values()) / per:.2f} commands {unit}; the nodes "
        f"ran {sum(ran.values()) / per:.2f} in all"
    ]
    for name, calls in sent.most_common():
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
            monitors = _watching(urls)
            _reset(urls)
            with contextlib.ExitStack() as stack:
                for monitor in monitors:
                    stack.enter_context(monitor)
                await anyio.sleep(idle_s)
            idle, idle_sent = _stats(urls), _sent(monitors)
            monitors = _watching(urls)
            _reset(urls)
            started = time.perf_counter()
            stack = contextlib.ExitStack()
            for monitor in monitors:
                stack.enter_context(monitor)
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
            stack.close()
            busy, busy_sent = _stats(urls), _sent(monitors)
            busy["xadd"] -= jobs
            busy -= polls
            busy_sent["xadd"] -= jobs
            busy_sent -= polls
        finally:
            await node.aclose()
            _stop(proc)
        return "\n".join(
            [
                f"{server.version()}, cluster of {len(urls)} primaries, one idle worker",
                _table(f"idle, {idle_s:g} s", idle_sent, +idle, idle_s, "per second"),
                _table(f"busy, {jobs} jobs in {took:.2f} s", +busy_sent, +busy, jobs, "per job"),
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
