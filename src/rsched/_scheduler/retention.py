"""Retention: the leading scheduler trims what runs leave behind, as one anyio actor.

Every ``retention.interval_s`` the leader of a partition (one sweep per partition) trims its
- the runs log ``{p}:runs`` by age (XTRIM MINID, ``runs_max_age_s``) and size (MAXLEN ~, the
  cap the workers' writes keep too, ``runs_max_entries``);
- each queue's dead letters ``{p}:dead:<queue>`` by age (MINID, ``dead_letter_max_age_s``) and
  count (MAXLEN ~, ``worker.dead_letter_max_entries``, which the dead script keeps too);
- schedules' histories by age (``history_max_age_s``; their count cap, ``history_limit``, is
  kept by every write): a bounded sweep, ``history_batch`` schedules a sweep in index order,
  wrapping around, so a deployment of N schedules is gone through in N / history_batch sweeps;
- the audit trail ``{p}:audit`` by age (MINID, ``audit_max_age_s``) and size (MAXLEN ~,
  ``audit_max_entries``, the cap the writes keep too); partition 0's sweep also trims the
  calendars' ``{prefix}:audit`` when there are several partitions (docs/audit.md).
An entry id of a stream is its time (ms of the Redis clock when written), so trimming by age is
a MINID. Each sweep logs one line with what it removed and counts it in
``rsched_retention_removed_total{kind}``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._core.backoff import Backoff
from rsched._core.errors import RschedError
from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS, RETENTION_KINDS
from rsched._core.settings import Settings
from rsched._store.audit_log import trim_audit
from rsched._store.queues import QueueStore
from rsched._store.runs_log import trim_runs
from rsched._store.schedules import ScheduleStore

log = get_logger("rsched.retention")


@dataclass
class Sweep:
    """What one sweep removed, by kind."""

    runs: int = 0
    dead_letters: int = 0
    history: int = 0
    audit: int = 0
    flows: int = 0  # index entries of flows that expired
    flows_repaired: int = 0  # stalled flows the sweep moved on (docs/flows.md)


class Retention:
    """The retention actor: :meth:`run` sweeps while ``is_leader()`` holds."""

    def __init__(
        self,
        redis: Redis,
        settings: Settings,
        is_leader: Callable[[], bool],
        *,
        keys: Keys | None = None,
    ) -> None:
        self.redis = redis
        self.settings = settings
        self.cfg = settings.retention
        self.keys = keys or Keys(settings.prefix)  # the partition swept
        self._schedules = ScheduleStore.from_settings(redis, settings, self.keys)
        self._queues = QueueStore.from_settings(redis, settings, self.keys)
        self.is_leader = is_leader
        # Where the next history slice starts: a rank in the schedules index, or past its end,
        # -1 - the number of the parked bucket (rsched._store.parking).
        self._history_rank = 0

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        backoff = Backoff()
        task_status.started()
        while True:
            delay = self.cfg.interval_s
            if self.is_leader():
                try:
                    await self.sweep()
                    backoff.reset()
                except (RedisError, OSError, RschedError) as exc:
                    # A sweep that fails is tried again later; it never stops the scheduler.
                    delay = min(delay, backoff.next())
                    log.warning("redis.error", actor="retention", error=str(exc), retry_s=delay)
            await anyio.sleep(delay)

    async def _trim_histories(self, before_ms: int) -> int:
        """Trim the histories of the next slice of schedules (``history_batch`` of them, in
        index order, wrapping around); returns the records removed."""
        ids, self._history_rank = await self._schedules.history_slice(
            self._history_rank, self.cfg.history_batch
        )
        return await self._schedules.trim_histories(ids, before_ms)

    async def sweep(self) -> Sweep:
        """Trim once (whatever the lease); returns and logs what was removed."""
        cfg = self.cfg
        now = await self._schedules.time_ms()
        done = Sweep()
        done.runs = await trim_runs(
            self.redis,
            self.keys,
            before_ms=now - round(cfg.runs_max_age_s * 1000),
            max_entries=cfg.runs_max_entries,
        )
        done.dead_letters = await self._queues.trim_dead_letters(
            await self._queues.queue_names(),
            now - round(cfg.dead_letter_max_age_s * 1000),
            self.settings.worker.dead_letter_max_entries,
        )
        done.history = await self._trim_histories(now - round(cfg.history_max_age_s * 1000))
        streams = [self.keys.audit]
        if self.keys.partition == 0 and self.keys.deployment_audit != self.keys.audit:
            streams.append(self.keys.deployment_audit)
        for stream in streams:
            done.audit += await trim_audit(
                self.redis,
                stream,
                before_ms=now - round(cfg.audit_max_age_s * 1000),
                max_entries=cfg.audit_max_entries,
            )
        done.flows, done.flows_repaired = await self._queues.sweep_flows(
            await self._queues.queue_names(),
            now,
            round(cfg.flow_stall_s * 1000),
            now - round(cfg.runs_max_age_s * 1000),
        )
        log.info(
            "retention.sweep",
            runs=done.runs,
            dead_letters=done.dead_letters,
            history=done.history,
            audit=done.audit,
            flows=done.flows,
            flows_repaired=done.flows_repaired,
        )
        if METRICS.on:
            for kind in RETENTION_KINDS:
                count = getattr(done, kind)
                if count:
                    METRICS.retention_removed.labels(kind).inc(count)
        return done
