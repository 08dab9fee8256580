"""The flows benchmark: creating a large flow, what a step costs beside a plain job, the hop of a
chain and the release of a join.

1. Creation: a 10,000-step flow (``chain(extract, group(9,998 parts), merge)``) is created with
   ``Client.run_flow`` on an emptied server (``--repeat`` times, best / median wall time). Its
   round trips are counted in this process (every write of commands to a connection; a
   pipeline's is one), its EVALSHA calls and their time inside Redis from ``INFO commandstats``
   (before and after; ``server_cmds`` also counts the commands the scripts call). The scripts
   are loaded by a one-step flow first: the counts are those of a warm client.
   lua/flow_create.lua writes ~1,000 steps a call. Memory is read right after the creation,
   before any worker runs: ``used_memory`` after minus before, per step, and the flow hash's own
   ``MEMORY USAGE`` (``SAMPLES 0``: every field). Then one worker process runs that flow to its
   end with ``SLOWLOG`` on (commands of 1 ms or more): the extract step's end releases the
   9,998 parts in one script call.
2. Overhead: N no-op jobs (5,000) written to the queue stream as plain jobs (as bench.worker
   does), then run by one ``rsched-worker`` process; and the same N as a flow,
   ``chain(group(N no-op steps), join)``, created first, then run by a fresh worker process.
   The rate is from the first job taken to the last one acknowledged (plain) or the flow
   completed (flow); the CPU times are the worker's and the server's over that window. In
   turns, ``--repeat`` times. Then a chain of 1,000 steps, one at a time: each step returns the
   time its handler ended, the next one notes how long after that it started (the worker's
   clock for both): the hop, p50 / p99 / max.
3. The join: ``--joins`` flows (5) of ``chain(group(100 parts), merge)`` run at once by one
   worker (concurrency 100: the parts of a flow end at the same moments); each merge appends to
   a list under its flow id when it runs. Every merge must have run exactly once, with its 100
   parents' results.

``python -m bench.flows [--quick] [--steps N] [--jobs N] [--chain N] [--fan-in N] [--joins N]
[--repeat N] [--concurrency N] [--kind redis|valkey] [--part create|overhead|chain|join]``
Every run uses a private server (bench._servers); port 6379 is never touched.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import anyio
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ResponseError

import rsched
from bench._servers import BenchServer
from bench.engine import read_slowlog
from bench.worker import _cpu_s, _fill, _pct, _spawn_worker, _stop, _table
from rsched import chain, group, step
from rsched._core.flows import STATE_CODES, Chain
from rsched._core.keys import GROUP, Keys
from rsched._core.settings import Settings

QUEUE = "bench"
APP = "bench.flows:worker"
# SLOWLOG threshold while the 10,000-step flow runs (µs).
SLOW_US = 1_000

# --- the worker the benchmark runs (``rsched-worker bench.flows:worker``) --------------------

worker = rsched.Worker(queues=[QUEUE])
_client: Redis | None = None


def _joins_key(prefix: str, flow_id: str) -> str:
    return "{" + prefix + "}:bench-joins:" + flow_id


@worker.task("bench.noop")
async def noop(job: rsched.Job) -> None:
    pass


@worker.task("bench.hop")
async def hop(job: rsched.Job) -> dict[str, float | None]:
    """A chain's step: how long after its parent's handler ended it started (ms), and when its
    own handler ends (its child's reference)."""
    start = time.time()
    parents = job.parent_results
    lag = None
    if parents and isinstance(parents[0], dict):
        lag = round((start - float(parents[0]["end"])) * 1000, 3)
    return {"lag": lag, "start": start, "end": time.time()}


@worker.task("bench.merge")
async def merge(job: rsched.Job) -> None:
    """A join: notes each of its runs, with how many parent results it got."""
    global _client
    if _client is None:
        _client = Redis.from_url(os.environ["RSCHED_REDIS_URL"], decode_responses=True)
    assert job.flow_id is not None
    key = _joins_key(os.environ["RSCHED_PREFIX"], job.flow_id)
    await _client.rpush(key, str(len(job.parent_results)))


# --- helpers ---------------------------------------------------------------------------------


class Bench:
    """One prefix on the private server, a client of it and a raw connection for readings."""

    def __init__(self, server: BenchServer, concurrency: int) -> None:
        self.server = server
        self.concurrency = concurrency
        self.prefix = f"bfl{uuid.uuid4().hex[:8]}"
        self.keys = Keys(self.prefix)
        self.stream = self.keys.queue(QUEUE)
        self.settings = Settings(redis_url=server.url, prefix=self.prefix)
        self.redis = Redis.from_url(server.url, decode_responses=True)
        self.client = rsched.Client(self.redis, self.settings)

    async def aclose(self) -> None:
        await self.redis.aclose()

    def spawn(self) -> Any:
        return _spawn_worker(self.server.url, self.prefix, self.concurrency, "warning", app=APP)

    async def state(self, flow_id: str) -> str | None:
        state = await self.redis.hget(self.keys.flow(flow_id), "state")
        return None if state is None else str(state)

    async def drained(self) -> bool:
        if int(await self.redis.xlen(self.stream)) > 0:
            return False
        return int((await self.redis.xpending(self.stream, GROUP))["pending"]) == 0

    async def commands(self) -> dict[str, tuple[int, int]]:
        """Each command's calls and µs so far (those scripts call counted too)."""
        stats = await self.redis.info("commandstats")
        return {
            k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for k, v in stats.items()
        }

    async def used_memory(self) -> int:
        return int((await self.redis.info("memory"))["used_memory"])


class Stalled(RuntimeError):
    """What the run waits for made no progress for a while."""


async def _wait(
    what: str,
    done: Callable[[], Awaitable[bool]],
    progress: Callable[[], Awaitable[object]] | None = None,
    stall_s: float = 20,
) -> None:
    """Until ``done``; raises Stalled when ``progress`` (a reading) stays the same ``stall_s``."""
    seen, since = None, time.monotonic()
    while not await done():
        if progress is not None:
            now = await progress()
            if now != seen:
                seen, since = now, time.monotonic()
            elif time.monotonic() - since > stall_s:
                raise Stalled(f"{what}: no progress for {stall_s:.0f} s (at {now!r})")
        elif time.monotonic() - since > 600:
            raise RuntimeError(f"{what}: not done within 600 s")
        await anyio.sleep(0.02)  # light polling: the bench must not compete for CPU


async def _timed_run(
    b: Bench,
    n: int,
    done: Callable[[], Awaitable[bool]],
    progress: Callable[[], Awaitable[object]] | None = None,
) -> tuple[float, float, float]:
    """A fresh worker process runs what waits in the stream (``n`` jobs at first) until
    ``done``: seconds from the first job taken, and the worker's and the server's CPU s."""
    proc = b.spawn()
    try:
        deadline = time.monotonic() + 120
        while not await _taken(b, n):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the worker took no job within 120 s")
            await anyio.sleep(0.005)
        first, cpu0, srv0 = time.perf_counter(), _cpu_s(proc.pid), _cpu_s(b.server.pid())
        await _wait("the run", done, progress)
        took = time.perf_counter() - first
        return took, _cpu_s(proc.pid) - cpu0, _cpu_s(b.server.pid()) - srv0
    finally:
        _stop(proc)


async def _taken(b: Bench, n: int) -> bool:
    """A job of the ``n`` in the stream was taken: one is pending, or fewer are left (a flow's
    step ended and acknowledged adds its children in the same call: the length alone may
    never fall)."""
    try:
        if int((await b.redis.xpending(b.stream, GROUP))["pending"]) > 0:
            return True
    except ResponseError:  # no group yet: the worker has not read
        pass
    return int(await b.redis.xlen(b.stream)) < n


def _best_median(
    values: Sequence[float], best: Callable[[Sequence[float]], float] = min, digits: int = 3
) -> str:
    return f"{best(values):,.{digits}f} / {statistics.median(values):,.{digits}f}"


@contextmanager
def _round_trips() -> Iterator[list[int]]:
    """Counts the writes of commands to any server connection in this process (a pipeline's
    commands are one write): the round trips, read by the caller from ``[0]`` when done."""
    count = [0]
    original = AbstractConnection.send_packed_command

    async def counted(self: AbstractConnection, *args: Any, **kwargs: Any) -> None:
        count[0] += 1
        await original(self, *args, **kwargs)

    AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
    try:
        yield count
    finally:
        AbstractConnection.send_packed_command = original  # type: ignore[method-assign]


# --- 1. creation -------------------------------------------------------------------------------


def _wide(parts: int) -> Chain:
    return chain(
        step("bench.noop", {"what": "extract"}),
        group(step("bench.noop", {"part": i}) for i in range(parts)),
        step("bench.noop", {"what": "merge"}),
    )


async def creation(server: BenchServer, steps: int, repeat: int, concurrency: int) -> None:
    b = Bench(server, concurrency)
    try:
        flow = _wide(steps - 2)
        await b.client.run_flow(step("bench.noop"), queue=QUEUE)  # loads the scripts
        rows = []
        for _ in range(repeat):
            await b.redis.flushall(asynchronous=False)
            mem0 = await b.used_memory()
            cmds0 = await b.commands()
            with _round_trips() as trips:
                started = time.perf_counter()
                run = await b.client.run_flow(flow, queue=QUEUE)
                took = time.perf_counter() - started
            cmds1 = await b.commands()
            mem1 = await b.used_memory()
            fkey = b.keys.flow(run.flow_id)
            usage = await b.redis.memory_usage(fkey, samples=0) or 0
            calls = {k: v[0] - cmds0.get(k, (0, 0))[0] for k, v in cmds1.items() if k != "info"}
            script_us = cmds1["evalsha"][1] - cmds0.get("evalsha", (0, 0))[1]
            rows.append(
                {
                    "steps": run.steps,
                    "roots": run.roots,
                    "run_flow_s": round(took, 3),
                    "us_per_step": round(took / run.steps * 1e6, 1),
                    "round_trips": trips[0],
                    "evalsha": calls.get("evalsha", 0),
                    "in_scripts_s": round(script_us / 1e6, 3),
                    "server_cmds": sum(calls.values()),
                    "B_per_step": round((mem1 - mem0) / run.steps, 1),
                    "hash_B_per_step": round(usage / run.steps, 1),
                    "hash_fields": await b.redis.hlen(fkey),
                    "encoding": await b.redis.object("encoding", fkey),
                }
            )
            print(_table(rows[-1:], list(rows[-1])), flush=True)
        print(f"\nrun_flow of {steps:,} steps, best / median of {repeat}: "
              f"{_best_median([r['run_flow_s'] for r in rows])} s; "
              f"round trips {sorted({r['round_trips'] for r in rows})}, "
              f"EVALSHA {sorted({r['evalsha'] for r in rows})}", flush=True)  # fmt: skip
        # The last flow created, run to its end: where its scripts spend their time.
        node = Redis.from_url(server.url, decode_responses=True)
        await node.config_set("slowlog-log-slower-than", SLOW_US)
        await node.config_set("slowlog-max-len", 10_000)
        await node.slowlog_reset()
        stalled = ""
        try:
            took, wcpu, scpu = await _timed_run(
                b, 1, lambda: _ended(b, run.flow_id), lambda: b.redis.hget(fkey, "left")
            )
        except Stalled as exc:
            stalled, took, wcpu, scpu = str(exc), float("nan"), float("nan"), float("nan")
        slow = [(us, name) for us, name, _ in await read_slowlog(node)]
        await node.config_set("slowlog-log-slower-than", 10_000)
        await node.aclose()
        worst = max(slow, default=(0, "-"))
        last = str(run.steps)
        left, merge_s, merge_w = [
            None if v is None else str(v)
            for v in await b.redis.hmget(fkey, ["left", f"{last}.s", f"{last}.w"])
        ]
        row = {
            "steps": run.steps,
            "state": await b.state(run.flow_id),
            "left": left,
            "merge": f"{STATE_CODES.get(merge_s or '', 'waiting')} (waits for {merge_w or 0})",
            "seconds": round(took, 3),
            "steps_per_s": round(run.steps / took) if took == took else "-",
            "worker_cpu_s": round(wcpu, 2),
            "server_cpu_s": round(scpu, 2),
            f"cmds_>=_{SLOW_US // 1000}ms": len(slow),
            "slowest_ms": round(worst[0] / 1000, 2),
            "slowest": worst[1],
        }
        print(f"\nthe {steps:,}-step flow run by one worker (concurrency {concurrency})")
        print(_table([row], list(row)), flush=True)
        if stalled:
            print(f"STALLED: {stalled}; pending jobs {await b.redis.xpending(b.stream, GROUP)}")
    finally:
        await b.aclose()


async def _ended(b: Bench, flow_id: str) -> bool:
    return await b.state(flow_id) not in (None, "creating", "running")


# --- 2. overhead against plain jobs, and a chain's hop -----------------------------------------


async def _plain(b: Bench, n: int) -> dict[str, Any]:
    await _fill(b.redis, b.stream, n)
    took, wcpu, scpu = await _timed_run(b, n, b.drained)
    return _rate_row("plain jobs", n, took, wcpu, scpu)


async def _as_flow(b: Bench, n: int) -> dict[str, Any]:
    flow = chain(group(step("bench.noop") for _ in range(n)), step("bench.noop"))
    run = await b.client.run_flow(flow, queue=QUEUE)
    fkey = b.keys.flow(run.flow_id)
    took, wcpu, scpu = await _timed_run(
        b, n, lambda: _ended(b, run.flow_id), lambda: b.redis.hget(fkey, "left")
    )
    assert await b.state(run.flow_id) == "completed", await b.state(run.flow_id)
    return _rate_row(f"flow: group of {n:,} + join", n + 1, took, wcpu, scpu)


def _rate_row(what: str, jobs: int, took: float, wcpu: float, scpu: float) -> dict[str, Any]:
    return {
        "what": what,
        "jobs": jobs,
        "seconds": round(took, 3),
        "jobs_per_s": round(jobs / took),
        "us_per_job": round(took / jobs * 1e6, 1),
        "worker_cpu_us": round(wcpu / jobs * 1e6, 1),
        "server_cpu_us": round(scpu / jobs * 1e6, 1),
    }


async def overhead(server: BenchServer, n: int, repeat: int, concurrency: int) -> None:
    rows: dict[str, list[dict[str, Any]]] = {"plain": [], "flow": []}
    for _ in range(repeat):  # in turns: the VM's speed swings, runs side by side share it
        for kind, run in (("plain", _plain), ("flow", _as_flow)):
            b = Bench(server, concurrency)
            try:
                await b.redis.flushall(asynchronous=False)
                rows[kind].append(await run(b, n))
            finally:
                await b.aclose()
            print(_table(rows[kind][-1:], list(rows[kind][-1])), flush=True)
    summary = []
    for col in ("jobs_per_s", "us_per_job", "worker_cpu_us", "server_cpu_us"):
        best, digits = (max, 0) if col == "jobs_per_s" else (min, 1)
        plain = [float(r[col]) for r in rows["plain"]]
        flow = [float(r[col]) for r in rows["flow"]]
        summary.append(
            {
                "per job": col,
                "plain best / median": _best_median(plain, best, digits),
                "flow best / median": _best_median(flow, best, digits),
                "flow - plain (best)": round(best(flow) - best(plain), 1),
                "flow - plain (median)": round(
                    statistics.median(flow) - statistics.median(plain), 1
                ),
            }
        )
    print(f"\n{n:,} no-op jobs, one worker process (concurrency {concurrency}), "
          f"{repeat} runs each in turns")  # fmt: skip
    print(_table(summary, list(summary[0])), flush=True)


async def hops(server: BenchServer, length: int, concurrency: int) -> None:
    b = Bench(server, concurrency)
    try:
        await b.redis.flushall(asynchronous=False)
        run = await b.client.run_flow(chain(*(step("bench.hop") for _ in range(length))),
                                      queue=QUEUE)  # fmt: skip
        _, wcpu, scpu = await _timed_run(b, 1, lambda: _ended(b, run.flow_id))
        info = await b.client.flow(run.flow_id)
        results = [s.result for s in info.steps if isinstance(s.result, dict)]
        lags = sorted(float(r["lag"]) for r in results if r.get("lag") is not None)
        if not lags:
            raise RuntimeError("no hop measured: the steps' results were not kept")
        # The chain's span on the worker's clock: the first step's start to the last one's end.
        span = float(results[-1]["end"]) - float(results[0]["start"])
        row = {
            "steps": length,
            "state": info.state,
            "hops": len(lags),
            "results": len(results),
            "seconds": round(span, 3),
            "ms_per_step": round(span / length * 1000, 3),
            "hop_p50_ms": round(_pct(lags, 50), 3),
            "hop_p99_ms": round(_pct(lags, 99), 3),
            "hop_max_ms": round(lags[-1], 3),
            "worker_cpu_us": round(wcpu / length * 1e6),
            "server_cpu_us": round(scpu / length * 1e6),
        }
        print(f"\na chain of {length:,} steps, one worker process: a step's handler end to the "
              "next one's start")  # fmt: skip
        print(_table([row], list(row)), flush=True)
    finally:
        await b.aclose()


# --- 3. the join ---------------------------------------------------------------------------------


async def joins(server: BenchServer, parts: int, flows: int, concurrency: int) -> None:
    b = Bench(server, concurrency)
    try:
        await b.redis.flushall(asynchronous=False)
        ids = []
        for _ in range(flows):
            flow = chain(group(step("bench.noop") for _ in range(parts)), step("bench.merge"))
            ids.append((await b.client.run_flow(flow, queue=QUEUE)).flow_id)

        async def all_done() -> bool:
            states = [await b.state(fid) for fid in ids]
            return all(s not in (None, "running") for s in states) and await b.drained()

        await _timed_run(b, parts * flows, all_done)
        rows = []
        for fid in ids:
            runs = [str(r) for r in await b.redis.lrange(_joins_key(b.prefix, fid), 0, -1)]
            info = await b.client.flow(fid)
            rows.append(
                {
                    "flow": fid[:12],
                    "state": info.state,
                    "parts": parts,
                    "merge_runs": len(runs),
                    "parent_results": ",".join(runs),
                    "merge_attempts": info.steps[-1].attempts,
                }
            )
        print(f"\n{flows} fan-ins of {parts} parts run at once: each merge's runs (must be 1)")
        print(_table(rows, list(rows[0])), flush=True)
        bad = [r for r in rows if r["merge_runs"] != 1 or r["state"] != "completed"]
        if bad:
            raise RuntimeError(f"a join did not run exactly once: {bad}")
    finally:
        await b.aclose()


# --- main ----------------------------------------------------------------------------------------


async def _main(args: argparse.Namespace) -> None:
    with BenchServer(args.kind) as server:
        print(
            f"{server.version()} · python {platform.python_version()} · "
            f"{os.cpu_count()} cores · {platform.machine()} · load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        if args.part in (None, "create"):
            print(f"\n--- creating a flow of {args.steps:,} steps ---", flush=True)
            await creation(server, args.steps, args.repeat, args.concurrency)
        if args.part in (None, "overhead"):
            print(f"\n--- {args.jobs:,} steps against as many plain jobs ---", flush=True)
            await overhead(server, args.jobs, args.repeat, args.concurrency)
        if args.part in (None, "chain"):
            await hops(server, args.chain, args.concurrency)
        if args.part in (None, "join"):
            await joins(server, args.fan_in, args.joins, args.concurrency)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flows", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, 1 run, a chain of 200")
    parser.add_argument("--steps", type=int, default=10_000, help="creation: the flow's steps")
    parser.add_argument("--jobs", type=int, default=5_000, help="overhead: jobs and steps")
    parser.add_argument("--chain", type=int, default=1_000, help="the chain's steps")
    parser.add_argument("--fan-in", type=int, default=100, help="a join's parents")
    parser.add_argument("--joins", type=int, default=5, help="fan-ins run at once")
    parser.add_argument("--repeat", type=int, default=3, help="creation and overhead runs")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--kind", default="redis", choices=["redis", "valkey"])
    parser.add_argument(
        "--part", choices=["create", "overhead", "chain", "join"], help="only this part"
    )
    args, _ = parser.parse_known_args(argv)  # options of the other benchmarks are ignored
    if args.quick:
        args.jobs, args.chain, args.repeat = min(args.jobs, 2_000), min(args.chain, 200), 1
    if args.steps < 3:
        parser.error("--steps: at least 3 (an extract, a part and a merge)")
    anyio.run(_main, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
