"""The worker benchmark: no-op throughput of one worker process, and fire-to-start latency.

1. Throughput: N no-op jobs (50k) are written to a queue first, then one ``rsched-worker``
   process runs them (``--processes P``: P of them share the queue, a node, their CPU added
   up); the rate is N over the time from the first job taken to the last one
   acknowledged (the stream is empty and nothing is pending). Run with per-job log lines on
   (``info``) and off (``warning``), and with priorities in use: the same jobs spread evenly
   over the high, normal and low streams, so that every read goes through the weighted turns
   (``--priorities`` runs only that pair, best of 3, in turns). ``--scheduled`` makes the jobs
   occurrences of as many schedules, each fired once before the worker starts, so that the
   worker's start and complete also keep the runs' markers and history records.
2. Latency: an in-process Scheduler fires schedules spread over time (an idle system: a few
   fires per second) and a worker process runs them; each handler notes, before anything else,
   how long after the fire (``fired_at``, Redis TIME in the fire script, ms) and after the
   occurrence's scheduled time it started. p50/p99/max are printed.

``--fairness`` queues 10,000 jobs of one key ahead of 100 keys with 10 jobs each (every key
one at a time) and measures how soon after the first start every small key's first job starts.
``--limits`` runs the no-op jobs without limits and then under limits (a concurrency of 1 on
each of 1,000 keys, the jobs' keys in turn, and one rate over all), in turns, ``--repeat`` times.
``--start-deadline`` runs them without and then with a start deadline they never reach (its
check by ``lua/expire.lua`` is what is measured), in turns, ``--repeat`` times.
``--tracing`` runs them without OpenTelemetry tracing (docs/tracing.md), with it, and with it
sampled at 1 %, in turns, ``--repeat`` times: the worker then configures the SDK's
TracerProvider with a BatchSpanProcessor and an exporter that drops the spans, and every job
carries a traceparent (as one enqueued by a client that traces): what is measured is the
consumer span of each job. Sampled at 1 %, the traceparents are those a client sampling 1 % of
its traces writes (a trace of its own per job, one in 100 sampled), and the worker's sampler is
the one docs/tracing.md suggests (``OTEL_TRACES_SAMPLER=parentbased_traceidratio``, 0.01).

``--http`` runs them with a worker without and then with ``--http`` (docs/http-targets.md), in
turns, ``--repeat`` times; then as many HTTP targets (a POST of a small JSON body) against a
local uvicorn server answering 200 at once (``target_app``), run by an ``--http-only`` worker:
calls per second, server included (it shares the machine).

``python -m bench.worker [--quick] [--jobs N] [--concurrency N] [--seconds S] [--kind K]
[--priorities] [--scheduled] [--limits] [--start-deadline] [--tracing] [--http] [--repeat N]``
Every run uses a private server (bench._servers); port 6379 is never touched. With
``PYTHONPATH=<another tree>/src`` the benchmark and its worker run that tree's rsched (a
comparison with another commit).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import orjson
from redis.asyncio import Redis

import rsched
from bench._servers import BenchServer
from rsched._core.fire_plan import FireItem, FireSpec
from rsched._core.keys import GROUP, Keys
from rsched._core.rules import PRIORITIES, Priority
from rsched._core.schedule import Schedule, from_ms
from rsched._core.settings import Settings
from rsched._scheduler.scheduler import Scheduler
from rsched._store.firing import FiringStore
from rsched._store.leases import LeaseStore
from rsched._store.schedules import ScheduleStore

CLK_TCK = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parent.parent

# --- the worker the benchmark runs (``rsched-worker bench.worker:worker``) -------------------

worker = rsched.Worker(queues=["bench"])
_client: Redis | None = None
# A traceparent as a client that traces writes it (--tracing).
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
# The tracing runs of --tracing: off, every job's producer sampled, 1 % of them sampled.
TRACING_RUNS: tuple[float | None, ...] = (None, 1.0, 0.01)


def _traceparent(i: int, sampled: float) -> str:
    """The traceparent of the ``i``-th job of a producer sampling ``sampled`` of its traces."""
    if sampled >= 1:
        return TRACEPARENT
    flags = "01" if i % round(1 / sampled) == 0 else "00"
    return f"00-{uuid.uuid4().hex}-b7ad6b7169203331-{flags}"


def nowhere_provider(ratio: float | None = None) -> Any:
    """The SDK's provider with a BatchSpanProcessor whose exporter drops every span: the cost
    of making the spans, as with a real exporter short of sending them. Its sampler is
    ``ParentBasedTraceIdRatio(ratio)``, else the SDK's default (or OTEL_TRACES_SAMPLER's)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio

    class Nowhere(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=None if ratio is None else ParentBasedTraceIdRatio(ratio))
    provider.add_span_processor(BatchSpanProcessor(Nowhere()))
    return provider


