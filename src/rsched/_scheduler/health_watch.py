"""The scheduler's health watch: an actor that, while its scheduler leads a partition, classifies
the partition's schedules every ``health.check_interval_s`` and records what changed on the
partition's events stream (one watch per led partition: the data it reads is per partition).

It announces a schedule turned late, stuck or failing, and recovered; and the leader change
when its scheduler acquires the partition's lease (``leader_changed``, with a ``partition``
field when the deployment has more than one). The states it announced are kept in
``{p}:health`` (id -> state), so a new leader continues from them instead of announcing
everything again, and re-checks exactly those ids (plus the bounded candidate reads of
rsched._ops.health) to see them recover. With an alert webhook configured, the watch of partition 0
also forwards every event of the deployment's events stream written while it leads (every
partition's, and the workers' dead letters) to the webhook's bounded queue: once, whoever leads
the other partitions.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio.abc import TaskStatus
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._core.backoff import Backoff
from rsched._core.health import ScheduleHealth
from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._core.settings import Settings
from rsched._ops.health import HealthReader
from rsched._ops.webhook import WebhookSender
from rsched._store.alerts import EventLog

log = get_logger("rsched.health")


class HealthWatch:
    """Started by the scheduler with ``tg.start(watch.run)``; told of each lease it acquires."""

    def __init__(
        self,
        redis: Redis,
        settings: Settings,
        is_leader: Callable[[], bool],
        *,
        keys: Keys | None = None,
        webhook: WebhookSender | None = None,
    ) -> None:
        self.settings = settings
        self.cfg = settings.health
        self.redis = redis
        self.reader = HealthReader(redis, settings, keys)
        self.events = EventLog(redis, self.reader.keys, max_len=self.cfg.events_max_len)
        self.is_leader = is_leader
        # A sender given is shared (the scheduler runs it); else this watch has and runs its own.
        self._runs_webhook = webhook is None
        # The events stream is the deployment's: one watch forwards it.
        self._forwards = self.reader.keys.partition == 0
        secret = settings.alert_webhook_secret
        self.webhook = webhook or (
            WebhookSender(
                settings.alert_webhook_url,
                secret.get_secret_value() if secret else None,
                self.cfg,
            )
            if settings.alert_webhook_url
            else None
        )
        self.checks = 0
        self._leads, self._lead_inbox = anyio.create_memory_object_stream[str](16)
        self._states: dict[str, str] | None = None  # None: to be read from Redis
        self._cursor: str | None = None  # the last event forwarded to the webhook
        self._dead_seen: dict[str, str] = {}  # queue -> newest dead letter id looked at

    def on_lead(self, lease: str) -> None:
        """The scheduler acquired ``lease`` (``<token>:<owner>``): announce it."""
        try:
            self._leads.send_nowait(lease)
        except anyio.WouldBlock:
            log.warning("health.lead_not_announced", lease=lease)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            if self.webhook is not None and self._runs_webhook:
                await tg.start(self.webhook.run)
            task_status.started()
            backoff = Backoff()
            delay = self.cfg.check_interval_s
            async with self._lead_inbox:
                while True:
                    lease = None
                    with anyio.move_on_after(delay):
                        lease = await self._lead_inbox.receive()
                    try:
                        if lease is not None:
                            await self._announce_lead(lease)
                            # Look once the ticker had an interval to fire what came due while
                            # no one led: those were late, the leader change says so already.
                            continue
                        if self.is_leader():
                            await self.check()
                        else:  # read again when leading again
                            self._states, self._dead_seen = None, {}
                        backoff.reset()
                        delay = self.cfg.check_interval_s
                    except (RedisError, OSError) as exc:
                        delay = backoff.next()
                        log.warning("redis.error", actor="health", error=str(exc), retry_s=delay)
                    except Exception as exc:
                        # Health is reported beside the scheduler's work: data it cannot read
                        # must never stop the firing. Logged, and tried again later.
                        delay = max(backoff.next(), self.cfg.check_interval_s)
                        log.error("health.check_failed", error=repr(exc), retry_s=delay)

    async def _announce_lead(self, lease: str) -> None:
        token, _, owner = lease.partition(":")
        if self.webhook is not None and self._forwards:
            self._cursor = await self.events.last_id()
        keys = self.reader.keys
        partition = keys.partition if keys.partitions > 1 else None
        await self.events.publish("leader_changed", owner=owner, token=token, partition=partition)

    async def check(self) -> list[ScheduleHealth]:
        """One look: classify, record each change, forward new events to the webhook."""
        if self._states is None:
            raw = await self.redis.hgetall(self.reader.keys.health)
            self._states = {str(k): str(v) for k, v in raw.items()}
        states = self._states
        now = await self.reader.now_ms()
        found, _ = await self.reader.schedules(
            now, extra=list(states), dead_cursors=self._dead_seen
        )
        by_id = {h.id: h for h in found}
        for h in found:
            if not h.healthy and states.get(h.id) != h.state:
                await self.events.publish(
                    f"schedule_{h.state}", schedule_id=h.id, reason=h.reason, was=states.get(h.id)
                )
                await self.redis.hset(self.reader.keys.health, h.id, h.state)
                states[h.id] = h.state
        for sid, was in list(states.items()):
            now_h = by_id.get(sid)
            if now_h is None or now_h.healthy:
                state = now_h.state if now_h is not None else "removed"
                await self.events.publish(
                    "schedule_recovered", schedule_id=sid, was=was, state=state
                )
                await self.redis.hdel(self.reader.keys.health, sid)
                del states[sid]
        self.checks += 1
        await self._forward()
        return found

    async def _forward(self) -> None:
        if self.webhook is None or not self._forwards:
            return
        if self._cursor is None:
            self._cursor = await self.events.last_id()
        while True:
            batch = await self.events.read(after=self._cursor, limit=100)
            for event in batch:
                self.webhook.offer(event.as_dict())
                self._cursor = event.id
            if len(batch) < 100:
                return
