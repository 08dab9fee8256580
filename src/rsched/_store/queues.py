"""Redis access for queues: enqueue, the workers' consumer groups and the queues' statistics;
and QueueStore, which holds every call on a partition's queues.

The worker, the client SDK and the CLI all go through QueueStore, so the layout of a queue's keys
(stream, consumer group, delayed set, dead-letter stream) lives in one place on the Python side.
Its calls are grouped by what they touch and who makes them: the worker's
(rsched._store.worker_calls), dead letters (rsched._store.dead_letters), single jobs
(rsched._store.jobs), the worker registry (rsched._store.worker_registry) and flows
(rsched._store.flows). Every write is a
Lua script in lua/ that is safe to run twice.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rsched._core import tracing
from rsched._core.codes import Code, check
from rsched._core.errors import InvalidJob
from rsched._core.job import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_S, Enqueued, JobOptions
from rsched._core.keys import GROUP, Keys
from rsched._core.limits import Limit, job_limits, with_limits
from rsched._core.partitions import job_partition
from rsched._core.rules import (
    DEFAULT_DEDUP_WINDOW_S,
    DEFAULT_MAX_PAYLOAD_BYTES,
    PRIORITIES,
    Priority,
    check_debounce,
    check_dedup_window,
    check_labels,
    check_name,
    check_priority,
    encode_payload,
    labels_text,
    parse_duration_s,
)
from rsched._core.settings import DEFAULT_HISTORY_LIMIT, Settings
from rsched._core.words import words
from rsched._redis.cluster import is_cluster
from rsched._redis.durability import Durability
from rsched._redis.scripts import virtual_clock
from rsched._store.alerts import EventLog
from rsched._store.dead_letters import DeadLetters
from rsched._store.flows import Flows
from rsched._store.job_logs import JobLogs
from rsched._store.limits import Limits
from rsched._store.worker_calls import WorkerCalls

T = TypeVar("T")


class QueueStore(WorkerCalls, DeadLetters, Flows, Limits, JobLogs):
    """Every script call and read on the queues of one partition, for one Redis client."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        dead_letter_max_entries: int = 100_000,
        dedup_window_s: float = DEFAULT_DEDUP_WINDOW_S,
        runs_max_entries: int = 500_000,
    ) -> None:
        super().__init__(redis)
        self.keys = keys
        self.history_limit = history_limit
        self.max_payload_bytes = max_payload_bytes
        self.dead_letter_max_entries = dead_letter_max_entries
        self.dedup_window_s = dedup_window_s
        self.events = EventLog(redis, keys)
        self.runs_max_entries = runs_max_entries
        # The audit trail's cap (MAXLEN ~; limit_set.lua writes partition 0's, docs/audit.md).
        self.audit_cap = 100_000

    @classmethod
    def from_settings(
        cls, redis: Redis, settings: Settings, keys: Keys | None = None
    ) -> QueueStore:
        """The store for one deployment's limits and one partition's keys (the only partition
        when ``keys`` is not given)."""
        store = cls(
            redis,
            keys or Keys(settings.prefix),
            history_limit=settings.history_limit,
            max_payload_bytes=settings.max_payload_bytes,
            dead_letter_max_entries=settings.worker.dead_letter_max_entries,
            dedup_window_s=settings.dedup_window_s,
            runs_max_entries=settings.retention.runs_max_entries,
        )
        store.events.max_len = settings.health.events_max_len
        store.durability = Durability.from_settings(settings)
        store.audit_cap = settings.retention.audit_max_entries
        store.flow_ttl_ms = round(settings.retention.runs_max_age_s * 1000)
        return store

    async def enqueue(
        self,
        task: str,
        payload: dict[str, Any] | None = None,
        *,
        queue: str = "default",
        delay_s: float | str | timedelta = 0,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        execution_id: str | None = None,
        retry_base_s: float | None = None,
        retry_multiplier: float | None = None,
        retry_max_s: float | None = None,
        retry_jitter: float | None = None,
        priority: Priority = "normal",
        dedup_window_s: float | None = None,
        job_id: str | None = None,
        limits: Sequence[Limit] = (),
        debounce_key: str | None = None,
        debounce: float | str | timedelta | None = None,
        start_deadline: float | str | timedelta | None = None,
        traceparent: str = "",
        labels: Mapping[str, object] | Sequence[str] | None = None,
    ) -> Enqueued:
        """Add a one-off job. Raises InvalidJob naming the bad field.

        ``traceparent`` (a client that traces): the W3C traceparent the job carries.

        ``delay_s`` is a duration (seconds, "90s", "5m", a timedelta): the job waits in the
        queue's delayed set until then (Redis time).
        With an ``execution_id`` the call is idempotent: while a job with that id waits, runs
        or finished less than ``dedup_window_s`` ago, nothing is added and the result names
        the existing job (``created=False``). Without one the job gets ``job_id`` (a caller
        that must know the job's partition makes it with new_execution_id) or a new random
        id, and skips that check.

        With a ``debounce_key`` and a ``debounce`` (a duration, at most a day) the calls with
        that key on this queue collapse into one job while its window is open (see
        :meth:`_debounced`); ``created`` then says whether this call opened the window.
        """
        _job_field("task", check_name, task, "task name")
        _job_field("queue", check_name, queue, "queue name")
        level = _job_field("priority", check_priority, priority)
        own_id = execution_id is not None
        dedup_ms: int | None = None
        if execution_id is None:
            execution_id = job_id or new_execution_id()
            if dedup_window_s is not None:
                _job_field("dedup_window_s", check_dedup_window, dedup_window_s)
        else:
            _job_field("execution_id", check_name, execution_id, "execution id")
            window = self.dedup_window_s if dedup_window_s is None else dedup_window_s
            dedup_ms = round(_job_field("dedup_window_s", check_dedup_window, window) * 1000)
        limit = self.max_payload_bytes
        body = _job_field("payload", encode_payload, {} if payload is None else payload, limit)
        declared = job_limits(limits, {} if payload is None else payload)
        options = JobOptions.checked(
            max_retries=max_retries,
            timeout_s=timeout_s,
            retry_base_s=retry_base_s,
            retry_multiplier=retry_multiplier,
            retry_max_s=retry_max_s,
            retry_jitter=retry_jitter,
            start_deadline=start_deadline,
        )
        delay = _job_field("delay_s", functools.partial(parse_duration_s, allow_zero=True), delay_s)
        if delay > 10 * 365 * 86400:
            raise InvalidJob("delay_s", f"at most 10 years, got {delay:g} s")
        debounce_ms = _debounce_ms(debounce_key, debounce, own_id, delay)
        fields = [
            "execution_id", execution_id,
            "task", task,
            "payload", body.decode(),
            "attempt", "1",
            "origin", "enqueue",
            "opts", with_limits(options.encode(), declared),
        ]  # fmt: skip
        if level != "normal":
            fields += ["priority", level]  # a retry or a requeue keeps it (lua/promote.lua)
        if traceparent:
            fields += [tracing.PARENT, traceparent]
        if labels:  # only then: a job without labels carries no field for them
            fields += ["labels", labels_text(_job_field("labels", check_labels, labels))]
        if debounce_ms is not None:
            assert debounce_key is not None  # checked with debounce_ms
            return await self._debounced(queue, debounce_key, debounce_ms, fields)
        k = self.keys
        keys = [k.queue(queue, level), k.delayed_queue(queue), k.queues]
        if dedup_ms is not None:
            fields += ["dedup", str(dedup_ms)]
            keys.append(k.dedup(execution_id))
        op_key, op_id = k.new_op()
        res = await self.call(
            "enqueue",
            [*keys[:3], op_key, *keys[3:]],
            [queue, round(delay * 1000), op_id, *fields],
        )
        if isinstance(res, list) and res and int(res[0]) == Code.EXISTS:
            return Enqueued(execution_id, created=False)
        check(res, script="enqueue", queue=queue)
        return Enqueued(execution_id, created=True)

    async def _debounced(
        self, queue: str, key: str, debounce_ms: int, fields: list[str]
    ) -> Enqueued:
        """Open the debounce window of ``key`` on ``queue`` with a job due in ``debounce_ms``,
        or move the open window's job to these fields and that due time (lua/debounce.lua).
        ``fields`` start with the execution id a new window's job takes."""
        k = self.keys
        op_key, op_id = k.new_op()
        res = await self.call(
            "debounce",
            [k.delayed_queue(queue), k.queues, op_key, k.debounce(queue, key)],
            [queue, debounce_ms, op_id, fields[1], *fields[2:]],
        )
        code = check(res, script="debounce", queue=queue)
        return Enqueued(str(res[2]), created=code == Code.DELAYED)

    async def queue_names(self) -> list[str]:
        return sorted(str(q) for q in await self.redis.smembers(self.keys.queues))

    async def queue_stats(self) -> dict[str, dict[str, int | float | None]]:
        """Per queue: length, pending, consumers, delayed, dead, oldest_pending_ms (age).

        Length and pending count every priority level; ``high`` and ``low`` say how many of the
        length wait in those levels' streams; consumers are those of the normal stream (a worker
        reads all levels of its queues)."""
        names = await self.queue_names()
        # A cluster pipeline takes commands on keys only; a virtual clock is no TIME.
        apart = is_cluster(self.redis) or virtual_clock(self.redis) is not None
        async with self.redis.pipeline(transaction=False) as pipe:
            if not apart:
                pipe.time()
            for name in names:
                for level in PRIORITIES:
                    pipe.xlen(self.keys.queue(name, level))
                pipe.zcard(self.keys.delayed_queue(name))
                pipe.xlen(self.keys.dead(name))
            head = await pipe.execute(raise_on_error=False)
        if apart:  # the clock of the partition's node, or the virtual one
            now_ms = await self.time_ms()
        else:
            seconds, micros = head.pop(0)
            now_ms = int(seconds) * 1000 + int(micros) // 1000
        lanes = [(name, level) for name in names for level in PRIORITIES]
        # Each stream's group (no stream or no group yet: an error, skipped), then the oldest
        # pending entry of those that hold some: two round trips whatever the queues.
        async with self.redis.pipeline(transaction=False) as pipe:
            for name, level in lanes:
                pipe.xinfo_groups(self.keys.queue(name, level))
            infos = await pipe.execute(raise_on_error=False)
        groups = {lane: _group(info) for lane, info in zip(lanes, infos, strict=True)}
        held = [lane for lane, g in groups.items() if g and int(g["pending"])]
        async with self.redis.pipeline(transaction=False) as pipe:
            for name, level in held:
                pipe.xpending(self.keys.queue(name, level), GROUP)
            summaries = dict(zip(held, await pipe.execute(raise_on_error=False), strict=True))
        out: dict[str, dict[str, int | float | None]] = {}
        per = len(PRIORITIES) + 2
        for i, name in enumerate(names):
            values = [_as_int(v) for v in head[i * per : (i + 1) * per]]
            lengths = dict(zip(PRIORITIES, values, strict=False))
            delayed, dead = values[-2], values[-1]
            pending, consumers, oldest = 0, 0, None
            for level in PRIORITIES:
                group = groups[(name, level)]
                if group is None:
                    continue
                pending += int(group["pending"])
                if level == "normal":
                    consumers = int(group["consumers"])
                summary = summaries.get((name, level))
                low = summary.get("min") if isinstance(summary, dict) else None
                if low:
                    age = max(0, now_ms - int(str(low).split("-")[0]))
                    oldest = age if oldest is None else max(oldest, age)
            out[name] = {
                "length": sum(lengths.values()),
                "pending": pending,
                "consumers": consumers,
                "delayed": delayed,
                "dead": dead,
                "oldest_pending_ms": oldest,
                "high": lengths["high"],
                "low": lengths["low"],
            }
        return out

    async def has_group(self, queue: str) -> bool:
        """Whether the queue's stream has the workers' consumer group (a worker's /readyz)."""
        try:
            groups = await self.redis.xinfo_groups(self.keys.queue(queue))
        except ResponseError:
            return False  # no stream yet
        return any(group.get("name") == GROUP for group in groups)

    async def create_groups(self, queues: Sequence[str]) -> None:
        """Create the consumer group on each stream (every priority level) of each queue (from
        the stream's start; idempotent)."""
        for queue in queues:
            for stream in self.keys.streams(queue):
                try:
                    await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
                except ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise
        await self.redis.sadd(self.keys.queues, *queues)

    async def forget_consumers(self, queues: Sequence[str], *, keep: str, idle_ms: int) -> int:
        """Delete group consumers idle longer than ``idle_ms`` that hold no pending entry
        (workers that are gone); returns how many. Harmless for a live but quiet worker: it
        holds nothing, and its next read re-creates its consumer."""
        forgotten = 0
        for queue in queues:
            for stream in self.keys.streams(queue):
                consumers = await self.redis.xinfo_consumers(stream, GROUP)
                for c in consumers:
                    name = str(c.get("name"))
                    if (
                        name != keep
                        and not int(c.get("pending", 0))
                        and int(c.get("idle", 0)) > idle_ms
                    ):
                        await self.redis.xgroup_delconsumer(stream, GROUP, name)
                        forgotten += 1
        return forgotten


