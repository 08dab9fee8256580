"""Prometheus metrics and the health endpoints, scraped over HTTP from real schedulers and
workers (in-process and as ``rsched-scheduler`` / ``rsched-worker`` processes)."""

from __future__ import annotations

import functools
import re
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

import rsched
from rsched._cli.scheduler_process import main as scheduler_main
from rsched._cli.worker_process import main as worker_main
from rsched._core.codes import Code
from rsched._core.fire_plan import FireItem, FireSpec
from rsched._core.job import Job
from rsched._core.keys import Keys
from rsched._core.metrics import METRICS, BulkHistogram, Deployment, Metrics
from rsched._core.settings import SchedulerSettings, Settings
from rsched._devtools.embedded import free_port
from rsched._ops.deployment_gauges import read_deployment
from rsched._ops.probe import serve
from rsched._redis import scripts
from rsched._scheduler.readiness import operate_scheduler, scheduler_readiness
from rsched._scheduler.scheduler import Scheduler
from rsched._store.queues import QueueStore
from rsched._store.schedules import ScheduleStore
from rsched._worker.readiness import operate_worker
from tests.support.paths import DOCS
from tests.support.placement import move_to
from tests.support.processes import Proc
from tests.support.waiting import eventually
from tests.support.worker_app import fast_env, fast_settings

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5) as http:
        return await http.get(f"http://127.0.0.1:{port}{path}")


