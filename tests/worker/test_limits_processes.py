"""Limits across worker processes, one of them SIGKILLed mid-run: never more than a key's
concurrency at once, never more than a rate's count in any window, no hold leaked."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from rsched._core.keys import Keys
from rsched._core.settings import Settings
from tests.support.limits import most_at_once
from tests.support.processes import Proc
from tests.support.waiting import eventually
from tests.support.worker_app import marks_key
from tests.support.workers import start_worker, store_for

pytestmark = pytest.mark.slow


async def marks(redis: Redis, settings: Settings) -> list[tuple[str, str, int, float]]:
    out = []
    for raw in await redis.lrange(marks_key(settings.prefix), 0, -1):
        what, exec_id, _attempt, pid, at = str(raw).rsplit(":", 4)
        out.append((what, exec_id, int(pid), float(at)))
    return out


async def test_concurrency_holds_across_processes_while_one_is_killed(
    redis: Redis, settings: Settings, spawn: Callable[..., Proc]
) -> None:
    store = store_for(redis, settings)
    keys = ["a", "b", "c"]
    # Runs of three seconds: the kill below lands inside one of the first worker's runs, even
    # on a machine loaded enough to take a second between the look and the kill.
    jobs = [(await store.enqueue("app.limited", {"k": keys[i % 3], "s": 3.0})).execution_id
            for i in range(18)]  # fmt: skip
    workers = [start_worker(spawn, settings) for _ in range(3)]
    # Kill one while it runs something: its holds must come back through the reclaim.
    await eventually(lambda: _running_on(redis, settings, workers[0].proc.pid))
    workers[0].signal(signal.SIGKILL)
    killed_at = time.time()
    workers[0].wait()
    workers.append(start_worker(spawn, settings))

    async def all_ended() -> bool:
        ended = {e for what, e, _, _ in await marks(redis, settings) if what.startswith("end")}
        return ended >= set(jobs)

    await eventually(all_ended)
    runs: dict[tuple[str, int], list[float]] = {}
    key_of: dict[str, str] = {}
    for what, exec_id, pid, at in await marks(redis, settings):
        key = what.split("-")[1]
        key_of[exec_id] = key
        runs.setdefault((exec_id, pid), []).append(at)
    by_key: dict[str, list[tuple[float, float]]] = {}
    for (exec_id, pid), times in runs.items():
        start = min(times)
        end = max(times) if len(times) > 1 else (killed_at if pid == workers[0].proc.pid else start)
        by_key.setdefault(key_of[exec_id], []).append((start, end))
    for key, intervals in by_key.items():
        assert most_at_once(intervals) <= 2, key
    # The killed worker's runs were reclaimed and ran again elsewhere, under their holds.
    cut = {e for e, pid in runs if pid == workers[0].proc.pid and len(runs[(e, pid)]) == 1}
    assert cut
    assert all(any(e == other and p != workers[0].proc.pid for other, p in runs) for e in cut)
    limits = Keys(settings.prefix).limits

    async def released() -> bool:
        return not await redis.hgetall(limits[0]) and not await redis.zcard(limits[1])

    await eventually(released)


async def _running_on(redis: Redis, settings: Settings, pid: int) -> bool:
    """Whether the worker process ``pid`` is inside a run: one started there has not ended."""
    started: set[str] = set()
    ended: set[str] = set()
    for what, exec_id, p, _ in await marks(redis, settings):
        if p == pid:
            (started if what.startswith("start") else ended).add(exec_id)
    return bool(started - ended)


async def test_rate_holds_across_processes(
    redis: Redis, settings: Settings, spawn: Callable[..., Proc]
) -> None:
    store = store_for(redis, settings)
    for _ in range(20):
        await store.enqueue("app.rated")
    for _ in range(3):
        start_worker(spawn, settings)

    async def all_started() -> bool:
        return len(await marks(redis, settings)) >= 20

    await eventually(all_started)
    starts = sorted(at for _, _, _, at in await marks(redis, settings))
    assert len(starts) == 20
    # 20 starts at 5 a second take at least three more windows; any 6 starts span about the
    # period (less the time from the grant to the handler, which a loaded machine stretches).
    assert starts[-1] - starts[0] >= 2.7
    for i in range(len(starts) - 5):
        assert starts[i + 5] - starts[i] >= 0.6, starts
