"""The worker: runs registered task handlers for jobs read from queue streams.

Actors (anyio tasks sharing one WorkerState, state.py; stopped in this order on shutdown):
- reader (reader.py): XREADGROUP on the worker's queues, as many entries as there are free
  slots; each queue is one stream per priority level, read by weighted turns
  (``priority_weights``), in every partition of the deployment (the partitions in turn; an idle
  worker blocks in one XREADGROUP per partition);
- runners (runner.py): ``concurrency`` tasks taking jobs from the reader (async handlers in the
  loop, plain functions in worker threads), each job under its timeout and its own cancel
  scope (cancel_previous);
- acker (acker.py): records finished runs in batches (one script call acknowledges many
  entries);
- journal (journal.py): writes what running handlers said (``job.set_progress``, ``job.log``,
  logging records inside them) every 0.3 s, one script call per partition with news;
- upkeep (upkeep.py):
  - reclaimer: takes over entries idle longer than the visibility timeout (a dead worker's),
    dead-lettering those delivered more than ``max_deliveries`` times (poison);
  - promoter: moves due retries and delayed jobs from the delayed sets into the streams;
  - cancel listener: cancels a running handler when cancel_previous fires a newer occurrence,
    or an operator cancels the job (``rsched cancel``);
  - registry: every ``heartbeat_s``, keeps the entries of running jobs fresh so no other
    worker reclaims them (the heartbeat), then refreshes the worker's record in the worker
    registry (``rsched workers``, the running jobs' start times); the record is removed on the
    way out.

A stop that cannot wait for every job (the second signal, or the grace period over) hands the
entries of the jobs it cancelled back at once: the next reclaim of any worker takes them,
instead of after the visibility timeout.

Delivery is at least once: an entry is acknowledged only in the same script that records its
outcome, so a worker that dies at any point leaves it pending for another worker.
"""

from __future__ import annotations

import inspect
import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, get_args

import anyio
from anyio.abc import TaskStatus
from pydantic import ValidationError
from redis.asyncio import Redis

from rsched._core import tracing
from rsched._core.backoff import Backoff
from rsched._core.errors import ConfigError, InvalidArgument
from rsched._core.flows import FLOW_TASK
from rsched._core.http_target import HTTP_TASK
from rsched._core.job import Job
from rsched._core.limits import Limit, coerce_limits
from rsched._core.log import get_logger
from rsched._core.rules import check_name
from rsched._core.settings import DurabilityLevel, Settings, WorkerSettings, problems
from rsched._redis.connection import connect, warn_if_unsafe
from rsched._redis.durability import Durability
from rsched._store.deployment import deployment_keys
from rsched._store.queues import QueueStore
from rsched._store.worker_calls import Done
from rsched._worker.acker import Acker
from rsched._worker.failures import ACTOR_FAILURES
from rsched._worker.flow_starter import flow_starter
from rsched._worker.inbox import Inbox
from rsched._worker.journal import Journal, capture
from rsched._worker.reader import Reader
from rsched._worker.runner import Runner
from rsched._worker.state import Stream, WorkerState
from rsched._worker.traced import TracedRunner
from rsched._worker.upkeep import Upkeep, hand_back

if TYPE_CHECKING:
    from rsched._worker.http_caller import HttpCaller

log = get_logger("rsched.worker")

F = TypeVar("F", bound=Callable[..., Any])
Handler = Callable[[Job], Any]

ACK_BUFFER = 100_000
ACK_FLUSH_S = 5.0
# The most a stop spends handing back entries and leaving the registry (Redis may be gone).
LEAVE_S = 3.0


