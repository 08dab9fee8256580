"""What a busy schedule costs in Redis: N schedules made through the SDK, each run R times.

    .venv/bin/python -m bench.memory                    # 2,000 schedules x 100 runs, redis-server
    .venv/bin/python -m bench.memory --kind valkey --schedules 500 --runs 40

Schedules are created with ``Client.add_many`` (``every=60``, a small payload, defaults
otherwise). Each round then drives the scripts the scheduler and a worker run, in the order
they run them: ``fire`` (on time, a few ms late), ``take``, ``start``, ``complete`` (with the
runs log record a worker writes), so each schedule's hash and history hold what 100 real runs
leave; each run takes ``--run-ms`` (all of a round's at once). Every ``--fail-every``-th run
fails once and is retried. What a schedule costs is then read from ``INFO memory``
used_memory as it falls when the histories, and then the hashes and the index, are deleted
(the queue stream, the runs log and the replay-protection hashes deleted first), beside
MEMORY USAGE of the keys. The runs log is measured on its own (MEMORY USAGE over its records)
and scaled to its default cap.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import anyio
from redis.asyncio import Redis

from bench._servers import BenchServer
from rsched import Client, Schedule, Settings
from rsched._core.fire_plan import FireItem
from rsched._core.history import fragment
from rsched._core.keys import Keys
from rsched._store.firing import FiringStore
from rsched._store.leases import LeaseStore
from rsched._store.queues import QueueStore
from rsched._store.runs_log import run_record
from rsched._store.worker_calls import Done

BATCH = 500
WORKER = "bench-host:4242:9f3a1c"


async def _used(redis: Redis) -> int:
    """used_memory once deletions are done: Valkey frees a deleted key in the background
    (lazyfree-lazy-user-del), and a large one (the runs log) would count for the next step."""
    while True:
        info = await redis.info("memory")
        if not int(info.get("lazyfree_pending_objects", 0)):
            return int(info["used_memory"])
        await anyio.sleep(0.05)


async def _drop(redis: Redis, pattern: str) -> None:
    keys = [key async for key in redis.scan_iter(match=pattern, count=5_000)]
    if keys:
        await redis.unlink(*keys)


async def _round(
    store: FiringStore,
    queues: QueueStore,
    lease: str,
    ids: list[str],
    version: str,
    n_round: int,
    fail_every: int,
    run_ms: int,
) -> None:
    """Fire every schedule once, then start and end each run as a worker would."""
    redis, k = store.redis, store.keys
    now = await store.time_ms()
    sched = now - 3  # due a few ms ago: an on-time fire
    await redis.zadd(k.schedules, dict.fromkeys(ids, sched))
    items = [FireItem(sid, version, sched, sched, sched + 60_000, "fire") for sid in ids]
    for start in range(0, len(items), BATCH):
        codes = await store.fire(lease, items[start : start + BATCH])
        assert codes is not None
        assert set(codes) == {1}, codes
    while True:  # until the stream is empty (a failed run is back on it at once)
        got = await queues.take([("default", "normal")], WORKER, BATCH)
        entries = [e for _, batch in got for e in batch]
        if not entries:
            break
        await queues.start(
            "default",
            WORKER,
            [
                (
                    eid,
                    f["execution_id"],
                    f["schedule_id"],
                    int(f["attempt"]),
                    fragment({"worker": WORKER, "deliveries": 1}),
                )
                for eid, f in entries
            ],
        )
        started = time.perf_counter()
        await anyio.sleep(run_ms / 1000)  # every run of the round takes about this long
        # What a handler's run took: the worker acknowledges it a moment after it returns.
        duration = (time.perf_counter() - started) * 1000 - 1
        done: list[Done] = []
        for i, (eid, f) in enumerate(entries):
            attempt = int(f["attempt"])
            if fail_every and attempt == 1 and (i + n_round) % fail_every == 0:
                message = "connection reset by peer while reading the report"
                extra = {"duration_ms": duration, "error_type": "ConnectionError", "error": message}
                nxt = {**f, "attempt": str(attempt + 1)}
                await queues.retry(
                    "default",
                    eid,
                    next_fields=[v for pair in nxt.items() for v in pair],
                    delay_ms=0,
                    execution_id=f["execution_id"],
                    schedule_id=f["schedule_id"],
                    attempt=attempt,
                    event="failed",
                    extra=fragment(extra),
                    run=run_record(
                        f,
                        queue="default",
                        status="failed",
                        worker=WORKER,
                        duration_ms=duration,
                        error_type="ConnectionError",
                        error=message,
                    ),
                )
                continue
            done.append(
                Done(
                    eid,
                    f["execution_id"],
                    f["schedule_id"],
                    attempt,
                    "completed",
                    fragment({"duration_ms": duration}),
                    run=run_record(
                        f,
                        queue="default",
                        status="completed",
                        worker=WORKER,
                        duration_ms=duration,
                    ),
                )
            )
        if done:
            await queues.complete("default", done)


async def measure(kind: str, n: int, runs: int, fail_every: int, run_ms: int) -> dict[str, Any]:
    with BenchServer(kind) as server:
        prefix = "rsched"
        settings = Settings(redis_url=server.url, prefix=prefix)
        redis = Redis.from_url(server.url, decode_responses=True)
        k = Keys(prefix)
        client = Client(redis, settings)
        store = FiringStore.from_settings(redis, settings, k)
        queues = QueueStore.from_settings(redis, settings, k)
        ids = [f"nightly-report-{i:04d}" for i in range(n)]
        await client.add_many(
            [
                Schedule(id=sid, task="reports.nightly", every=60, payload={"report": "daily"})
                for sid in ids
            ]
        )
        hash_rest = int(await redis.memory_usage(k.schedule(ids[0]), samples=0) or 0)
        index = int(await redis.memory_usage(k.schedules, samples=0) or 0)
        rest_bytes = hash_rest + index / n
        await queues.create_groups(["default"])
        lease, _ = await LeaseStore(redis, k).acquire("bench-memory", 3_600_000)
        assert lease is not None
        version = str(await redis.hget(k.schedule(ids[0]), "version"))
        for r in range(runs):
            await _round(store, queues, lease, ids, version, r, fail_every, run_ms)
        runs_len = int(await redis.xlen(k.runs))
        runs_bytes = int(await redis.memory_usage(k.runs, samples=0) or 0)
        history = [int(await redis.memory_usage(k.history(s), samples=0) or 0) for s in ids[:50]]
        lengths = [int(await redis.llen(k.history(s))) for s in ids[:50]]
        hash_busy = int(await redis.memory_usage(k.schedule(ids[0]), samples=0) or 0)
        sample = await redis.lrange(k.history(ids[0]), 0, 2)
        await redis.delete(k.runs, k.queue("default"), k.leader, k.fence, k.leader_ttl)
        await _drop(redis, k.ops("*"))
        # What the schedules' keys hold: used_memory falls by it when they are deleted.
        used_busy = await _used(redis)
        for start in range(0, n, BATCH):
            await redis.delete(*(k.history(s) for s in ids[start : start + BATCH]))
        used_no_history = await _used(redis)
        for start in range(0, n, BATCH):
            await redis.delete(*(k.schedule(s) for s in ids[start : start + BATCH]))
        await redis.delete(k.schedules)
        used_none = await _used(redis)
        version_info = server.version()
        await redis.aclose()
    per_history = (used_busy - used_no_history) / n
    per_schedule = (used_no_history - used_none) / n
    return {
        "server": version_info,
        "schedules": n,
        "runs": runs,
        "hash_and_index_at_rest": round(rest_bytes),
        "hash_at_rest": hash_rest,
        "hash_after_runs": hash_busy,
        "history_memory_usage": round(sum(history) / len(history)),
        "history_records": round(sum(lengths) / len(lengths), 1),
        "history_head": sample,
        "used_memory_per_schedule_hash_and_index": round(per_schedule),
        "used_memory_per_schedule_history": round(per_history),
        "used_memory_per_schedule_total": round(per_schedule + per_history),
        "runs_log_bytes_per_record": round(runs_bytes / max(runs_len, 1), 1),
        "runs_log_at_500k_mb": round(runs_bytes / max(runs_len, 1) * 500_000 / 1e6, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--kind", choices=["redis", "valkey"], default="redis")
    parser.add_argument("--schedules", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--fail-every", type=int, default=0, help="every n-th run fails once")
    parser.add_argument("--run-ms", type=int, default=250, help="how long each run takes")
    args = parser.parse_args(argv)
    result = anyio.run(measure, args.kind, args.schedules, args.runs, args.fail_every, args.run_ms)
    for name, value in result.items():
        print(f"{name:28} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