async def scrape(port: int) -> Samples:
    response = await get(port, "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


def fast(settings: Settings, **fields: Any) -> Settings:
    return settings.model_copy(
        update={
            "scheduler": SchedulerSettings(lease_ttl_ms=1000, lease_renew_ms=200, max_idle_ms=200),
            "metrics_port": 0,
            "metrics_interval_s": 0.1,
            **fields,
        }
    )


@asynccontextmanager
async def scheduler_with_probe(redis: Redis, settings: Settings) -> AsyncIterator[int]:
    scheduler = Scheduler(redis, settings)
    async with anyio.create_task_group() as tg:
        port = await tg.start(operate_scheduler, scheduler, settings)
        await tg.start(scheduler.run)
        try:
            yield port
        finally:
            scheduler.stop()
            tg.cancel_scope.cancel()


# --- pure: counting -------------------------------------------------------------------------


def test_bulk_histogram_counts_many_at_once() -> None:
    registry = CollectorRegistry()
    hist = BulkHistogram("x_seconds", "doc", [0.01, 1.0])
    registry.register(hist)
    hist.observe_many([(0.005, 3), (0.5, 2), (7.0, 1), (1.0, 1)])
    got = {(s.name, s.labels.get("le")): s.value for f in registry.collect() for s in f.samples}
    assert got[("x_seconds_bucket", "0.01")] == 3
    assert got[("x_seconds_bucket", "1.0")] == 6  # 1.0 itself falls in its bucket (le)
    assert got[("x_seconds_bucket", "+Inf")] == 7
    assert got[("x_seconds_count", None)] == 7
    assert got[("x_seconds_sum", None)] == pytest.approx(0.015 + 1.0 + 7.0 + 1.0)


def test_fire_batch_counted_from_codes() -> None:
    m = Metrics(CollectorRegistry())
    m.serve("scheduler")
    now = int(time.time() * 1000)
    m.redis_now(now)
    spec = FireSpec(overlap="buffer_one", queue="q1")
    items = [
        FireItem("a", "1:1", now - 50, now - 50, now + 1000, "fire", 0, spec),
        FireItem("b", "1:1", now - 50, now - 50, now + 1000, "fire", 0, spec),
        FireItem("c", "1:1", now - 120_000, now - 60_000, now + 1000, "misfire", 2, spec),
        FireItem("d", "1:1", now - 50, now - 50, now + 1000, "fire", 0, spec),
        FireItem("e", "1:1", now - 50, now - 50, now + 1000, "fire", 0, spec),
        FireItem("f", "1:1", now - 50, now - 50, now + 1000, "fire", 0, spec),
    ]
    codes = [Code.FIRED, Code.FIRED, Code.FIRED, Code.STALE, Code.BUFFERED, Code.SKIPPED]
    m.fired(items, codes)
    s = parse_registry(m.registry)
    assert value(s, "rsched_fires_total", queue="q1", origin="schedule") == 2
    assert value(s, "rsched_fires_total", queue="q1", origin="misfire") == 1
    assert value(s, "rsched_stale_fires_refused_total") == 1
    assert value(s, "rsched_overlap_total", policy="buffer_one", action="buffered") == 1
    assert value(s, "rsched_overlap_total", policy="buffer_one", action="skipped") == 1
    assert value(s, "rsched_fire_lag_seconds_count") == 3
    assert value(s, "rsched_fire_lag_seconds_bucket", le="0.025") == 0
    assert value(s, "rsched_fire_lag_seconds_bucket", le="0.1") == 2
    assert value(s, "rsched_fire_lag_seconds_bucket", le="30.0") == 2
    assert value(s, "rsched_fire_lag_seconds_bucket", le="60.0") == 2  # 60 s plus a little
    assert value(s, "rsched_fire_lag_seconds_bucket", le="300.0") == 3


def test_all_fired_batch_grouped_by_queue_origin_and_time() -> None:
    m = Metrics(CollectorRegistry())
    m.serve("scheduler")
    now = int(time.time() * 1000)
    m.redis_now(now)
    a, b = FireSpec(queue="qa"), FireSpec(queue="qb")
    items = [FireItem(f"s{i}", "1:1", now - 5, now - 5, None, "fire", 0, a) for i in range(300)]
    items += [FireItem(f"t{i}", "1:1", now - 5, now - 5, None, "fire", 0, b) for i in range(200)]
    items.append(FireItem("late", "1:1", now - 90_000, now - 90_000, None, "misfire", 1, b))
    m.fired(items, [Code.FIRED] * len(items))
    s = parse_registry(m.registry)
    assert value(s, "rsched_fires_total", queue="qa", origin="schedule") == 300
    assert value(s, "rsched_fires_total", queue="qb", origin="schedule") == 200
    assert value(s, "rsched_fires_total", queue="qb", origin="misfire") == 1
    assert value(s, "rsched_fire_lag_seconds_count") == 501
    assert value(s, "rsched_fire_lag_seconds_bucket", le="60.0") == 500
    assert value(s, "rsched_stale_fires_refused_total") == 0


def test_job_outcomes() -> None:
    m = Metrics(CollectorRegistry())
    m.serve("worker", tasks=["t"], queues=["q"])
    first = Job("e1", "t", "q", attempt=1)
    last = Job("e2", "t", "q", attempt=99)
    m.job_started(first)
    m.job_ended(first, 0.2, cancelled=False, timed_out=False, error=None)
    m.job_ended(first, 0.2, cancelled=False, timed_out=False, error=ValueError("x"))
    m.job_ended(first, 0.2, cancelled=False, timed_out=True, error=None)
    m.job_ended(first, 0.2, cancelled=False, timed_out=False, error=rsched.Retry(delay_s=1))
    m.job_ended(first, 0.2, cancelled=True, timed_out=False, error=None)
    m.job_ended(last, 0.2, cancelled=False, timed_out=False, error=ValueError("x"))
    s = parse_registry(m.registry)
    for outcome, n in [("completed", 1), ("failed", 2), ("timed_out", 1), ("retry", 1)]:
        assert value(s, "rsched_jobs_total", task="t", outcome=outcome) == n, outcome
    assert value(s, "rsched_jobs_total", task="t", outcome="cancelled") == 1
    assert value(s, "rsched_retries_total", task="t") == 3  # not the last attempt's failure
    assert value(s, "rsched_job_duration_seconds_count", task="t") == 6
    assert value(s, "rsched_jobs_in_progress") == 1  # started once; the runner decrements
    assert value(s, "rsched_build_info", version=rsched.__version__) == 1


def test_each_process_exports_what_it_knows() -> None:
    def names(m: Metrics) -> set[str]:
        return {name for name, _ in parse_registry(m.registry)}

    scheduler, worker = Metrics(CollectorRegistry()), Metrics(CollectorRegistry())
    scheduler.serve("scheduler")
    worker.serve("worker", tasks=["a", "b"], queues=["q"], limits=["crm"])
    assert "rsched_is_leader" in names(scheduler)
    for name in ("rsched_is_leader", "rsched_partitions", "rsched_leader_changes_total"):
        assert name not in names(worker), name
    assert "rsched_jobs_in_progress" not in names(scheduler)
    for m in (scheduler, worker):  # every process: Redis reachable, the deployment gauges
        assert {"rsched_redis_up", "rsched_build_info"} <= names(m)
    # Each labelled counter an alert reads with increase() is there at 0 from the start.
    s = parse_registry(scheduler.registry)
    for policy, action in [("run_once", "run"), ("skip", "skip"), ("catch_up", "run")]:
        assert value(s, "rsched_misfires_total", policy=policy, action=action) == 0
    assert value(s, "rsched_writes_unreplicated_total", op="fire") == 0
    s = parse_registry(worker.registry)
    for task in ("a", "b"):
        assert value(s, "rsched_jobs_total", task=task, outcome="failed") == 0
        assert value(s, "rsched_jobs_total", task=task, outcome="expired") == 0
        assert value(s, "rsched_retries_total", task=task) == 0
    assert value(s, "rsched_schedules_auto_paused_total") == 0
    assert value(s, "rsched_reclaims_total", queue="q") == 0
    assert value(s, "rsched_limit_throttled_total", limit="crm") == 0
    assert value(s, "rsched_writes_unreplicated_total", op="complete") == 0


def test_misfires_counted_per_occurrence() -> None:
    m = Metrics(CollectorRegistry())
    m.serve("scheduler")

    def item(action: str, missed: int) -> FireItem:
        return FireItem("s", "1:1", 1, 1, None, action, missed)

    # One late run standing for 85 missed occurrences, a catch-up run, 40 occurrences past
    # catch_up_limit skipped, 3 skipped by misfire=skip.
    late = [item("misfire", 85), item("catch_up", 1), item("limit", 40), item("skip", 3)]
    m.fired(late, [Code.FIRED, Code.FIRED, Code.MISFIRE_SKIPPED, Code.MISFIRE_SKIPPED])
    # Refused or not applied (stale, not due): not counted; planned again, it counts once.
    m.fired([item("misfire", 7), item("catch_up", 1)], [Code.STALE, Code.NOT_DUE])
    m.fired([item("misfire", 2)] * 2, [Code.FIRED, Code.FIRED])
    s = parse_registry(m.registry)
    assert value(s, "rsched_misfires_total", policy="run_once", action="run") == 85 + 4
    assert value(s, "rsched_misfires_total", policy="catch_up", action="run") == 1
    assert value(s, "rsched_misfires_total", policy="catch_up", action="skip") == 40
    assert value(s, "rsched_misfires_total", policy="skip", action="skip") == 3


def parse_registry(registry: CollectorRegistry) -> Samples:
    from prometheus_client import generate_latest

    return parse(generate_latest(registry).decode())


# --- the probe --------------------------------------------------------------------------------


async def test_probe_routes_and_a_stalled_client() -> None:
    state = {"ok": False}

    async def ready() -> tuple[bool, dict[str, Any]]:
        return state["ok"], {"reason": "testing"}

    async with anyio.create_task_group() as tg:
        port = await tg.start(serve, "127.0.0.1", 0, ready)
        # A client that connects and sends nothing holds no one else up.
        stalled = await anyio.connect_tcp("127.0.0.1", port)
        live = await get(port, "/livez")
        assert live.status_code == 200
        assert live.json() == {"live": True}
        not_ready = await get(port, "/readyz")
        assert not_ready.status_code == 503
        assert not_ready.json() == {"ready": False, "reason": "testing"}
        state["ok"] = True
        assert (await get(port, "/readyz?verbose=1")).status_code == 200
        assert (await get(port, "/nope")).status_code == 404
        async with httpx.AsyncClient() as http:
            posted = await http.post(f"http://127.0.0.1:{port}/metrics")
        assert posted.status_code == 405
        assert "rsched_build_info" in (await get(port, "/metrics")).text
        await stalled.aclose()
        tg.cancel_scope.cancel()
    with pytest.raises(
        OSError, match=r"(?i)refused|connection attempts"
    ):  # stopped with its task group: nothing listens any more
        await anyio.connect_tcp("127.0.0.1", port)


async def test_port_in_use_is_a_config_error() -> None:
    async def ready() -> tuple[bool, dict[str, Any]]:
        return True, {}

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(rsched.ConfigError, match="RSCHED_METRICS_PORT"):
            await serve("127.0.0.1", port, ready)


async def test_livez_never_needs_redis_readyz_says_why() -> None:
    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", metrics_port=0)
    worker = rsched.Worker(settings=settings)
    async with anyio.create_task_group() as tg:
        port = await tg.start(operate_worker, worker, settings)
        assert (await get(port, "/livez")).status_code == 200
        response = await get(port, "/readyz")
        assert response.status_code == 503
        assert "redis does not answer" in response.json()["reason"]
        tg.cancel_scope.cancel()


async def test_readyz_loads_scripts_the_server_forgot(redis: Redis, settings: Settings) -> None:
    scheduler = Scheduler(redis, settings)
    await redis.script_flush()  # as after a restart without persistence
    ok, details = await scheduler_readiness(scheduler, redis)
    assert not ok  # not started
    assert "starting" in details["reason"]
    sha = scripts.ScriptCaller(redis).script("fire").sha
    assert await redis.script_exists(sha) == [True]


# --- a scheduler ------------------------------------------------------------------------------


async def test_scheduler_series_and_readiness(redis: Redis, settings: Settings) -> None:
    cfg = fast(settings)
    queue = "m" + cfg.prefix[-8:].replace("-", "")
    client = rsched.Client(redis, cfg)
    # Every second, nobody runs the jobs: from the second occurrence on, overlap=skip.
    await client.add(rsched.Schedule(id="tick", task="t", every=1, queue=queue))
    await client.add(rsched.Schedule(id="idle", task="t", cron="0 0 1 1 *", queue=queue))
    await client.pause("idle")
    async with scheduler_with_probe(redis, cfg) as port:
        before = await scrape(port)

        async def skipped() -> bool:
            s = await scrape(port)
            held = value(s, "rsched_overlap_total", policy="skip", action="skipped")
            return held > value(before, "rsched_overlap_total", policy="skip", action="skipped")

        await eventually(skipped)

        async def states_read() -> bool:  # the leader's gauge read, every metrics_interval_s
            return value(await scrape(port), "rsched_schedules", state="active") == 1

        await eventually(states_read)
        s = await scrape(port)
        assert value(s, "rsched_fires_total", queue=queue, origin="schedule") >= 1
        assert value(s, "rsched_fire_lag_seconds_count") > value(
            before, "rsched_fire_lag_seconds_count"
        )
        assert value(s, "rsched_is_leader") == 1
        assert value(s, "rsched_leader_changes_total") >= 1
        assert value(s, "rsched_schedules", state="active") == 1
        assert value(s, "rsched_schedules", state="paused") == 1
        assert value(s, "rsched_schedules_unhealthy", reason="late") == 0
        assert value(s, "rsched_queue_length", queue=queue) == 1
        assert value(s, "rsched_workers", queue=queue) == 0
        assert ("rsched_due_backlog", frozenset()) in s
        # No label carries a schedule id.
        assert not any("tick" in v for _, labels in s for _, v in labels)
        ready = await get(port, "/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["role"] == "leader"

        # A second scheduler is not ready while it starts, then stands by with the leader in
        # view.
        standby = Scheduler(redis, cfg)
        ok, details = await scheduler_readiness(standby, redis)
        assert not ok
        assert details["role"] == "starting"
        async with anyio.create_task_group() as tg:
            await tg.start(standby.run)
            ok, details = await scheduler_readiness(standby, redis)
            assert ok, details
            assert details["role"] == "standby"
            standby.stop()
    # Stopped: the lease is released; a running scheduler that sees no leader is not ready (as
    # between the lease's expiry and the next renewal that takes it).
    standby.running = True
    ok, details = await scheduler_readiness(standby, redis)
    assert not ok
    assert "no leader" in details["reason"]
    assert METRICS.deployment.current is None  # a stopped leader exports no deployment gauges


async def test_read_deployment_counts_late_and_states(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    for sid in ("a", "b", "c"):
        await client.add(rsched.Schedule(id=sid, task="t", cron="0 0 1 1 *"))
    await client.pause("c")
    store = ScheduleStore(redis, Keys(settings.prefix))
    now = await store.time_ms()
    # No scheduler runs: "a" is two minutes overdue (late), "b" just due (not late yet).
    for sid, ms in (("a", now - 120_000), ("b", now - 1_000)):
        await move_to(redis, Keys(settings.prefix), sid, ms)
    # The health watch found "b" failing (what it keeps in {p}:health).
    await redis.hset(Keys(settings.prefix).health, "b", "failing")
    cfg = settings.model_copy(update={"metrics_late_after_s": 60.0})
    got = await read_deployment(redis, cfg, Keys(settings.prefix), states=True)
    assert got.due_backlog == 2
    assert got.unhealthy == {"late": 1, "stuck": 0, "failing": 1}
    assert got.schedules == {"active": 2, "paused": 1, "completed": 0}
    assert 119 < got.due_oldest_age_s < 180
    # What every process reads, the leader's schedules by state aside.
    assert (
        await read_deployment(redis, cfg, Keys(settings.prefix), states=False)
    ).schedules is None


async def test_misfire_counted(redis: Redis, settings: Settings) -> None:
    cfg = fast(settings)
    queue = "mf" + cfg.prefix[-8:].replace("-", "")
    client = rsched.Client(redis, cfg)
    await client.add(
        rsched.Schedule(id="late", task="t", cron="0 0 1 1 *", queue=queue, misfire_grace_s=1)
    )
    store = ScheduleStore(redis, Keys(cfg.prefix))
    await move_to(redis, Keys(cfg.prefix), "late", await store.time_ms() - 60_000)
    before = parse_registry(METRICS.registry)
    async with scheduler_with_probe(redis, cfg) as port:

        async def fired() -> bool:
            s = await scrape(port)
            return value(s, "rsched_fires_total", queue=queue, origin="misfire") == 1

        await eventually(fired)
        s = await scrape(port)
    runs = value(s, "rsched_misfires_total", policy="run_once", action="run")
    # The counter is the process's, across prefixes: another scheduler of this test process (an
    # earlier test's, still winding down) may count its own misfires in the meantime. That this
    # one ran once is the fires counter of its own queue, above.
    assert runs >= value(before, "rsched_misfires_total", policy="run_once", action="run") + 1


# --- a worker ---------------------------------------------------------------------------------


async def test_worker_series_with_threads(redis: Redis, settings: Settings) -> None:
    cfg = fast_settings(settings, concurrency=4).model_copy(update={"metrics_port": 0})
    task = "m.sync" + cfg.prefix[-6:].replace("-", "")
    failing = "m.fail" + cfg.prefix[-6:].replace("-", "")
    worker = rsched.Worker(settings=cfg)

    @worker.task(task)
    def work(job: rsched.Job) -> None:
        time.sleep(0.01)

    @worker.task(failing)
    def fail(job: rsched.Job) -> None:
        raise RuntimeError("boom")

    store = QueueStore(redis, Keys(cfg.prefix))
    for _ in range(40):
        await store.enqueue(task, {})
    await store.enqueue(failing, {}, max_retries=1, retry_base_s=0.05, retry_jitter=0)
    async with anyio.create_task_group() as tg:
        port = await tg.start(operate_worker, worker, cfg)
        assert (await get(port, "/readyz")).status_code == 503  # not reading yet
        await tg.start(worker.run)

        async def done() -> bool:
            s = await scrape(port)
            return (
                value(s, "rsched_jobs_total", task=task, outcome="completed") == 40
                and value(s, "rsched_jobs_total", task=failing, outcome="failed") == 2
            )

        await eventually(done)
        s = await scrape(port)
        assert value(s, "rsched_job_duration_seconds_count", task=task) == 40
        assert value(s, "rsched_job_duration_seconds_bucket", task=task, le="0.005") == 0
        assert value(s, "rsched_retries_total", task=failing) == 1
        assert value(s, "rsched_jobs_in_progress") == 0
        assert value(s, "rsched_job_start_lag_seconds_count") >= 41
        ready = await get(port, "/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["queues"] == ["default"]
        worker.stop()
        await eventually(lambda: not worker.reading)
        stopping = await get(port, "/readyz")
        assert stopping.status_code == 503
        tg.cancel_scope.cancel()


# --- the processes ----------------------------------------------------------------------------


def test_bad_metrics_port_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSCHED_METRICS_PORT", "70000")
    assert scheduler_main([]) == 2
    assert "--metrics-port / RSCHED_METRICS_PORT" in capsys.readouterr().err


def test_worker_bad_metrics_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert worker_main(["tests.support.worker_app:worker", "--metrics-port", "70000"]) == 2
    assert "--metrics-port: must be 0 to 65535" in capsys.readouterr().err


def listening_port(proc: Proc) -> int:
    proc.wait_for("event=metrics.listening")
    found = re.search(r"event=metrics\.listening .*port=(\d+)", proc.output())
    assert found, proc.output()
    return int(found.group(1))


@pytest.mark.slow
async def test_processes_serve_metrics(
    redis: Redis, settings: Settings, spawn: Callable[..., Proc]
) -> None:
    env = fast_env(settings, RSCHED_SCHEDULER__LEASE_TTL_MS="1000")
    env["RSCHED_SCHEDULER__LEASE_RENEW_MS"] = "200"
    env["RSCHED_METRICS_INTERVAL_S"] = "0.2"
    sched = spawn("rsched._cli.scheduler_process", "--metrics-port", "0", env=env)
    worker = spawn(
        "rsched._cli.worker_process",
        "tests.support.worker_app:worker",
        "--metrics-port",
        "0",
        env={
            **env,
            "RSCHED_METRICS_PORT": "1",  # the flag wins over the environment
        },
    )
    ports = listening_port(sched), listening_port(worker)
    client = rsched.Client(redis, settings)
    await client.add(rsched.Schedule(id="p", task="app.noop", every=1))
    for port in ports:
        await eventually(functools.partial(_ready, port))

    async def ran() -> bool:
        s = await scrape(ports[1])
        return value(s, "rsched_jobs_total", task="app.noop", outcome="completed") >= 1

    await eventually(ran)
    s = await scrape(ports[0])
    assert value(s, "rsched_fires_total", queue="default", origin="schedule") >= 1

    async def one_worker() -> bool:  # the leader's gauges follow within metrics_interval_s
        return value(await scrape(ports[0]), "rsched_workers", queue="default") == 1

    await eventually(one_worker)
    for proc in (sched, worker):
        proc.signal(signal.SIGTERM)
        assert proc.wait() == 0
    for port in ports:  # nothing keeps serving after shutdown
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()


async def _ready(port: int) -> bool:
    try:
        return (await get(port, "/readyz")).status_code == 200
    except httpx.HTTPError:
        return False


# --- the contract: series names, and the docs that use them ------------------------------------

CONTRACT = {
    "rsched_fires_total", "rsched_fire_lag_seconds", "rsched_misfires_total",
    "rsched_overlap_total", "rsched_stale_fires_refused_total", "rsched_is_leader",
    "rsched_leader_changes_total", "rsched_due_backlog", "rsched_due_oldest_age_seconds",
    "rsched_schedules", "rsched_schedules_unhealthy", "rsched_queue_length",
    "rsched_queue_pending", "rsched_queue_delayed", "rsched_queue_dead", "rsched_jobs_total",
    "rsched_job_duration_seconds", "rsched_job_start_lag_seconds", "rsched_retries_total",
    "rsched_reclaims_total", "rsched_jobs_in_progress", "rsched_workers", "rsched_build_info",
    "rsched_redis_up", "rsched_limit_holders", "rsched_limit_waiting",
    "rsched_limit_throttled_total", "rsched_schedules_auto_paused_total",
}  # fmt: skip


def exported_names() -> set[str]:
    m = Metrics(CollectorRegistry())
    m.serve("scheduler")
    m.serve("worker")
    m.deployment.current = Deployment(
        1,
        1.0,
        {"late": 0},
        {"q": dict.fromkeys(("length", "pending", "delayed", "dead", "workers"), 0)},
        {"active": 1},
        {"customer:{id}": (1, 2)},
    )
    names: set[str] = set()
    for family in m.registry.collect():
        names.add(family.name)
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count", ""]}
        names.update(family.name + s for s in suffixes.get(family.type, []))
    return names


def test_every_series_of_the_contract_is_exported() -> None:
    assert not CONTRACT - exported_names()


@pytest.mark.parametrize(
    "path", ["prometheus/rsched-rules.yml", "grafana/rsched.json", "monitoring.md"]
)
def test_docs_use_only_exported_series(path: str) -> None:
    used = set(re.findall(r"\brsched_[a-z_]*[a-z]\b", (DOCS / path).read_text()))
    assert used, path
    assert used <= exported_names(), sorted(used - exported_names())