def _trace_to_nowhere() -> None:
    from opentelemetry import trace

    trace.set_tracer_provider(nowhere_provider())


if os.environ.get("RSCHED_BENCH_TRACING") == "1":  # the worker process of a --tracing run
    _trace_to_nowhere()
# The same no-op under limits (``--limits``): one key of 1,000 per job, one at a time each, and
# one rate over every job, high enough never to hold a job back (its bookkeeping is measured).
limited = rsched.Worker(queues=["bench"])
LIMIT_KEYS = 1_000


@limited.task("bench.fair", limits=[rsched.Limit("tenant:{k}", concurrency=1)])
async def fair(job: rsched.Job) -> None:
    """Notes when each job of a key starts (``--fairness``), then takes 10 ms."""
    global _client
    if _client is None:
        _client = Redis.from_url(os.environ["RSCHED_REDIS_URL"], decode_responses=True)
    await _client.rpush(_lat_key(os.environ["RSCHED_PREFIX"]), f"{job.payload['k']},{time.time()}")
    await anyio.sleep(0.01)


@limited.task(
    "bench.noop",
    limits=[rsched.Limit("key:{k}", concurrency=1), rsched.Limit("api", rate="100000/m")],
)
async def limited_noop(job: rsched.Job) -> None:
    pass


@worker.task("bench.noop")
async def noop(job: rsched.Job) -> None:
    pass


@worker.task("bench.latency")
async def latency(job: rsched.Job) -> None:
    now_ms = time.time() * 1000
    global _client
    assert job.fired_at is not None
    assert job.scheduled_at is not None
    fire_lag = now_ms - job.fired_at.timestamp() * 1000
    sched_lag = now_ms - job.scheduled_at.timestamp() * 1000
    if _client is None:
        _client = Redis.from_url(os.environ["RSCHED_REDIS_URL"], decode_responses=True)
    await _client.rpush(_lat_key(os.environ["RSCHED_PREFIX"]), f"{fire_lag:.3f},{sched_lag:.3f}")


def _lat_key(prefix: str) -> str:
    return "{" + prefix + "}:bench-latency"


# --- measurement -------------------------------------------------------------------------------


async def target_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ``--http`` benchmark's target: an ASGI app answering 200 at once."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


