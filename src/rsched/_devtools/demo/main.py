"""Running the demo: on an embedded server or cluster or a given Redis, with its banner, signals
and clean-up, and its command line."""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import shlex
import shutil
import signal
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import anyio
from anyio.abc import TaskStatus
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._cli.signals import SIGNALS, two_signal_stop
from rsched._client.client import Client
from rsched._core.errors import RschedError, ScheduleNotFound
from rsched._core.keys import Keys
from rsched._core.log import configure_logging, get_logger
from rsched._core.rules import PRIORITIES
from rsched._core.schedule import Schedule
from rsched._core.settings import (
    CLUSTER_HELP,
    SchedulerSettings,
    Settings,
    WorkerSettings,
    safe_url,
)
from rsched._devtools.demo.app import QUEUE, demo_schedules, demo_worker
from rsched._devtools.demo.narrator import Narrator, hms, say
from rsched._devtools.embedded import EmbeddedServer
from rsched._devtools.embedded_cluster import EmbeddedCluster
from rsched._redis.connection import connect, warn_if_unsafe
from rsched._scheduler.scheduler import Scheduler
from rsched._worker.worker import Worker

log = get_logger("rsched.demo")

EXTERNAL_PREFIX = "rsched-demo"
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


@dataclass
class Target:
    url: str
    prefix: str
    server: EmbeddedServer | None  # embedded: the server (the cluster's node) with the demo's keys
    cluster: bool = False


def _cli_path() -> str:
    local = Path(sys.executable).parent / "rsched"
    if shutil.which("rsched") == str(local) or not local.exists():
        return "rsched"
    try:
        relative = os.path.relpath(local)
    except ValueError:  # another drive (Windows)
        return str(local)
    return str(local) if relative.startswith("..") else relative


def _banner(target: Target, server_name: str, schedules: list[Schedule]) -> None:
    url = safe_url(target.url)  # what the banner prints never shows the password
    env = f"RSCHED_REDIS_URL={url}"
    if target.cluster:
        env += " RSCHED_CLUSTER=true"
    if target.prefix != "rsched":
        env += f" RSCHED_PREFIX={target.prefix}"
    pattern = shlex.quote("{" + target.prefix + "}:*")
    if target.server is not None and target.cluster:
        where = (
            f"an embedded cluster of three {server_name} primaries (throwaway: deleted on "
            f"exit; the demo's keys on the one at port {target.server.port})"
        )
        cli = f"redis-cli -p {target.server.port} --scan --pattern {pattern}"
    elif target.server is not None:
        where = f"an embedded {server_name} (throwaway: AOF on, deleted on exit)"
        cli = f"redis-cli -p {target.server.port} --scan --pattern {pattern}"
    else:
        where = f"{server_name} at {url}, key prefix {target.prefix!r}"
        cli = f"redis-cli -u {shlex.quote(url)} --scan --pattern {pattern}"
    say(f"rsched demo: a scheduler, a worker and {len(schedules)} schedules on {where}")
    say()
    say("  Look inside while it runs (another terminal):")
    say(f"    {env} {_cli_path()} ls")
    say("      (then also: show demo-tick, history demo-flaky, dead ls, stats)")
    say(f"    {cli}")
    say("  Stop with Ctrl-C.")
    say()
    for s in schedules:
        if s.cron is not None:
            trigger = f"cron {s.cron}"
        elif s.every is not None:
            trigger = f"every {s.every:g} s"
        else:
            trigger = f"at {hms((s.at or datetime.now(UTC)).timestamp() * 1000)}"
        say(f"  {s.id:<12} {trigger:<20} {s.task:<12} {s.description or ''}")
    say()


async def _server_name(redis: Redis) -> str:
    info = await redis.info("server")
    if info.get("valkey_version"):
        return f"Valkey {info['valkey_version']}"
    return f"Redis {info.get('redis_version', '?')}"


# Ctrl-C before the event loop listens (while the server starts) is remembered here, so it is
# never lost: asyncio's own first-Ctrl-C handling would cancel a task half-way instead.
_early_stop = threading.Event()


def _remember_signal(signum: int, frame: object) -> None:
    _early_stop.set()


def _catch_signals_early() -> None:
    for signum in SIGNALS:
        signal.signal(signum, _remember_signal)


