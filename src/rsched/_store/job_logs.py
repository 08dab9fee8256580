"""Redis access for running jobs' progress and logs: the worker's batched write (lua/job_log.lua)
and the readers' reads (rsched._core.job_logs has the model, docs/keys.md the keys).

The class is a part of QueueStore (rsched._store.queues): the keys of a job live in its
partition (``job_partition`` of its execution id), as its result does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from rsched._core.codes import Code, check
from rsched._core.job_logs import (
    MAX_BYTES,
    MAX_LINES,
    JobLogRecord,
    JobProgress,
    logged_attempts,
    parse_line,
    parse_progress,
)
from rsched._redis.scripts import ScriptCaller


@dataclass(slots=True)
class RunNews:
    """What one run's handler said since the last write: its latest progress (fraction, note,
    ms) and its new lines (stored JSON, oldest first); ``token`` names the batch (a script run
    twice applies it once)."""

    execution_id: str
    attempt: int
    token: str = ""
    progress: tuple[float, str, int] | None = None
    lines: list[bytes] = field(default_factory=list)


class JobLogs(ScriptCaller):
    async def write_news(self, news: Sequence[RunNews], ttl_ms: int) -> int:
        """Write the news of runs of this partition in one call, keys kept ``ttl_ms``; returns
        how many runs were skipped (their keys hold another type)."""
        keys: list[str] = []
        args: list[str | bytes | int] = [MAX_LINES, MAX_BYTES, max(1, ttl_ms)]
        for run in news:
            keys += [
                self.keys.job_log(run.execution_id, run.attempt),
                self.keys.job_progress(run.execution_id),
            ]
            fraction, note, at = run.progress or ("", "", 0)
            args += [run.attempt, run.token, repr(fraction) if run.progress else "", note, at]
            args += [len(run.lines), *run.lines]
        reply = await self.call("job_log", keys, args)
        return int(reply[1]) if check(reply, script="job_log") == Code.OK else 0

    async def job_progress(self, execution_id: str) -> JobProgress | None:
        """The job's latest progress; None when its handler set none (or it expired)."""
        fields = cast(
            dict[str, str], await self.redis.hgetall(self.keys.job_progress(execution_id))
        )
        return parse_progress(fields) if fields else None

    async def job_logs(self, execution_id: str, attempt: int | None = None) -> list[JobLogRecord]:
        """The job's log lines, oldest first: of ``attempt``, or of every attempt in order."""
        if attempt is None:
            fields = await self.redis.hgetall(self.keys.job_progress(execution_id))
            attempts = logged_attempts(cast(dict[str, str], fields))
        else:
            attempts = [attempt]
        if not attempts:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for each in attempts:
                pipe.lrange(self.keys.job_log(execution_id, each), 0, -1)
            lists = await pipe.execute()
        out: list[JobLogRecord] = []
        for each, lines in zip(attempts, lists, strict=True):
            out += [r for r in (parse_line(raw, each) for raw in lines) if r is not None]
        return out