def new_execution_id(partition: int = 0, partitions: int = 1) -> str:
    """A random execution id for an enqueued job given none; with ``partitions`` > 1, one whose
    job is in ``partition`` (drawn again until it is: N draws on average, a few µs each)."""
    while True:
        execution_id = f"job-{uuid.uuid4().hex}"
        if partitions == 1 or job_partition(execution_id, partitions) == partition:
            return execution_id


def _debounce_ms(
    key: str | None,
    debounce: float | str | timedelta | None,
    own_id: bool,
    delay_s: float,
) -> int | None:
    """The debounce of an enqueue in ms (None: not debounced), its arguments checked together;
    raises InvalidJob naming the field and the fix."""
    if key is None and debounce is None:
        return None
    w = words()
    if key is None:
        raise InvalidJob(
            "debounce_key",
            f"give the key of the calls to collapse with {w.job_field('debounce')}, "
            "e.g. 'reindex:42'",
        )
    if debounce is None:
        raise InvalidJob(
            "debounce",
            f"give how long after the last call the job runs with {w.job_field('debounce_key')}, "
            "e.g. 2s",
        )
    _job_field("debounce_key", check_name, key, "debounce key")
    seconds = _job_field("debounce", check_debounce, debounce)
    if own_id:
        raise InvalidJob(
            "execution_id",
            f"a debounced job takes its window's execution id: leave "
            f"{w.job_field('execution_id')} out ({w.job_field('debounce_key')} collapses the "
            f"calls), or drop {w.job_field('debounce')} to enqueue with your own id",
        )
    if delay_s:
        raise InvalidJob(
            "delay_s",
            f"a debounced job runs {w.job_field('debounce')} after the last call: leave "
            f"{w.job_field('delay_s')} out and give the wait as {w.job_field('debounce')}",
        )
    return max(1, round(seconds * 1000))


def _job_field(field: str, check: Callable[..., T], *args: Any) -> T:
    """``check(*args)``, its ValueError raised as InvalidJob naming ``field``."""
    try:
        return check(*args)
    except ValueError as exc:
        raise InvalidJob(field, str(exc)) from None


def _group(info: Any) -> dict[str, Any] | None:
    """The workers' consumer group among a stream's XINFO GROUPS (None: no stream or group)."""
    if isinstance(info, BaseException):
        return None
    return next((g for g in info if g.get("name") == GROUP), None)


def _as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