async def _clear_queue(redis: Redis, keys: Keys) -> tuple[int, int]:
    """Drop the demo queue's jobs and delayed retries (an interrupted run leaves some behind:
    they would run, or fail, in the next demo). Its dead letters stay, to be looked at.
    Returns how many jobs and retries there were."""
    streams = [keys.queue(QUEUE, level) for level in PRIORITIES]  # a stream per priority
    async with redis.pipeline(transaction=True) as pipe:
        for stream in streams:
            pipe.xlen(stream)
        pipe.zcard(keys.delayed_queue(QUEUE))
        pipe.delete(*streams, keys.delayed_queue(QUEUE))
        *lengths, retries, _ = await pipe.execute()
    return sum(int(n) for n in lengths), int(retries)


async def _prepare(
    redis: Redis, client: Client, target: Target, schedules: list[Schedule], narrator: Narrator
) -> None:
    name = await _server_name(redis)
    for warning in await warn_if_unsafe(redis, log):
        say(f"note: {warning}. Fine for a demo; see the README before production use.")
    jobs, retries = await _clear_queue(redis, narrator.keys)
    if jobs or retries:
        say(
            f"note: dropped {jobs} job(s) and {retries} retry(ies) an earlier, interrupted demo "
            f"left in queue {QUEUE}"
        )
    for schedule in schedules:
        await client.upsert(schedule)
    await narrator.skip_existing()  # what an earlier demo run left is history, not news
    _banner(target, name, schedules)


async def _serve(
    redis: Redis, settings: Settings, narrator: Narrator, stop: anyio.Event, duration_s: float
) -> None:
    scheduler = Scheduler(redis, settings, owner=f"demo:{os.getpid()}")
    worker = demo_worker(settings, narrator.note)
    say(f"{'time':<12}  {'event':<10} {'schedule':<12} detail")
    async with anyio.create_task_group() as tg:
        await tg.start(narrator.run)
        async with anyio.create_task_group() as engines:
            await engines.start(scheduler.run)
            await engines.start(_run_worker, worker, redis)
            with anyio.move_on_after(duration_s):
                await stop.wait()
            stop.set()
            scheduler.stop()
            worker.stop()
        await narrator.poll()  # the last outcomes, recorded while stopping
        tg.cancel_scope.cancel()


async def _run(target: Target, settings: Settings, duration_s: float) -> int:
    redis = connect(settings)  # its RSCHED_* connection settings (timeouts, pool) apply
    client = Client(redis, settings)
    schedules = demo_schedules(datetime.now(UTC))
    narrator = Narrator(redis, Keys(settings.prefix), [s.id for s in schedules])
    stop = anyio.Event()
    run = anyio.CancelScope()
    forced: list[bool] = []

    def graceful(name: str) -> None:
        say()
        say("stopping: the scheduler finishes its batch, running jobs get a few seconds")
        stop.set()

    def immediate(name: str) -> None:  # stop now, without waiting for running jobs
        forced.append(True)
        say("stopping now")
        run.cancel()

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(two_signal_stop, graceful, immediate)
            if _early_stop.is_set():
                stop.set()
            with run:
                await _prepare(redis, client, target, schedules, narrator)
                if not stop.is_set():
                    await _serve(redis, settings, narrator, stop, duration_s)
            if target.server is None:
                await _clean_up(redis, client, narrator.keys, schedules)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await redis.aclose()
    if forced:
        return EXIT_ERROR
    say(f"stopped cleanly ({narrator.summary()})")
    return EXIT_OK


async def _clean_up(redis: Redis, client: Client, keys: Keys, schedules: list[Schedule]) -> None:
    """On a Redis the demo does not own: remove what it made, say exactly what stays."""
    for schedule in schedules:
        with contextlib.suppress(ScheduleNotFound):
            await client.remove(schedule.id)  # with its history
    await _clear_queue(redis, keys)
    dead = int(await redis.xlen(keys.dead(QUEUE)))
    if not dead:
        await redis.srem(keys.queues, QUEUE)
    say("removed the demo schedules with their history, and the demo queue's jobs and retries")
    say("left in Redis:")
    if dead:
        cli = f"rsched --prefix {keys.prefix}" if keys.prefix != "rsched" else "rsched"
        say(f"  {dead} dead letter(s) in {keys.dead(QUEUE)}: {cli} dead ls --queue {QUEUE} shows")
        say(f"    them, {cli} dead purge --all --queue {QUEUE} deletes them")
        say(f"  the queue name {QUEUE!r} in {keys.queues} (rsched stats counts its dead letters)")
    if await redis.exists(keys.runs):
        say(f"  the runs log {keys.runs} (rsched runs shows it; the scheduler trims it by age)")
    if await redis.exists(keys.audit):
        say(
            f"  the audit trail {keys.audit} (rsched audit shows it; the scheduler trims it by age)"
        )
    if await redis.exists(keys.events):
        say(f"  the events stream {keys.events} (rsched events shows it; capped in length)")
    if await redis.exists(keys.activity):
        say(f"  the activity counters {keys.activity} (per minute and hour; a bounded ring)")
    if await redis.exists(keys.depth):
        say(f"  the queues' depth samples {keys.depth} (the last hour; a bounded ring)")
    say(f"  the scheduler's fencing counter {keys.fence} (kept so that tokens never repeat)")
    say(f"  the lease length the last leader used, {keys.leader_ttl} (what rsched stats reads)")
    say(f"  request ids in {keys.ops('*')}, which expire within 5 minutes")
    say(f"  the deployment's number of partitions in {keys.meta} (rsched init, docs/scaling.md)")