def _serve_target() -> tuple[subprocess.Popen[bytes], str]:
    """A uvicorn process serving ``target_app`` on a free loopback port, once it answers."""
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "bench.worker:target_app", "--port", str(port),
         "--log-level", "warning", "--no-access-log"],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/hook"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return proc, url
        except OSError:
            time.sleep(0.1)
    _stop(proc)
    raise RuntimeError("the benchmark's HTTP target did not start within 30 s")


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _spawn_worker(
    url: str,
    prefix: str,
    concurrency: int,
    log_level: str,
    *,
    metrics: bool = False,
    cluster: bool = False,
    app: str = "bench.worker:worker",
    tracing: float | None = None,
    http: bool = False,
) -> subprocess.Popen[bytes]:
    """An ``rsched-worker`` process of ``app`` on the bench queue (``app`` empty: ``--http-only``;
    ``http``: it also delivers HTTP targets, loopback allowed)."""
    env = {
        **os.environ,
        "RSCHED_REDIS_URL": url,
        "RSCHED_PREFIX": prefix,
        # An inherited PYTHONPATH (another tree's src) stays first: its rsched is measured.
        "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p),
    }
    if cluster:
        env["RSCHED_CLUSTER"] = "true"
    if metrics:  # served on a free port: the cost of counting every job
        env["RSCHED_METRICS_PORT"] = "0"
    if http:
        env["RSCHED_WORKER__HTTP"] = "true"
        env["RSCHED_HTTP__ALLOW_PRIVATE"] = "true"  # the bench's target is on loopback
    if tracing is not None:
        env["RSCHED_BENCH_TRACING"] = "1"
        if tracing < 1:  # as docs/tracing.md suggests: the provider reads it
            env["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
            env["OTEL_TRACES_SAMPLER_ARG"] = str(tracing)
    return subprocess.Popen(
        [sys.executable, "-m", "rsched._cli.worker_process", *([app] if app else ["--http-only"]),
         "--queues", "bench", "--concurrency", str(concurrency), "--log-level", log_level],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


async def _fill(
    redis: Redis,
    stream: str,
    n: int,
    *,
    keyed: bool = False,
    opts: str = "{}",
    traced: float | None = None,
    target: str | None = None,
) -> None:
    """``n`` no-op jobs; ``keyed``: each with a payload ``k`` of LIMIT_KEYS keys in turn;
    ``traced``: each with the traceparent of a producer sampling that share of its traces;
    ``target``: HTTP targets instead (a POST of a small JSON body to that URL)."""
    task, payload = "bench.noop", "{}"
    if target is not None:
        task = "rsched.http"
        payload = orjson.dumps({"http": {"url": target, "body": {"bench": True}}}).decode()
    now = str(int(time.time() * 1000))
    for start in range(0, n, 5000):
        async with redis.pipeline(transaction=False) as pipe:
            for i in range(start, min(n, start + 5000)):
                pipe.xadd(
                    stream,
                    {
                        "execution_id": f"job-{uuid.uuid4().hex}",
                        "task": task,
                        "payload": f'{{"k":{i % LIMIT_KEYS}}}' if keyed else payload,
                        "attempt": "1",
                        "origin": "enqueue",
                        "opts": opts,
                        "scheduled_at": now,
                        "fired_at": now,
                        **({} if traced is None else {"traceparent": _traceparent(i, traced)}),
                    },
                )
            await pipe.execute()


async def _fire_schedules(url: str, prefix: str, n: int) -> None:
    """``n`` schedules of bench.noop on the bench queue, each fired once: their jobs are in the
    stream, each with its run marker and its history record."""
    settings = Settings(redis_url=url, prefix=prefix)
    redis = Redis.from_url(url, decode_responses=True)
    try:
        ids = [f"bench-{i}" for i in range(n)]
        async with rsched.Client(redis, settings) as client:
            for start in range(0, n, 5000):
                chunk = ids[start : start + 5000]
                specs = [Schedule(id=sid, task="bench.noop", queue="bench", every=3600)
                         for sid in chunk]  # fmt: skip
                await client.add_many(specs)
        store = FiringStore.from_settings(redis, settings)
        lease, _ = await LeaseStore(redis, store.keys).acquire("bench-worker", 3_600_000)
        assert lease is not None
        k = store.keys
        sched = await store.time_ms() - 3  # due a few ms ago: an on-time fire
        spec = FireSpec(queue="bench")
        await redis.zadd(k.schedules, dict.fromkeys(ids, sched))
        for start in range(0, n, 500):
            chunk = ids[start : start + 500]
            async with redis.pipeline(transaction=False) as pipe:
                for sid in chunk:
                    pipe.hget(k.schedule(sid), "version")
                versions = await pipe.execute()
            items = [FireItem(sid, str(version), sched, sched, sched + 3_600_000, "fire", spec=spec)
                     for sid, version in zip(chunk, versions, strict=True)]  # fmt: skip
            codes = await store.fire(lease, items)
            assert codes is not None
            assert set(codes) == {1}, codes
    finally:
        await redis.aclose()


async def throughput(
    server: BenchServer,
    jobs: int,
    concurrency: int,
    log_level: str,
    *,
    priorities: bool = False,
    metrics: bool = False,
    scheduled: bool = False,
    limits: bool = False,
    timed: bool = False,
    tracing: float | None = None,
    http: bool = False,
    target: str | None = None,
    processes: int = 1,
) -> dict[str, Any]:
    """``http``: the worker also delivers HTTP targets; ``target``: the jobs are HTTP targets
    calling that URL, run by an ``--http-only`` worker; ``processes``: that many worker
    processes share the queue (a node), their CPU added up."""
    prefix = f"bw{uuid.uuid4().hex[:8]}"
    keys = Keys(prefix)
    levels: tuple[Priority, ...] = PRIORITIES if priorities else ("normal",)
    streams = [keys.queue("bench", level) for level in levels]
    redis = Redis.from_url(server.url, decode_responses=True)
    try:
        if scheduled:
            await _fire_schedules(server.url, prefix, jobs)
        else:
            for i, stream in enumerate(streams):
                n = jobs // len(streams) + (i < jobs % len(streams))
                # A start deadline never reached: what its check costs is measured.
                opts = '{"start_deadline":3600}' if timed else "{}"
                await _fill(
                    redis, stream, n, keyed=limits, opts=opts, traced=tracing, target=target
                )
        app = "bench.worker:limited" if limits else "bench.worker:worker"
        procs = [
            _spawn_worker(
                server.url,
                prefix,
                concurrency,
                log_level,
                metrics=metrics,
                app="" if target else app,
                tracing=tracing,
                http=http or target is not None,
            )
            for _ in range(processes)
        ]

        def workers_cpu_s() -> float:
            return sum(_cpu_s(proc.pid) for proc in procs)

        try:
            first: float | None = None
            cpu0 = 0.0
            srv0 = _cpu_s(server.pid())
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                left = sum([int(await redis.xlen(stream)) for stream in streams])
                now = time.perf_counter()
                if first is None and left < jobs:
                    first, cpu0, srv0 = now, workers_cpu_s(), _cpu_s(server.pid())
                if left == 0:
                    pending = [await redis.xpending(stream, GROUP) for stream in streams]
                    if sum(int(p["pending"]) for p in pending) == 0:
                        break
                await anyio.sleep(0.02)  # light polling: the bench must not compete for CPU
            else:
                raise RuntimeError("the worker did not finish the jobs within 300 s")
            end = time.perf_counter()
            assert first is not None
            took = end - first
            return {
                "jobs": jobs,
                "concurrency": concurrency,
                "log_level": log_level,
                "priorities": "high/normal/low" if priorities else "normal",
                "metrics": "on" if metrics else "off",
                "origin": "schedules" if scheduled else "enqueued",
                "limits": "1,000 keys x concurrency 1 + a rate" if limits else "none",
                "start_deadline": "1h" if timed else "none",
                "tracing": _tracing_label(tracing),
                "http": "calls " + target if target else "--http" if http else "off",
                "processes": processes,
                "seconds": round(took, 3),
                "jobs_per_s": round(jobs / took),
                "worker_cpu_s": round(workers_cpu_s() - cpu0, 2),
                "server_cpu_s": round(_cpu_s(server.pid()) - srv0, 2),
            }
        finally:
            for proc in procs:
                _stop(proc)
    finally:
        await redis.aclose()


def _tracing_label(tracing: float | None) -> str:
    if tracing is None:
        return "off"
    return "on" if tracing >= 1 else f"on, {tracing:.0%} sampled"


async def fairness(server: BenchServer, big: int, small_keys: int, each: int) -> dict[str, Any]:
    """One key with ``big`` jobs queued ahead of ``small_keys`` keys with ``each`` jobs, every
    key one at a time (a concurrency of 1): how long after the first start every small key's
    first job started, and how many of the big key's ran before."""
    prefix = f"bf{uuid.uuid4().hex[:8]}"
    stream = Keys(prefix).queue("bench")
    redis = Redis.from_url(server.url, decode_responses=True)
    payloads = ["big"] * big + [f"s{i}" for i in range(small_keys) for _ in range(each)]
    now = str(int(time.time() * 1000))
    try:
        for start in range(0, len(payloads), 5000):
            async with redis.pipeline(transaction=False) as pipe:
                for k in payloads[start : start + 5000]:
                    pipe.xadd(stream, {"execution_id": f"job-{uuid.uuid4().hex}",
                                       "task": "bench.fair", "payload": f'{{"k":"{k}"}}',
                                       "attempt": "1", "origin": "enqueue", "scheduled_at": now,
                                       "fired_at": now})  # fmt: skip
                await pipe.execute()
        proc = _spawn_worker(server.url, prefix, 100, "warning", app="bench.worker:limited")
        try:
            first: dict[str, float] = {}
            order: list[str] = []
            deadline = time.monotonic() + 120
            while len(first) < small_keys + 1 and time.monotonic() < deadline:
                popped: Any = await redis.lpop(_lat_key(prefix), 1000)
                for raw in popped or []:
                    key, at = str(raw).split(",")
                    first.setdefault(key, float(at))
                    order.append(key)
                await anyio.sleep(0.02)
        finally:
            _stop(proc)
        t0 = min(first.values())
        last = max(order.index(k) for k in first if k != "big")  # the last small key's first
        return {
            "big_key_jobs": big,
            "small_keys": f"{small_keys} x {each}",
            "all_small_started_s": round(first[order[last]] - t0, 3),
            "big_runs_before": order[:last].count("big"),
        }
    finally:
        await redis.aclose()


async def fire_to_start(server: BenchServer, seconds: float, schedules: int) -> dict[str, Any]:
    prefix = f"bl{uuid.uuid4().hex[:8]}"
    keys = Keys(prefix)
    redis = Redis.from_url(server.url, decode_responses=True)
    settings = Settings(redis_url=server.url, prefix=prefix, log_level="warning")
    store = ScheduleStore(redis, keys)
    period_s = 2.0
    proc = _spawn_worker(server.url, prefix, 50, "warning")
    try:
        await anyio.sleep(1.0)  # the worker process starts and blocks on its queue
        now = await store.time_ms()
        for i in range(schedules):
            # Each on its own grid (start_at anchors an interval): fires spread evenly over
            # the period, never a herd.
            first = now + 500 + round(i * period_s * 1000 / schedules)
            sched = Schedule(
                id=f"lat-{i}",
                task="bench.latency",
                queue="bench",
                every=period_s,
                start_at=from_ms(first),
            )
            await store.write(sched, mode="add", expect_gen=None, next_ms=first, created_ms=now)
        scheduler = Scheduler(redis, settings, owner="bench")
        async with anyio.create_task_group() as tg:
            await tg.start(scheduler.run)
            await anyio.sleep(seconds)
            scheduler.stop()
        await anyio.sleep(0.5)
        raw: list[str] = await redis.lrange(_lat_key(prefix), 0, -1)  # type: ignore[assignment]
    finally:
        _stop(proc)
        await redis.aclose()
    fire = sorted(float(r.split(",")[0]) for r in raw)
    sched_lags = sorted(float(r.split(",")[1]) for r in raw)
    if not fire:
        raise RuntimeError("no latency samples: the worker ran no job")
    return {
        "samples": len(fire),
        "fires_per_s": round(schedules / period_s, 1),
        "fire_p50_ms": round(_pct(fire, 50), 2),
        "fire_p99_ms": round(_pct(fire, 99), 2),
        "fire_max_ms": round(fire[-1], 2),
        "sched_p50_ms": round(_pct(sched_lags, 50), 2),
        "sched_p99_ms": round(_pct(sched_lags, 99), 2),
    }


async def _priorities(server: BenchServer, args: argparse.Namespace) -> None:
    """No-op throughput with and without priorities in use, best of 3, in turns (the VM's speed
    swings: runs side by side see the same weather)."""
    best: dict[bool, dict[str, Any]] = {}
    for _ in range(3):
        for used in (False, True):
            row = await throughput(server, args.jobs, args.concurrency, "warning", priorities=used)
            print(_table([row], list(row)), flush=True)
            if used not in best or row["jobs_per_s"] > best[used]["jobs_per_s"]:
                best[used] = row
    ratio = best[True]["jobs_per_s"] / best[False]["jobs_per_s"]
    print(f"\nbest of 3: {best[False]['jobs_per_s']} jobs/s without priorities, "
          f"{best[True]['jobs_per_s']} with ({ratio:.0%}; bar: >= 90 %)")  # fmt: skip


def _pct(values: list[float], p: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def _table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    widths = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(str(r.get(c, "")).rjust(w) for c, w in zip(columns, widths, strict=True))
              for r in rows]  # fmt: skip
    return "\n".join(lines)


async def _main(args: argparse.Namespace) -> None:
    with BenchServer(args.kind) as server:
        print(
            f"{server.version()} · python {platform.python_version()} · "
            f"{os.cpu_count()} cores · {platform.machine()}",
            flush=True,
        )
        if args.priorities:
            await _priorities(server, args)
            return
        if args.fairness:
            for _ in range(args.repeat):
                row = await fairness(server, 10_000, 100, 10)
                print(_table([row], list(row)), flush=True)
            return
        if args.limits:
            for _ in range(args.repeat):  # in turns: without, then with limits
                for with_limits in (False, True):
                    row = await throughput(
                        server, args.jobs, args.concurrency, "warning", limits=with_limits
                    )
                    print(_table([row], list(row)), flush=True)
            return
        if args.start_deadline:
            for _ in range(args.repeat):  # in turns: without, then with a start deadline
                for with_deadline in (False, True):
                    row = await throughput(
                        server, args.jobs, args.concurrency, "warning", timed=with_deadline
                    )
                    print(_table([row], list(row)), flush=True)
            return
        if args.tracing:
            for _ in range(args.repeat):  # in turns: off, on, on sampled at 1 %
                for traced in TRACING_RUNS:
                    row = await throughput(
                        server, args.jobs, args.concurrency, "warning", tracing=traced
                    )
                    print(_table([row], list(row)), flush=True)
            return
        if args.http:
            for _ in range(args.repeat):  # in turns: without, then with --http
                for http in (False, True):
                    row = await throughput(
                        server, args.jobs, args.concurrency, "warning", http=http
                    )
                    print(_table([row], list(row)), flush=True)
            target, url = _serve_target()
            try:
                for _ in range(args.repeat):
                    row = await throughput(
                        server, args.http_jobs, args.concurrency, "warning", target=url
                    )
                    print(_table([row], list(row)), flush=True)
            finally:
                _stop(target)
            return
        if args.scheduled:
            for _ in range(args.repeat):
                row = await throughput(
                    server, args.jobs, args.concurrency, "warning", scheduled=True
                )
                print(_table([row], list(row)), flush=True)
            return
        rows = []
        node = {"processes": args.processes}
        for level in ("warning", "info"):
            rows.append(
                await throughput(
                    server, args.jobs, args.concurrency, level, metrics=args.metrics, **node
                )
            )
            print(_table(rows[-1:], list(rows[-1])), flush=True)
        rows.append(
            await throughput(
                server, args.jobs, args.concurrency, "warning", priorities=True, **node
            )
        )
        print(_table(rows[-1:], list(rows[-1])), flush=True)
        if args.only_throughput:
            return
        print(f"\nno-op throughput, {args.processes} worker process(es) (bar: >= 10,000 jobs/s)")
        print(_table(rows, list(rows[0])))
        lat = await fire_to_start(server, args.seconds, args.schedules)
        print("\nfire -> handler start, scheduler + one worker, idle (bar: p99 <= 20 ms)")
        print(_table([lat], list(lat)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.worker", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="10k jobs, 8 s of latency")
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0, help="latency run length")
    parser.add_argument("--schedules", type=int, default=20, help="latency: schedules (2 s each)")
    parser.add_argument("--kind", default="redis", choices=["redis", "valkey"])
    parser.add_argument(
        "--priorities", action="store_true", help="only throughput with and without priorities"
    )
    parser.add_argument("--metrics", action="store_true", help="the worker serves /metrics")
    parser.add_argument(
        "--processes", type=int, default=1, help="throughput: worker processes sharing the queue"
    )
    parser.add_argument("--only-throughput", action="store_true", help="skip the latency run")
    parser.add_argument(
        "--scheduled", action="store_true", help="only throughput, jobs fired from schedules"
    )
    parser.add_argument(
        "--limits", action="store_true", help="only throughput, without and with limits, in turns"
    )
    parser.add_argument(
        "--fairness",
        action="store_true",
        help="only: a key with 10,000 jobs ahead of 100 keys with 10, how soon each starts",
    )
    parser.add_argument(
        "--start-deadline",
        action="store_true",
        help="only throughput, without and with a start deadline (never reached), in turns",
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="only throughput, without and with OpenTelemetry tracing (SDK, no export), and "
        "with it sampled at 1 %%, in turns",
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help="only throughput, without and with --http, in turns; then HTTP calls per second",
    )
    parser.add_argument("--http-jobs", type=int, default=10_000, help="--http: HTTP calls made")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="--scheduled, --limits, --fairness, --start-deadline, --tracing, --http: runs",
    )
    args, _ = parser.parse_known_args(argv)  # options of the other benchmarks are ignored
    if args.quick:
        args.jobs, args.seconds = min(args.jobs, 10_000), min(args.seconds, 8.0)
    anyio.run(_main, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
