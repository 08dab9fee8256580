"""A million schedules on one Redis: created, at rest, in steady state, and as one herd.

``python -m bench.million [--n 1000000] [--kind redis|valkey] [--only create steady herd]
[--steady-s 60] [--workers 1]`` (``make bench-million``: minutes, not part of ``make bench``).

Everything goes through the public surfaces, as a deployment would use them: schedules are
created with ``Client.add_many`` in the bench's process, and the scheduler and workers are the
console scripts' code (``rsched-scheduler``, ``rsched-worker bench.million:worker``) in child
processes with default settings, so their CPU and memory are their own.

- *create*: N schedules, 80 % crons (half daily, half hourly, at spread minutes and hours in
  twelve zones) and 20 % ``every`` 1-60 s, through one ``add_many``; its wall time, the client's
  CPU, and ``used_memory`` per schedule at rest (the replay-protection hashes dropped first).
- *steady*: that fleet with a scheduler and ``--workers`` workers running. Over ``--steady-s``
  after a warm-up: fire lag by each run's own times (``fired_at - scheduled_at`` of the runs
  log's records), the scheduler's CPU share and peak RSS, the server's CPU share, and every
  command of 5 ms or more inside Redis (SLOWLOG).
- *herd*: N ``every=3600`` schedules whose first occurrence is one instant T. From T until every
  job is in the stream: the time, the first job's lag, the slowest command, and the latency of
  the readers an operator would use meanwhile (``list`` first page, ``stats``, ``health``,
  ``get``), called in turn, 10 ms apart, from a process of their own (``bench._readers``)
  while the herd fires.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import anyio
import orjson
from redis.asyncio import Redis

import rsched
from bench._os import proc_cpu_s
from bench._servers import BenchServer
from bench.engine import RESULTS_DIR, machine, pct, read_slowlog, table
from rsched._core.keys import Keys
from rsched._core.schedule import from_ms
from rsched._store.runs_log import record_of

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "million"
QUEUE = "million"
ZONES = (
    "UTC", "Europe/Rome", "Europe/London", "America/New_York", "America/Los_Angeles",
    "America/Sao_Paulo", "Asia/Tokyo", "Asia/Kolkata", "Asia/Singapore", "Australia/Sydney",
    "Pacific/Auckland", "Africa/Johannesburg",
)  # fmt: skip
SLOW_US = 5_000

# --- the worker the benchmark runs (``rsched-worker bench.million:worker``) -------------------

worker = rsched.Worker(queues=[QUEUE])


@worker.task("bench.noop")
async def noop(job: rsched.Job) -> None:
    return None


# --- the fleet ----------------------------------------------------------------------------------


def fleet(n: int, seed: int = 1) -> list[rsched.Schedule]:
    """The mixed fleet: 40 % daily crons, 40 % hourly, 20 % every 1-60 s."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        kind = i % 5
        trigger: dict[str, Any]
        if kind < 2:
            trigger = {"cron": f"{rnd.randrange(60)} {rnd.randrange(24)} * * *"}
        elif kind < 4:
            trigger = {"cron": f"{rnd.randrange(60)} * * * *"}
        else:
            trigger = {"every": rnd.randint(1, 60)}
        out.append(
            rsched.Schedule(
                id=f"m-{i:07d}", task="bench.noop", queue=QUEUE, timezone=rnd.choice(ZONES),
                **trigger,
            )
        )  # fmt: skip
    return out


def herd_fleet(n: int, t_ms: int) -> list[rsched.Schedule]:
    at = from_ms(t_ms)
    return [
        rsched.Schedule(id=f"h-{i:07d}", task="bench.noop", queue=QUEUE, every=3600, start_at=at)
        for i in range(n)
    ]


# --- processes ----------------------------------------------------------------------------------


def _env(server: BenchServer) -> dict[str, str]:
    return {
        **os.environ,
        "RSCHED_REDIS_URL": server.url,
        "RSCHED_PREFIX": PREFIX,
        "PYTHONUNBUFFERED": "1",
        # An inherited PYTHONPATH (another tree's src) stays first: its rsched is measured.
        "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p),
    }


def spawn(server: BenchServer, what: str, log: Path) -> subprocess.Popen[bytes]:
    """``rsched-scheduler`` or ``rsched-worker bench.million:worker``, default settings."""
    cmd = (
        [sys.executable, "-m", "rsched._cli.scheduler_process"]
        if what == "scheduler"
        else [sys.executable, "-m", "rsched._cli.worker_process", "bench.million:worker"]
    )
    with log.open("ab") as out:
        return subprocess.Popen(
            cmd, cwd=ROOT, env=_env(server), stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )


def spawn_readers(server: BenchServer, schedule_id: str) -> subprocess.Popen[bytes]:
    """The readers an operator would use during the herd, in a process of their own
    (bench._readers), as a dashboard's or the CLI's would be."""
    return subprocess.Popen(
        [sys.executable, "-m", "bench._readers", server.url, PREFIX, schedule_id],
        cwd=ROOT, env=_env(server), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def wait_led(redis: Redis, keys: Keys, proc: subprocess.Popen[bytes]) -> None:
    with anyio.fail_after(60):
        while await redis.get(keys.leader) is None:
            if proc.poll() is not None:
                raise RuntimeError("the scheduler exited; see its log in bench/results/")
            await anyio.sleep(0.05)


# --- measurements -------------------------------------------------------------------------------


async def used_memory(redis: Redis) -> int:
    return int((await redis.info("memory"))["used_memory"])


async def drop_op_keys(redis: Redis, keys: Keys) -> None:
    found = [key async for key in redis.scan_iter(match=keys.ops("*"), count=10_000)]
    for start in range(0, len(found), 10_000):
        await redis.unlink(*found[start : start + 10_000])
    await anyio.sleep(1.0)


async def create(client: rsched.Client, redis: Redis, keys: Keys, n: int) -> dict[str, Any]:
    schedules = fleet(n)
    base = await used_memory(redis)
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = await client.add_many(schedules)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    created = result.count("created")
    await drop_op_keys(redis, keys)
    at_rest = await used_memory(redis) - base
    return {
        "n": n,
        "created": created,
        "add_many_s": round(wall, 2),
        "client_cpu_s": round(cpu, 2),
        "bytes_per_schedule": round(at_rest / n, 1),
    }


async def run_lags(redis: Redis, keys: Keys, start_id: str) -> tuple[list[int], str]:
    """Fire lags (ms) of the completed runs in the runs log after ``start_id``, and the last id."""
    lags: list[int] = []
    last = start_id
    while True:
        entries = await redis.xrange(keys.runs, f"({last}", "+", count=10_000)
        if not entries:
            return lags, last
        for entry_id, fields in entries:
            rec = record_of(str(entry_id), cast(dict[str, str], fields))
            if rec and rec.status == "completed" and rec.fired_at and rec.scheduled_at:
                lags.append(round((rec.fired_at - rec.scheduled_at).total_seconds() * 1000))
        last = str(entries[-1][0])


async def steady(
    server: BenchServer, redis: Redis, keys: Keys, workers: int, seconds: float, warmup: float
) -> dict[str, Any]:
    sched = spawn(server, "scheduler", RESULTS_DIR / "million-scheduler.log")
    procs = [spawn(server, "worker", RESULTS_DIR / "million-worker.log") for _ in range(workers)]
    try:
        await wait_led(redis, keys, sched)
        await anyio.sleep(warmup)
        await redis.config_set("slowlog-log-slower-than", SLOW_US)
        await redis.config_set("slowlog-max-len", 10_000)
        await redis.slowlog_reset()
        newest = await redis.xrevrange(keys.runs, count=1)
        last = str(newest[0][0]) if newest else "0-0"
        cpu0, rcpu0, t0 = proc_cpu_s(sched.pid), proc_cpu_s(server.pid()), time.monotonic()
        lags: list[int] = []
        while time.monotonic() - t0 < seconds:
            await anyio.sleep(2.0)
            more, last = await run_lags(redis, keys, last)
            lags.extend(more)
        wall = time.monotonic() - t0
        cpu, rcpu = proc_cpu_s(sched.pid) - cpu0, proc_cpu_s(server.pid()) - rcpu0
        slow = await read_slowlog(redis)
        rss = peak_rss_mb(sched.pid)
        load = os.getloadavg()[0]
    finally:
        for proc in [sched, *procs]:
            stop(proc)
    lags.sort()
    return {
        "workers": workers,
        "runs_measured": len(lags),
        "runs_per_s": round(len(lags) / wall, 1),
        "lag_p50_ms": pct(lags, 0.5),
        "lag_p99_ms": pct(lags, 0.99),
        "lag_max_ms": float(lags[-1]) if lags else 0.0,
        "scheduler_cpu_pct": round(100 * cpu / wall, 1),
        "redis_cpu_pct": round(100 * rcpu / wall, 1),
        "scheduler_peak_rss_mb": round(rss, 1),
        "slow_commands": len(slow),
        "slowest_ms": round(max((us for us, _, _ in slow), default=0) / 1000, 2),
        "slow_names": sorted({name for _, name, _ in slow}),
        "load_avg_1m": round(load, 2),
    }


async def herd(
    server: BenchServer, client: rsched.Client, redis: Redis, keys: Keys, n: int, lead_s: float
) -> dict[str, Any]:
    t_ms = await client_time_ms(redis) + int(lead_s * 1000)
    t0 = time.perf_counter()
    result = await client.add_many(herd_fleet(n, t_ms))
    create_s = time.perf_counter() - t0
    if len(result.outcomes) != n:
        raise RuntimeError("the herd was not created whole")
    sched = spawn(server, "scheduler", RESULTS_DIR / "million-herd-scheduler.log")
    stream = keys.queue(QUEUE)
    readers = spawn_readers(server, f"h-{n // 2:07d}")
    try:
        await wait_led(redis, keys, sched)
        left_s = (t_ms - await client_time_ms(redis)) / 1000
        if left_s < 1:
            raise RuntimeError(f"creating the herd took {create_s:.1f} s: raise --herd-lead-s")
        await anyio.sleep(left_s - 0.5)
        await redis.config_set("slowlog-log-slower-than", SLOW_US // 2)
        await redis.slowlog_reset()
        rcpu0, cpu0 = proc_cpu_s(server.pid()), proc_cpu_s(sched.pid)
        assert readers.stdin is not None
        assert readers.stdout is not None
        readers.stdin.write(b"go\n")
        readers.stdin.flush()
        seen_ms = 0
        with anyio.move_on_after(120):
            # Polling: the jobs are written by another process.
            while await redis.xlen(stream) < n:  # noqa: ASYNC110
                await anyio.sleep(0.005)
            seen_ms = await client_time_ms(redis)
        readers.stdin.close()
        reads = orjson.loads(await anyio.to_thread.run_sync(readers.stdout.read))
        cpu, rcpu = proc_cpu_s(sched.pid) - cpu0, proc_cpu_s(server.pid()) - rcpu0
        rss = peak_rss_mb(sched.pid)
        slow = await read_slowlog(redis)
        load = os.getloadavg()[0]
    finally:
        stop(sched)
        readers.kill()
        readers.wait()
    first = await redis.xrange(stream, count=1)
    first_ms = int(str(first[0][0]).split("-")[0]) - t_ms if first else None
    return {
        "n": n,
        "create_s": round(create_s, 2),
        "all_in_streams_s": round((seen_ms - t_ms) / 1000, 2) if seen_ms else None,
        "first_job_ms": first_ms,
        "slowest_ms": round(max((us for us, _, _ in slow), default=0) / 1000, 2),
        "commands_over_10ms": sum(1 for us, _, _ in slow if us >= 10_000),
        "scheduler_cpu_s": round(cpu, 2),
        "redis_cpu_s": round(rcpu, 2),
        "scheduler_peak_rss_mb": round(rss, 1),
        **{f"{name}_max_ms": round(max(v), 1) for name, v in reads.items() if v},
        **{f"{name}_p50_ms": round(pct(sorted(v), 0.5), 1) for name, v in reads.items() if v},
        "load_avg_1m": round(load, 2),
    }


async def client_time_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


# --- main ---------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.million", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=1_000_000, help="schedules (default 1,000,000)")
    p.add_argument("--kind", default="redis", choices=["redis", "valkey"])
    p.add_argument("--only", nargs="+", default=["create", "steady", "herd"],
                   choices=["create", "steady", "herd"])  # fmt: skip
    p.add_argument("--steady-s", type=float, default=60.0, help="measured steady state (s)")
    p.add_argument("--warmup-s", type=float, default=30.0, help="before measuring (s)")
    p.add_argument("--workers", type=int, default=1, help="rsched-worker processes (steady)")
    p.add_argument("--herd-lead-s", type=float, default=0.0,
                   help="T after the herd's creation starts (60 s + 60 s a million)")  # fmt: skip
    return p


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    RESULTS_DIR.mkdir(exist_ok=True)
    out: dict[str, Any] = {"machine": machine(), "args": vars(args)}
    with BenchServer(args.kind) as server:
        out["server"] = server.version()
        redis = Redis.from_url(server.url, decode_responses=True)
        keys = Keys(PREFIX)
        async with rsched.Client.from_url(server.url, prefix=PREFIX) as client:
            if "create" in args.only or "steady" in args.only:
                out["create"] = await create(client, redis, keys, args.n)
                print(table("create", list(out["create"]), [list(out["create"].values())]))
            if "steady" in args.only:
                out["steady"] = await steady(
                    server, redis, keys, args.workers, args.steady_s, args.warmup_s
                )
                print(table("steady", list(out["steady"]), [list(out["steady"].values())]))
            if "herd" in args.only:
                await redis.flushall()
                lead = args.herd_lead_s or 60 + 60 * args.n / 1_000_000
                out["herd"] = await herd(server, client, redis, keys, args.n, lead)
                print(table("herd", list(out["herd"]), [list(out["herd"].values())]))
        await redis.aclose()
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = anyio.run(_main, args)
    path = RESULTS_DIR / f"million-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
