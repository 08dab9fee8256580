"""One rsched Scheduler in its own process, so a benchmark can read its CPU time alone.

``python -m bench._scheduler_proc [--profile FILE]``: settings come from ``RSCHED_*`` like the
real scheduler; SIGTERM or SIGINT stops it gracefully. With ``--profile`` the whole run is
recorded with cProfile and the stats are written to FILE (plus a readable FILE.txt).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import signal
import sys

import anyio

from rsched._core.log import configure_logging
from rsched._core.settings import Settings
from rsched._redis.connection import connect
from rsched._scheduler.readiness import operate_scheduler
from rsched._scheduler.scheduler import Scheduler


async def _serve() -> None:
    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    redis = connect(settings)
    scheduler = Scheduler(redis, settings, owner="bench")
    try:
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        scheduler.stop()
                        return

            tg.start_soon(stop_on_signal)
            if settings.metrics_port is not None:  # bench.engine --metrics
                await tg.start(operate_scheduler, scheduler, settings)
            await tg.start(scheduler.run)
            print("bench-scheduler ready", file=sys.stderr, flush=True)
    finally:
        await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._scheduler_proc")
    parser.add_argument("--profile", metavar="FILE", help="write cProfile stats to FILE")
    args = parser.parse_args(argv)
    if not args.profile:
        anyio.run(_serve)
        return 0
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        anyio.run(_serve)
    finally:
        profiler.disable()
        profiler.dump_stats(args.profile)
        with open(f"{args.profile}.txt", "w") as out:
            stats = pstats.Stats(profiler, stream=out).sort_stats("tottime")
            stats.print_stats(40)
            stats.sort_stats("cumulative").print_stats(40)
    return 0


if __name__ == "__main__":
    sys.exit(main())
