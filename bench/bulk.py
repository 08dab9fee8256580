"""The bulk-create benchmark: N schedules through add_many, its parts, and memory at rest.

Against a private server (bench._servers), flushed between runs; the client runs in this
process. What each number means: bench/README.md, "Bulk create".

``python -m bench.bulk [--quick] [--repeat N] [--kind redis|valkey] [--sizes N ...]``
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from redis.asyncio import Redis

from bench._os import proc_cpu_s
from bench._servers import BenchServer
from bench.engine import RESULTS_DIR, Ctx, machine, table
from rsched import Client, Schedule, Settings
from rsched._core.bulk import Validator
from rsched._redis.connection import connect

PREFIX = "bench"


def schedules(n: int, kind: str) -> list[Schedule]:
    trigger: dict[str, Any] = {"cron": "0 * * * *"} if kind == "cron" else {"every": 3600}
    return [
        Schedule(
            id=f"mem-{i:06d}", task="bench.task", payload={"report": "daily", "n": 1}, **trigger
        )
        for i in range(n)
    ]


def dicts(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"mem-{i:06d}",
            "task": "bench.task",
            "every": 3600,
            "payload": {"report": "daily", "n": 1},
        }
        for i in range(n)
    ]


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


async def script_s(redis: Redis) -> float:
    stats = await redis.info("commandstats")
    usec = sum(int(v["usec"]) for k, v in stats.items() if k.startswith("cmdstat_evalsha"))
    return usec / 1e6


async def one_size(ctx: Ctx, client: Client, n: int, repeat: int) -> dict[str, Any]:
    redis = ctx.redis
    out: dict[str, Any] = {"n": n}

    # CPU time of this process: on a shared machine, wall time also counts other work.
    started = time.process_time()
    objs = schedules(n, "every")
    out["build_us"] = round((time.process_time() - started) / n * 1e6, 1)
    validator = Validator(client.settings.max_payload_bytes)
    started = time.process_time()
    validator.validate(objs, mode="add")
    out["validate_us"] = round((time.process_time() - started) / n * 1e6, 2)
    raw = dicts(n)
    started = time.process_time()
    Validator(client.settings.max_payload_bytes).validate(raw, mode="add")
    out["validate_dict_us"] = round((time.process_time() - started) / n * 1e6, 2)

    runs: dict[str, list[float]] = {"every": [], "cron": [], "dicts": []}
    inputs: dict[str, Any] = {"every": objs, "cron": schedules(n, "cron"), "dicts": raw}
    server: list[float] = []
    cpu: list[tuple[float, float]] = []
    pid = ctx.server.pid()
    for _ in range(repeat):
        for name, entries in inputs.items():
            await ctx.reset()
            s0, c0, r0 = await script_s(redis), time.process_time(), proc_cpu_s(pid)
            runs[name].append(await timed(functools.partial(client.add_many, entries)))
            if name == "every":
                server.append(await script_s(redis) - s0)
                cpu.append((time.process_time() - c0, proc_cpu_s(pid) - r0))
    for name, times in runs.items():
        out[f"add_many_{name}_best_s"] = round(min(times), 3)
        out[f"add_many_{name}_median_s"] = round(statistics.median(times), 3)
    out["add_many_script_s"] = round(statistics.median(server), 3)
    out["add_many_client_cpu_s"] = round(statistics.median(c for c, _ in cpu), 3)
    out["add_many_redis_cpu_s"] = round(statistics.median(r for _, r in cpu), 3)
    # On two idle cores the wall time cannot exceed the two processes' CPU time together.
    out["add_many_cpu_sum_s"] = round(min(c + r for c, r in cpu), 3)
    # Re-applying the same list: every schedule is read and found unchanged; nothing written.
    out["upsert_many_unchanged_s"] = round(await timed(lambda: client.upsert_many(objs)), 3)
    out["upsert_many_replace_s"] = round(
        await timed(lambda: client.upsert_many(schedules(n, "cron"))), 3
    )

    # Memory at rest after a bulk create, in two halves (see bench/README.md, Memory).
    await ctx.reset()
    used0 = await ctx.used_memory()
    await client.add_many(objs[: n // 2])
    await ctx.drop_op_keys()
    used_half = await ctx.used_memory()
    await client.add_many(objs[n // 2 :])
    await ctx.drop_op_keys()
    used1 = await ctx.used_memory()
    out["bytes_per_schedule"] = round((used1 - used0) / n, 1)
    out["marginal_bytes_per_schedule"] = round((used1 - used_half) / (n - n // 2), 1)

    # The same writes as pipelined upsert.lua calls (one script call a schedule), no checks.
    await ctx.reset()
    now = await ctx.now_ms()
    spec = objs[0].spec_fields()
    ids = [s.id for s in objs]
    out["pipelined_upsert_s"] = round(
        await ctx.create(ids, lambda i: spec, lambda i: now + 3_600_000, now), 3
    )
    # One at a time through add (a sample, scaled to n).
    await ctx.reset()
    sample = objs[: min(n, 2_000)]
    took = await timed(lambda: _one_by_one(client, sample))
    out["add_one_by_one_s"] = round(took * n / len(sample), 1)
    return out


async def _one_by_one(client: Client, sample: list[Schedule]) -> None:
    for s in sample:
        await client.add(s)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.bulk", description=__doc__)
    p.add_argument("--quick", action="store_true", help="10k schedules, one run")
    p.add_argument("--repeat", type=int, default=0, help="runs per size (best + median)")
    p.add_argument("--kind", choices=["redis", "valkey"], default="redis", help="server binary")
    p.add_argument("--sizes", type=int, nargs="+", help="schedule counts (default 100000)")
    return p


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = args.sizes or ([10_000] if args.quick else [100_000])
    repeat = args.repeat or (1 if args.quick else 3)
    results: dict[str, Any] = {"machine": machine(), "sizes": []}
    with BenchServer(args.kind) as server:
        results["server"] = server.version()
        redis = connect(server.url)
        try:
            ctx = Ctx.new(server, redis, None)
            client = Client(redis, Settings(redis_url=server.url, prefix=PREFIX))
            for n in sizes:
                results["sizes"].append(await one_size(ctx, client, n, repeat))
        finally:
            await redis.aclose()
    rows = [
        [
            r["n"],
            f"{r['add_many_every_best_s']} / {r['add_many_every_median_s']}",
            f"{r['add_many_cron_best_s']} / {r['add_many_cron_median_s']}",
            f"{r['add_many_dicts_best_s']} / {r['add_many_dicts_median_s']}",
            r["add_many_script_s"],
            f"{r['add_many_client_cpu_s']} / {r['add_many_redis_cpu_s']}",
            r["add_many_cpu_sum_s"],
            r["validate_us"],
            r["validate_dict_us"],
            r["build_us"],
            r["pipelined_upsert_s"],
            r["add_one_by_one_s"],
        ]
        for r in results["sizes"]
    ]
    print(
        table(
            f"bulk create ({results['server']}, best / median of {repeat})",
            [
                "n",
                "add_many every s",
                "cron s",
                "dicts s",
                "script s",
                "CPU client / redis s",
                "CPU sum s (best)",
                "check µs/sched",
                "dict µs/sched",
                "Schedule() µs",
                "pipelined upsert.lua s",
                "add one by one s",
            ],
            rows,
        )
    )
    print(
        table(
            "bulk memory and re-apply",
            [
                "n",
                "B/schedule at rest",
                "per added (slope)",
                "upsert_many unchanged s",
                "upsert_many replace s",
            ],
            [
                [
                    r["n"],
                    r["bytes_per_schedule"],
                    r["marginal_bytes_per_schedule"],
                    r["upsert_many_unchanged_s"],
                    r["upsert_many_replace_s"],
                ]
                for r in results["sizes"]
            ],
        )
    )
    RESULTS_DIR.mkdir(exist_ok=True)
    path = Path(RESULTS_DIR) / f"bulk-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=2))
    return results


def main(argv: list[str] | None = None) -> int:
    args, unknown = parser().parse_known_args(argv)
    if unknown:
        print(f"bench.bulk: ignoring {' '.join(unknown)}", file=sys.stderr)
    anyio.run(run, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