async def _run_worker(
    worker: Worker, redis: Redis, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    await worker.run(redis, task_status=task_status)


# Log events the narration already shows in its own words.
_NARRATED = frozenset({"job.start", "job.end", "server.unsafe"})


def _not_narrated(record: logging.LogRecord) -> bool:
    return record.getMessage() not in _NARRATED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rsched demo",
        description=(
            "Run a scheduler, a worker and four demo schedules in one process and print what "
            "happens. Uses an embedded throwaway server unless RSCHED_REDIS_URL is set."
        ),
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help=CLUSTER_HELP + "; without RSCHED_REDIS_URL, an embedded cluster of three nodes",
    )
    parser.add_argument(
        "--duration", type=float, metavar="S", help="stop by itself after S seconds"
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default="warning",
        help="also show rsched's own log lines from this level (default: warning)",
    )
    return parser


def _settings(url: str, prefix: str, log_level: str, *, cluster: bool = False) -> Settings:
    return Settings(
        redis_url=url,
        prefix=prefix,
        cluster=cluster,
        log_level=log_level,  # type: ignore[arg-type]
        scheduler=SchedulerSettings(lease_ttl_ms=5_000, lease_renew_ms=1_000),
        worker=WorkerSettings(
            queues=[QUEUE],
            concurrency=4,
            shutdown_grace_period_s=3,
            visibility_timeout_s=10,
            heartbeat_s=2,
            promote_interval_ms=100,
        ),
    )


def _explain(exc: BaseException, url: str) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, RedisError | OSError) and not isinstance(exc, RschedError):
        return (
            f"cannot use the Redis at {safe_url(url)} ({exc}); is it running? Unset "
            "RSCHED_REDIS_URL to run on an embedded server instead"
        )
    return str(exc)


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit code (0 after Ctrl-C or ``--duration``)."""
    args = _parser().parse_args(argv)
    if args.duration is not None and not args.duration > 0:
        print("rsched demo: --duration must be > 0 seconds", file=sys.stderr)
        return EXIT_USAGE
    try:
        env = Settings()
    except ValidationError as exc:
        print(f"rsched demo: invalid RSCHED_* settings: {exc}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(args.log_level, env.log_format)
    for handler in logging.getLogger("rsched").handlers:
        handler.addFilter(_not_narrated)
    cluster = args.cluster or env.cluster
    server: EmbeddedServer | None = None
    nodes: EmbeddedCluster[EmbeddedServer] | None = None
    _catch_signals_early()
    try:
        if env.redis_url:
            prefix = os.environ.get("RSCHED_PREFIX") or EXTERNAL_PREFIX
            target = Target(env.redis_url, prefix, None, cluster)
        elif cluster:
            nodes = EmbeddedCluster(lambda extra: EmbeddedServer(extra_args=extra)).start()
            holder = nodes.owner_of_key(Keys(env.prefix).schedules)
            target = Target(holder.url, env.prefix, holder, cluster)
        else:
            server = EmbeddedServer().start()
            target = Target(server.url, env.prefix, server)
        if _early_stop.is_set():
            return EXIT_OK
        settings = _settings(target.url, target.prefix, args.log_level, cluster=cluster)
        duration = args.duration if args.duration is not None else math.inf
        return anyio.run(_run, target, settings, duration)
    except (RschedError, RedisError, OSError, ExceptionGroup) as exc:
        url = server.url if server is not None else nodes.url if nodes is not None else env.url
        print(f"rsched demo: {_explain(exc, url)}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        _catch_signals_early()  # the event loop gave Ctrl-C back to Python: keep cleanup whole
        if server is not None:
            server.stop()
            say("embedded server stopped")
        if nodes is not None:
            nodes.close()
            say("embedded cluster stopped")
