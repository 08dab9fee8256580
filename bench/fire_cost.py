"""``python -m bench.fire_cost [--lua DIR]``: the server time fire.lua takes per fired item.

A herd of due schedules (all on time, one spec) is fired through the schedule store in
batches; the script reports the microseconds each call took by the server's clock, so the
number excludes the client and the network. ``--lua`` runs the scripts of another directory
(a copy of an earlier lua/, say) to compare two versions of the scripts on the same machine:
run them in turns, a few rounds each, and compare best and median. Needs redis-server (Valkey
freezes TIME inside a script and reports no time).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import anyio
from redis.asyncio import Redis

from bench._servers import BenchServer
from rsched._core.codes import Code
from rsched._core.fire_plan import FireItem, FireSpec
from rsched._core.keys import Keys
from rsched._core.schedule import Schedule
from rsched._redis import scripts
from rsched._store.firing import FiringStore
from rsched._store.leases import LeaseStore
from rsched._store.schedules import ScheduleStore


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.fire_cost", description=__doc__)
    p.add_argument("--lua", type=Path, help="the scripts' directory (default: lua/)")
    p.add_argument("--schedules", type=int, default=20_000, help="items fired per round")
    p.add_argument("--batch", type=int, default=1000, help="items per fire call")
    p.add_argument("--rounds", type=int, default=5, help="rounds (best and median reported)")
    p.add_argument("--overlap", default="skip", help="the schedules' overlap policy")
    p.add_argument("--debounce", help="the schedules' debounce (each fire opens a window): 5s, 1m")
    return p


async def one_round(
    store: ScheduleStore, n: int, batch: int, overlap: str, debounce: str | None = None
) -> float:
    """Fire ``n`` due schedules; returns the server µs per fired item."""
    redis = store.redis
    await redis.flushdb()
    debounced = {} if debounce is None else {"debounce": debounce}
    await store.save(Schedule(id="s-0", task="t", every=3600, overlap=overlap, **debounced))
    (fields,) = await store.fields(["s-0"])
    stored = await redis.hgetall(store.keys.schedule("s-0"))
    pairs = [text for pair in stored.items() for text in pair]
    spec = FireSpec.from_hash(fields)
    now = await store.time_ms()
    due = now - 10
    ids = [f"s-{i}" for i in range(n)]
    async with redis.pipeline(transaction=False) as pipe:
        for sid in ids:
            pipe.hset(store.keys.schedule(sid), items=pairs)
        pipe.zadd(store.keys.schedules, dict.fromkeys(ids, due))
        await pipe.execute()
    lease, _ = await LeaseStore(redis, store.keys).acquire("bench", 600_000)
    assert lease is not None
    firing = FiringStore(redis, store.keys, history_limit=store.history_limit)
    version = fields["version"]
    for first in range(0, n, batch):
        items = [
            FireItem(sid, version, due, due, due + 3_600_000, "fire", 0, spec)
            for sid in ids[first : first + batch]
        ]
        codes = await firing.fire(lease, items)
        assert codes is not None
        assert set(codes) == {Code.FIRED}, codes
    if not firing.fire_timed_items:
        raise SystemExit("the server reports no script time (Valkey?): use redis-server")
    return float(firing.fire_server_us / firing.fire_timed_items)


async def run(args: argparse.Namespace) -> list[float]:
    if args.lua is not None:
        directory = args.lua.resolve()
        scripts.lua_dir = lambda: directory
        scripts.source.cache_clear()
    with BenchServer("redis") as server:
        redis = Redis.from_url(server.url, decode_responses=True)
        try:
            store = ScheduleStore(redis, Keys("rsched"), history_limit=15)
            return [
                await one_round(store, args.schedules, args.batch, args.overlap, args.debounce)
                for _ in range(args.rounds)
            ]
        finally:
            await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    per_item = anyio.run(run, args)
    print(
        f"fire.lua ({args.lua or 'lua/'}): {args.schedules} items in batches of {args.batch}, "
        f"overlap={args.overlap}"
        + ("" if args.debounce is None else f", debounce={args.debounce}")
        + f": µs per item best {min(per_item):.2f} "
        f"median {statistics.median(per_item):.2f} "
        f"({', '.join(f'{v:.2f}' for v in per_item)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