class Worker:
    """Runs registered task handlers for jobs read from queue streams.

    ``queues`` and ``concurrency`` are defaults that ``RSCHED_WORKER__QUEUES`` /
    ``RSCHED_WORKER__CONCURRENCY`` and the ``rsched-worker`` flags override. Register handlers
    with :meth:`task`; run with ``await worker.run()`` (or the ``rsched-worker`` command).

    Sync handlers run in worker threads. A thread cannot be interrupted: when its job times
    out or is cancelled, the job is recorded as timed out / cancelled and the worker moves on,
    but the thread keeps running until the function returns (and keeps its thread slot);
    a long sync handler should watch ``job.should_stop`` (or wait on ``job.stop_event``).
    An async handler must not block the event loop for longer than ``visibility_timeout_s``:
    heartbeats stop meanwhile and another worker would take its job over.

    With ``http=True`` (or ``RSCHED_WORKER__HTTP``, ``rsched-worker --http``) it also delivers
    HTTP targets (the built-in task ``rsched.http``, docs/http-targets.md; needs the ``http``
    extra); such a worker may register no task of its own.
    Since 0.1.0.
    """

    def __init__(
        self,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        *,
        settings: Settings | None = None,
        http: bool | None = None,
    ) -> None:
        self._handlers: dict[str, tuple[Handler, bool]] = {}
        self._http_arg = http
        self._limits: dict[str, tuple[Limit, ...]] = {}
        self._queues_arg = list(queues) if queues is not None else None
        self._concurrency_arg = concurrency
        self._settings_arg = settings
        self._overrides: dict[str, Any] = {}
        self._root_overrides: dict[str, Any] = {}
        self._stopping = anyio.Event()
        self._hard = False
        self._runners_scope: anyio.CancelScope | None = None
        self._state: WorkerState | None = None
        self._reading = False
        self.consumer = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"

    # --- registration ----------------------------------------------------------------------

    def task(self, name: str, *, limits: Sequence[Limit] = ()) -> Callable[[F], F]:
        """Register the decorated function as the handler of task ``name``; its jobs start only
        while they may hold every one of ``limits`` (rsched.Limit: per-key concurrency and rate
        caps across every worker, docs/limits.md)."""

        def decorate(fn: F) -> F:
            self.add_task(name, fn, limits=limits)
            return fn

        return decorate

    def add_task(self, name: str, fn: Handler, *, limits: Sequence[Limit] = ()) -> None:
        """Register ``fn`` (async or plain function taking a :class:`Job`) for task ``name``,
        its jobs holding ``limits`` while they run. Raises ConfigError naming what is wrong."""
        try:
            check_name(name, "task name")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if name in self._handlers:
            raise ConfigError(f"task {name!r} is registered twice; give each handler one name")
        if not callable(fn):
            raise ConfigError(f"handler of task {name!r} is not callable: {fn!r}")
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
        )
        try:
            declared = coerce_limits(limits)
        except InvalidArgument as exc:
            raise ConfigError(f"task {name!r}: {exc}") from None
        self._handlers[name] = (fn, is_async)
        if declared:
            self._limits[name] = declared

    @property
    def tasks(self) -> list[str]:
        return sorted(self._handlers)

    @property
    def limit_templates(self) -> list[str]:
        """The key templates of the limits its tasks declare (the metrics' ``limit`` label)."""
        return sorted({lim.key for limits in self._limits.values() for lim in limits})

    def configure(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        redis_url: str | None = None,
        prefix: str | None = None,
        metrics_port: int | None = None,
        metrics_host: str | None = None,
        durability: DurabilityLevel | None = None,
        cluster: bool | None = None,
        http: bool | None = None,
    ) -> None:
        """Override settings (the ``rsched-worker`` flags); wins over env and constructor."""
        if http is not None:
            self._overrides["http"] = http
        if cluster is not None:
            self._root_overrides["cluster"] = cluster
        if queues is not None:
            self._overrides["queues"] = list(queues)
        if concurrency is not None:
            self._overrides["concurrency"] = concurrency
        if redis_url is not None:
            self._root_overrides["redis_url"] = redis_url
        if prefix is not None:
            self._root_overrides["prefix"] = prefix
        if metrics_port is not None:
            if not 0 <= metrics_port <= 65_535:
                raise ConfigError(
                    f"--metrics-port: must be 0 to 65535 (0 picks a free port), not {metrics_port}"
                )
            self._root_overrides["metrics_port"] = metrics_port
        if metrics_host is not None:
            self._root_overrides["metrics_host"] = metrics_host
        if durability is not None:
            if durability not in get_args(DurabilityLevel):
                raise ConfigError(
                    f"--durability: async, replicated or replicated_fsync, not {durability!r}"
                )
            self._root_overrides["durability"] = durability

    def resolve_settings(self) -> Settings:
        """The effective settings: flags > RSCHED_* environment > constructor > defaults."""
        try:
            base = self._settings_arg or Settings()
        except ValidationError as exc:
            raise ConfigError(
                f"invalid RSCHED_* environment ({problems(exc)}); lists are JSON, e.g. "
                'RSCHED_WORKER__QUEUES=\'["default","reports"]\''
            ) from None
        given = base.worker.model_fields_set
        worker: dict[str, Any] = base.worker.model_dump()
        if self._queues_arg is not None and "queues" not in given:
            worker["queues"] = self._queues_arg
        if self._concurrency_arg is not None and "concurrency" not in given:
            worker["concurrency"] = self._concurrency_arg
        if self._http_arg is not None and "http" not in given:
            worker["http"] = self._http_arg
        worker.update(self._overrides)
        try:
            cfg = WorkerSettings.model_validate(worker)
        except ValidationError as exc:
            raise ConfigError(f"invalid worker settings: {_worker_problems(exc)}") from None
        if not cfg.queues:
            raise ConfigError("queues: give at least one queue (e.g. --queues default)")
        for queue in cfg.queues:
            try:
                check_name(queue, "queue name")
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        return base.model_copy(update={"worker": cfg, **self._root_overrides})

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def completed_total(self) -> int:
        """Jobs completed by the current (or last) run."""
        return self._state.completed if self._state else 0

    @property
    def failed_total(self) -> int:
        """Failed attempts (retried or dead-lettered) of the current (or last) run; an attempt
        whose handler raised :class:`Retry` counts here only when it ends in a dead letter."""
        return self._state.failed if self._state else 0

    @property
    def retried_total(self) -> int:
        """Attempts of the current (or last) run whose handler raised :class:`Retry` and got
        another attempt."""
        return self._state.retried if self._state else 0

    @property
    def reading(self) -> bool:
        """True while the worker reads its queues (from start-up done until a stop)."""
        return self._reading and not self._stopping.is_set()

    @property
    def partitions(self) -> int:
        """The deployment's number of partitions this worker reads (1 until it started)."""
        return len(self._state.stores) if self._state else 1

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called (until :meth:`run` returns)."""
        return self._stopping.is_set()

    def stop(self, *, graceful: bool = True) -> None:
        """Stop reading; in-flight jobs get ``shutdown_grace_period_s`` (none when
        ``graceful=False``), then the rest are cancelled and left unacknowledged."""
        if not graceful:
            self._hard = True
            if self._runners_scope is not None:
                self._runners_scope.cancel()
        self._stopping.set()

    async def run(
        self,
        redis: Redis | None = None,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run until :meth:`stop`; raises ConfigError for bad settings.

        ``redis`` must return decoded strings (as :func:`rsched._redis.connection.connect` makes);
        without one, the worker opens its own from the settings' ``redis_url``.
        """
        settings = self.resolve_settings()
        cfg = settings.worker
        if not self._handlers and not cfg.http:
            raise ConfigError(
                "no tasks registered: register a handler with @worker.task(name) before "
                "running the worker, or deliver HTTP targets (http=True, --http) (a worker "
                "without tasks would only turn jobs away)"
            )
        # Decided once, at start (docs/tracing.md): a worker that does not trace runs the plain
        # Runner, with nothing added per job.
        runner_class = TracedRunner if tracing.decide(settings.tracing) else Runner
        own = redis is None
        # Entries written by others may hold bytes that are not UTF-8: read them (as U+FFFD)
        # and dead-letter them rather than fail on every read.
        client = connect(settings, encoding_errors="replace") if redis is None else redis
        # Partition 0's store until the deployment's number of partitions is read (_prepare).
        store = QueueStore.from_settings(client, settings)
        store.durability = Durability.from_settings(settings, raises=False)  # nobody to tell
        log.info(
            "worker.start",
            worker=self.consumer,
            queues=",".join(cfg.queues),
            concurrency=cfg.concurrency,
            tasks=",".join(self.tasks),
            http=cfg.http,
            prefix=settings.prefix,
        )
        handed_back = 0
        try:
            stores = await self._prepare(store, settings)
            if not stores:
                task_status.started()
                return
            with capture(logging.getLevelName(cfg.job_log_level.upper())):
                await self._serve(stores, settings, runner_class, task_status)
        finally:
            self._stopping, self._hard = anyio.Event(), False  # ready for another run()
            with anyio.CancelScope(shield=True):
                handed_back = await self._leave(store)
                if own:
                    await client.aclose()
            log.info(
                "worker.stop",
                worker=self.consumer,
                completed=self.completed_total,
                failed=self.failed_total,
                handed_back=handed_back,
                left_pending=len(self._state.inflight) if self._state else 0,
            )

    async def _leave(self, store: QueueStore) -> int:
        """On the way out: hand back the entries of jobs the stop cancelled (or never started)
        and leave the registry. Returns how many entries were handed back."""
        state = self._state
        handed = 0
        with anyio.move_on_after(LEAVE_S):
            try:
                if state is not None and (state.abandoned or state.inflight):
                    handed = await hand_back(state)
                    state.abandoned.clear()
                await store.unregister(self.consumer)
            except ACTOR_FAILURES as exc:
                log.warning("redis.error", actor="stop", error=str(exc))
        return handed

    async def _prepare(self, store: QueueStore, settings: Settings) -> list[QueueStore]:
        """Check the server, read the deployment's number of partitions and create the consumer
        groups in each, waiting for Redis if it is down. Returns the store of each partition, or
        none when asked to stop first; raises PartitionMismatch."""
        backoff = Backoff()
        while not self._stopping.is_set():
            try:
                await warn_if_unsafe(store.redis, log)
                keys = await deployment_keys(store.redis, settings)
                stores = [
                    QueueStore.from_settings(store.redis, settings, k)
                    for k in keys.every_partition()
                ]
                for each in stores:
                    each.durability = store.durability
                    await each.create_groups(settings.worker.queues)
                return stores
            except ACTOR_FAILURES as exc:
                delay = backoff.next()
                log.warning("redis.error", actor="start", error=str(exc), retry_s=round(delay, 2))
                with anyio.move_on_after(delay):
                    await self._stopping.wait()
        return []

    def _run_handlers(self, stores: list[QueueStore]) -> dict[str, tuple[Handler, bool]]:
        """The handlers of one run: the tasks registered, and the start of schedules' flows
        that every worker has (rsched._worker.flow_starter)."""
        return {**self._handlers, FLOW_TASK: (flow_starter(stores), True)}

    def _new_state(
        self,
        handlers: dict[str, tuple[Handler, bool]],
        stores: list[QueueStore],
        settings: Settings,
    ) -> WorkerState:
        """The state the actors of one run share (rsched.testing drives them from it too)."""
        return WorkerState(handlers, self.consumer, stores, settings, task_limits=self._limits)

    async def _serve(
        self,
        stores: list[QueueStore],
        settings: Settings,
        runner_class: type[Runner],
        task_status: TaskStatus[None],
    ) -> None:
        handlers = self._run_handlers(stores)
        caller = _http_caller(settings)
        if caller is not None:
            handlers[HTTP_TASK] = (caller, True)
        try:
            await self._serve_jobs(handlers, stores, settings, runner_class, task_status)
        finally:
            if caller is not None:
                with anyio.CancelScope(shield=True):
                    await caller.aclose()

    async def _serve_jobs(
        self,
        handlers: dict[str, tuple[Handler, bool]],
        stores: list[QueueStore],
        settings: Settings,
        runner_class: type[Runner],
        task_status: TaskStatus[None],
    ) -> None:
        cfg = settings.worker
        send, recv = anyio.create_memory_object_stream[tuple[Stream, Done]](ACK_BUFFER)
        jobs = Inbox()
        state = self._state = self._new_state(handlers, stores, settings)
        reader = Reader(state, jobs)
        journal = Journal(state)
        runner = runner_class(state, send, journal)
        upkeep = Upkeep(state, reader)
        acker_done = anyio.Event()
        async with anyio.create_task_group() as services:
            services.start_soon(Acker(state).run, recv, acker_done)
            await services.start(journal.run)
            services.start_soon(upkeep.promoter)
            await services.start(upkeep.cancel_listener)
            await services.start(upkeep.registry)
            with anyio.CancelScope() as runners_scope:
                self._runners_scope = runners_scope
                if self._hard:
                    runners_scope.cancel()
                async with anyio.create_task_group() as runners:
                    for _ in range(cfg.concurrency):
                        runners.start_soon(runner.run, jobs)
                    async with anyio.create_task_group() as intake:
                        intake.start_soon(reader.run)
                        intake.start_soon(upkeep.reclaimer)
                        task_status.started()
                        self._reading = True
                        await self._stopping.wait()
                        self._reading = False
                        intake.cancel_scope.cancel()
                    jobs.close()  # runners finish the jobs already read, then return
                    log.info(
                        "worker.draining",
                        running=len(state.running),
                        grace_s=cfg.shutdown_grace_period_s,
                    )
                    if self._hard:
                        runners_scope.cancel()
                    else:
                        runners_scope.deadline = anyio.current_time() + cfg.shutdown_grace_period_s
            self._runners_scope = None
            if runners_scope.cancelled_caught:
                log.warning("worker.grace_expired", left_pending=len(state.inflight))
            send.close()
            if not self._hard:
                with anyio.move_on_after(ACK_FLUSH_S):
                    await acker_done.wait()
                with anyio.move_on_after(ACK_FLUSH_S):
                    await journal.flush()  # what the last handlers said
            services.cancel_scope.cancel()


def _http_caller(settings: Settings) -> HttpCaller | None:
    """The handler of HTTP targets of a worker started with ``--http`` (None for the others,
    which never import httpx). Raises ConfigError when httpx is missing."""
    if not settings.worker.http:
        return None
    try:
        from rsched._worker.http_caller import HttpCaller
    except ImportError as exc:
        raise ConfigError(
            f"worker.http (--http) needs httpx ({exc}): pip install 'rsched[http]'"
        ) from None
    return HttpCaller(settings.http)


def _worker_problems(exc: ValidationError) -> str:
    """One line: each problem after the flag (when ``rsched-worker`` has one) and the variable
    that set it."""
    parts = []
    for err in exc.errors():
        name = ".".join(str(p) for p in err["loc"])
        flag = f"--{name} / " if name in ("queues", "concurrency") else ""
        given = f"{flag}RSCHED_WORKER__{name.upper()}"
        parts.append(f"{given}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)
