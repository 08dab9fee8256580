"""The readers an operator uses while a herd fires, timed from a process of their own.

``python -m bench._readers URL PREFIX SCHEDULE_ID``: connects, then waits for a line on stdin;
from then on calls ``list`` (first page of 50), ``stats``, ``health`` and ``get SCHEDULE_ID``
in turn, 10 ms apart, until stdin closes, and prints the ms of each call as one JSON object
(name -> list). A process of their own, as a dashboard or the CLI would be: timed inside the
benchmark's process, they waited for its other work (its polling, the other readers' replies
being parsed) and measured that.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
import orjson

import rsched


async def _main(url: str, prefix: str, schedule_id: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    async with rsched.Client.from_url(url, prefix=prefix) as client:
        calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("list", lambda: client.list(limit=50)),
            ("stats", client.stats),
            ("health", client.health),
            ("get", lambda: client.get(schedule_id)),
        ]
        await client.stats()  # connected, scripts loaded: what is timed is the calls alone
        await anyio.to_thread.run_sync(sys.stdin.readline)
        done = anyio.Event()

        async def until_eof() -> None:
            await anyio.to_thread.run_sync(sys.stdin.read)
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(until_eof)
            while not done.is_set():
                for name, call in calls:
                    t = time.perf_counter()
                    await call()
                    out.setdefault(name, []).append((time.perf_counter() - t) * 1000)
                    await anyio.sleep(0.01)
    return out


if __name__ == "__main__":
    result = anyio.run(_main, sys.argv[1], sys.argv[2], sys.argv[3])
    sys.stdout.buffer.write(orjson.dumps(result))
