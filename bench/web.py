"""The web benchmark: server time of the dashboard's pages and the API at 100,000 schedules,
and the Redis commands each page refresh sends.

The app (``rsched.web.create_app``) runs in this process and is called through httpx's ASGI
transport, so a request's time is the server's own (routing, SDK reads, rendering), without a
network or a browser. Redis is a private server (bench._servers) filled through the same
upsert.lua the SDK uses; 1 % of the schedules are paused. Commands are counted with
``INFO commandstats`` around one request (``CONFIG RESETSTAT`` first; the INFO call itself is
subtracted).

``python -m bench.web [--quick] [--kind redis|valkey] [--sizes N,...] [--repeat N]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import anyio
import httpx
from redis.asyncio import Redis

from bench._servers import BenchServer
from bench.engine import DAY_MS, RESULTS_DIR, Ctx, machine, pct, table, template
from rsched import Client, Settings
from rsched.web import create_app

#: The pages and API calls measured: (name, path). ``{id}`` is a schedule in the middle.
REQUESTS = (
    ("schedules page", "/schedules"),
    ("schedules live part (poll)", "/_live/schedules"),
    ("GET /api/v1/schedules", "/api/v1/schedules"),
    ("GET /api/v1/schedules?limit=1000", "/api/v1/schedules?limit=1000"),
    ("search: exact id", "/api/v1/schedules?q={id}"),
    ("search: id substring (one budget)", "/api/v1/schedules?q=zzz"),
    ("schedule page", "/schedules/{id}"),
    ("schedule live part (poll)", "/_live/schedules/{id}"),
    ("overview live part (poll)", "/_live/overview"),
    ("queues live part (poll)", "/_live/queues"),
    ("GET /api/v1/stats", "/api/v1/stats"),
)
#: The live parts an open page polls, whose Redis commands are counted.
POLLED = ("/_live/overview", "/_live/schedules", "/_live/schedules/{id}", "/_live/queues")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.web", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="10,000 schedules, fewer repeats")
    p.add_argument("--kind", default="redis", choices=["redis", "valkey"])
    p.add_argument("--sizes", help="schedule counts, comma separated (default 100000)")
    p.add_argument("--repeat", type=int, help="requests per measurement (default 30)")
    return p


async def _fill(ctx: Ctx, n: int) -> None:
    await ctx.reset()
    ids = [f"sched-{i:06d}" for i in range(n)]
    spec = template("every")
    now = await ctx.now_ms()
    # Next runs spread over a day, as in a real deployment.
    await ctx.create(ids, lambda i: spec, lambda i: now + 60_000 + i * DAY_MS // n, now)
    paused = ids[:: max(1, n // max(1, n // 100))][: n // 100]
    async with Client(ctx.redis, Settings(prefix=ctx.keys.prefix)) as client:
        for sid in paused:
            await client.pause(sid, "bench")
    await ctx.drop_op_keys()


async def _commands(redis: Redis) -> dict[str, int]:
    stats = await redis.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


async def measure(ctx: Ctx, n: int, repeat: int) -> dict[str, Any]:
    print(f"  filling {n:,} schedules", flush=True)
    await _fill(ctx, n)
    settings = Settings(redis_url=ctx.server.url, prefix=ctx.keys.prefix)
    middle = f"sched-{n // 2:06d}"
    async with Client.from_settings(settings) as client:
        app = create_app(client)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            rows: list[dict[str, Any]] = []
            for name, path in REQUESTS:
                url = path.format(id=middle)
                times = []
                for _ in range(repeat):
                    started = time.perf_counter()
                    r = await http.get(url)
                    times.append((time.perf_counter() - started) * 1000)
                    if r.status_code != 200:
                        raise RuntimeError(f"{url}: {r.status_code} {r.text[:200]}")
                times.sort()
                rows.append(
                    {
                        "request": name,
                        "path": url,
                        "p50_ms": statistics.median(times),
                        "p95_ms": pct(times, 0.95),
                        "max_ms": times[-1],
                        "bytes": len(r.content),
                    }
                )
                print(f"  {name}: p50 {rows[-1]['p50_ms']:.1f} ms", flush=True)
            counts: list[dict[str, Any]] = []
            for path in POLLED:
                url = path.format(id=middle)
                app.state.cache._items.clear()  # type: ignore[attr-defined]
                await ctx.redis.config_resetstat()
                await http.get(url)
                calls = await _commands(ctx.redis)
                calls["info"] = calls.get("info", 1) - 1
                calls = {k: v for k, v in sorted(calls.items()) if v and k != "config|resetstat"}
                counts.append({"path": url, "commands": sum(calls.values()), "by_command": calls})
    return {"n": n, "requests": rows, "commands_per_refresh": counts}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
    sizes = sizes or ([10_000] if args.quick else [100_000])
    repeat = args.repeat or (10 if args.quick else 30)
    report: dict[str, Any] = {"machine": machine(), "results": []}
    with BenchServer(args.kind) as server:
        report["server"] = server.version()
        redis = Redis.from_url(server.url, decode_responses=True)
        try:
            ctx = Ctx.new(server, redis, None)
            for n in sizes:
                result = await measure(ctx, n, repeat)
                report["results"].append(result)
                _print(result, report["server"], repeat)
        finally:
            await redis.aclose()
    return report


def _print(result: dict[str, Any], server: str, repeat: int) -> None:
    n = result["n"]
    print(
        "\n"
        + table(
            f"Server time of one request, {n:,} schedules ({server}; {repeat} requests each)",
            ["request", "p50 ms", "p95 ms", "max ms", "bytes"],
            [
                [r["request"], r["p50_ms"], r["p95_ms"], r["max_ms"], r["bytes"]]
                for r in result["requests"]
            ],
        )
    )
    print(
        "\n"
        + table(
            "Redis commands per refresh of a page's live part (INFO commandstats)",
            ["live part", "commands", "by command"],
            [
                [
                    c["path"],
                    c["commands"],
                    " ".join(f"{k}={v}" for k, v in c["by_command"].items()),
                ]
                for c in result["commands_per_refresh"]
            ],
        )
    )


def main(argv: list[str] | None = None) -> int:
    # Unknown options belong to another benchmark when run through ``python -m bench``.
    args, unknown = parser().parse_known_args(argv)
    if unknown:
        print(f"bench.web: ignoring {' '.join(unknown)}", file=sys.stderr)
    report = anyio.run(run, args)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = RESULTS_DIR / f"web-{stamp}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
