"""Retention: the leading scheduler trims what runs leave behind, as one anyio actor.

Every ``retention.interval_s`` the leader of a partition (one sweep per partition) trims its
- the runs log ``{p}:runs`` by age (XTRIM MINID, ``runs_max_age_s``) and size (MAXLEN ~, the
  cap the workers' writes keep too, ``runs_max_entries``);
- each queue's dead letters ``{p}:dead:<queue>`` by age (MINID, ``dead_letter_max_age_s``) and
  count (MAXLEN ~, ``worker.dead_letter_max_entries``, which the dead script keeps too);
- schedules' histories by age (``history_max_age_s``; their count cap, ``history_limit``, is
  kept by every write): a bounded sweep, ``history_batch`` schedules a sweep in index order,
  wrapping around, so a deployment of N schedules is gone through in N / history_batch sweeps.
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
from redis.exceptions import RedisError, ResponseError

from rsched._core.backoff import Backoff
from rsched._core.errors import RschedError
from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS, RETENTION_KINDS
from rsched._core.settings import Settings
from rsched._redis import scripts as _lua
from rsched._store import parking as _parking

log = get_logger("rsched.retention")


@dataclass
class Sweep:
    """What one sweep removed, by kind."""

    runs: int = 0
    dead_letters: int = 0
    history: int = 0


class Retention(_lua.ScriptCaller):
    """The retention actor: :meth:`run` sweeps while ``is_leader()`` holds."""

    def __init__(
        self,
        redis: Redis,
        settings: Settings,
        is_leader: Callable[[], bool],
        *,
        keys: Keys | None = None,
    ) -> None:
        super().__init__(redis)
        self.settings = settings
        self.cfg = settings.retention
        self.keys = keys or Keys(settings.prefix)  # the partition swept
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

    async def _trim_histories(self, cutoff: int) -> int:
        """Trim the histories of the next slice of schedules (``history_batch`` of them: by rank
        in the index, then whole parked buckets), naming each history key to the script
        (lua/trim_history.lua); returns the records removed."""
        k, rank, count = self.keys, self._history_rank, self.cfg.history_batch
        ids: list[str] = []
        if rank >= 0:
            try:
                ids = [
                    str(sid) for sid in await self.redis.zrange(k.schedules, rank, rank + count - 1)
                ]
            except ResponseError as exc:
                if "WRONGTYPE" not in str(exc):
                    raise
                # someone else's key: nothing of rsched's to trim
            rank = rank + count if len(ids) == count else -1
        if rank < 0 and len(ids) < count:  # past the index's end: the parked buckets
            more, after = await _parking.bucket_ids(self.redis, k, -1 - rank, count - len(ids))
            ids += more
            rank = -1 - after if after else 0
        self._history_rank = rank
        if not ids:
            return 0
        return int(await self.call("trim_history", [k.history(sid) for sid in ids], [cutoff]))

    async def sweep(self) -> Sweep:
        """Trim once (whatever the lease); returns and logs what was removed."""
        k, cfg = self.keys, self.cfg
        now = await self.time_ms()
        done = Sweep()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xtrim(k.runs, minid=str(now - round(cfg.runs_max_age_s * 1000)), approximate=False)
            pipe.xtrim(k.runs, maxlen=cfg.runs_max_entries, approximate=True)
            trimmed = await pipe.execute(raise_on_error=False)
        done.runs = sum(n for n in trimmed if isinstance(n, int))
        queues = sorted(str(q) for q in await self.redis.smembers(k.queues))
        if queues:
            cutoff = str(now - round(cfg.dead_letter_max_age_s * 1000))
            cap = self.settings.worker.dead_letter_max_entries
            async with self.redis.pipeline(transaction=False) as pipe:
                for queue in queues:
                    pipe.xtrim(k.dead(queue), minid=cutoff, approximate=False)
                    pipe.xtrim(k.dead(queue), maxlen=cap, approximate=True)
                trimmed = await pipe.execute(raise_on_error=False)
            done.dead_letters = sum(n for n in trimmed if isinstance(n, int))
        done.history = await self._trim_histories(now - round(cfg.history_max_age_s * 1000))
        log.info(
            "retention.sweep",
            runs=done.runs,
            dead_letters=done.dead_letters,
            history=done.history,
        )
        if METRICS.on:
            for kind in RETENTION_KINDS:
                count = getattr(done, kind)
                if count:
                    METRICS.retention_removed.labels(kind).inc(count)
        return done
