"""rsched.testing: a year of a daily schedule in Europe/Rome (365 runs, both DST days) through
TestEnv.advance, on fakeredis and on the embedded server: wall time of the advance.

    .venv/bin/python -m bench.test_kit [--repeat 3] [--servers fake,embedded]
"""

from __future__ import annotations

import argparse
import time

import anyio

import rsched
from rsched.testing import TestEnv


def worker() -> rsched.Worker:
    w = rsched.Worker(["default"])

    @w.task("reports.nightly")
    async def nightly(job: rsched.Job) -> None:
        pass

    return w


async def year(server: str) -> tuple[float, int]:
    """(seconds the advance took, runs it returned)."""
    async with TestEnv(worker(), start="2027-01-01T00:00:00+01:00", server=server) as env:
        await env.client.add(
            rsched.Schedule(
                id="nightly", task="reports.nightly", cron="0 2 * * *", timezone="Europe/Rome"
            )
        )
        started = time.perf_counter()
        ran = await env.advance("365d")
        return time.perf_counter() - started, len(ran)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--servers", default="fake,embedded")
    args = parser.parse_args()
    print(f"{'server':<10} {'runs':>5} {'best s':>8} {'median s':>9}")
    for server in args.servers.split(","):
        results = [anyio.run(year, server) for _ in range(args.repeat)]
        times = sorted(t for t, _ in results)
        print(f"{server:<10} {results[0][1]:>5} {times[0]:>8.2f} {times[len(times) // 2]:>9.2f}")


if __name__ == "__main__":
    main()
