"""The runners: ``concurrency`` tasks taking jobs from the reader, each job in its own cancel
scope, which its timeout (Timeouts) or a cancel cancels (async handlers in the loop, plain
functions in worker threads); a run's outcome goes to the acker (completed, cancelled) or is
recorded at once (a retry, a dead letter).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import orjson
from anyio.streams.memory import MemoryObjectSendStream

from rsched._core.errors import JobFailed, Retry
from rsched._core.flows import FLOW_TASK
from rsched._core.history import fragment
from rsched._core.job import Job, retry_delay_s
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS
from rsched._store.flow_keys import error_record, step_keys
from rsched._store.runs_log import run_record
from rsched._store.worker_calls import Done, last_error
from rsched._worker.acker import finish_home
from rsched._worker.failures import until_taken
from rsched._worker.inbox import Inbox
from rsched._worker.journal import RUNNING, Journal
from rsched._worker.state import Running, Stream, WorkerState

log = get_logger("rsched.worker")
# The per-job lines (job.start, job.end) under their own name, so that a busy deployment can
# quiet them (logging.getLogger("rsched.worker.jobs").setLevel("WARNING")) and keep the rest.
# At the default level a job writes one line, when it ends: job.start is a debug line (the two
# lines cost a no-op job a quarter of its CPU; where a job is while it runs, the SDK says).
jobs_log = get_logger("rsched.worker.jobs")

MAX_RETRY_DELAY_S = 365 * 86_400.0


class Timeouts:
    """The running jobs' timeouts: one timer of the loop, at the earliest deadline among them,
    which cancels the scopes of those whose deadline passed and sets itself again.

    A cancel scope with a deadline of its own made a timer per job and cost a no-op job ~20,000
    instructions (~7 % of its CPU); the jobs of a worker mostly share one timeout, so a new
    job's deadline is later than the timer's and costs a comparison. The timer is asyncio's:
    rsched runs on asyncio only (redis-py's asyncio client).
    """

    def __init__(self, running: Mapping[str, Running]) -> None:
        self._running = running
        self._timer: asyncio.TimerHandle | None = None
        self._at = math.inf

    def watch(self, run: Running, timeout_s: float) -> None:
        """Time ``run`` out ``timeout_s`` from now (it is in ``running`` until it ends)."""
        loop = asyncio.get_running_loop()
        run.deadline = loop.time() + timeout_s
        if run.deadline < self._at:
            self._arm(loop, run.deadline)

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._at = loop.call_at(at, self._due, loop), at

    def _due(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer, self._at = None, math.inf
        now, soonest = loop.time(), math.inf
        for run in self._running.values():
            if run.deadline <= now:
                run.scope.cancel()  # timed out (Runner.run_job tells it from a cancel)
            else:
                soonest = min(soonest, run.deadline)
        if soonest < math.inf:
            self._arm(loop, soonest)


class Runner:
    """Runs the jobs of its inbox one at a time; the worker starts ``concurrency`` of them, which
    share one limit of worker threads."""

    # Whether each attempt runs in a span (TracedRunner, its _span_* steps): tested rather than
    # a layer around run_job, so that neither runner pays a call per job for the other's sake.
    traced = False

    def __init__(
        self,
        state: WorkerState,
        acks: MemoryObjectSendStream[tuple[Stream, Done]],
        journal: Journal,
    ) -> None:
        self.state = state
        self.acks = acks
        self.journal = journal
        self.threads = anyio.CapacityLimiter(state.cfg.concurrency)
        self.timeouts = Timeouts(state.running)

    async def run(self, inbox: Inbox) -> None:
        while (job := await inbox.get()) is not None:
            await self.run_job(job)

    async def run_job(self, job: Job) -> None:
        state = self.state
        fn, is_async = state.handlers[job.task]
        run = Running(job)
        state.running[job.execution_id] = run
        if jobs_log.enabled_for(logging.DEBUG):
            jobs_log.debug(
                "job.start",
                execution_id=job.execution_id,
                task=job.task,
                attempt=job.attempt,
                queue=job.queue,
            )
        if METRICS.on:
            METRICS.job_started(job)
        started = run.started = time.perf_counter()
        error: BaseException | None = None
        timed_out = False
        value: Any = None
        # One scope serves both the job's timeout (Timeouts) and cancel_previous (cancel());
        # run.cancel_requested tells them apart.
        self.timeouts.watch(run, job.timeout_s)
        # Where job.set_progress and job.log go (set in place: no copy of the job per run).
        object.__setattr__(job, "journal", self.journal)
        if not is_async:
            job = dataclasses.replace(job, stop_event=threading.Event())
        # Marks the logging records made inside the handler (its thread copies the context).
        running = RUNNING.set(job)
        if self.traced:
            self._span_starts(job)
        try:
            with run.scope:
                if is_async:
                    value = await fn(job)
                else:
                    value = await anyio.to_thread.run_sync(
                        fn, job, abandon_on_cancel=True, limiter=self.threads
                    )
            timed_out = run.scope.cancelled_caught and not run.cancel_requested
        except Exception as exc:
            error = exc
        except BaseException:
            # Cancelled by shutdown: no outcome, the entry stays pending for another worker
            # (handed back at once when the stop was forced: see upkeep.hand_back).
            held = (job.partition, job.queue, job.priority, job.entry_id)
            state.inflight.discard(held)
            state.abandoned.add(held)
            if self.traced:
                self._span_abandoned()
            raise
        finally:
            RUNNING.reset(running)
            state.running.pop(job.execution_id, None)
            state.slots.release()
            if METRICS.on:
                METRICS.running -= 1
            if job.stop_event is not None:  # a thread still running is told to stop
                job.stop_event.set()
        duration_ms = round((time.perf_counter() - started) * 1000, 1)
        if self.traced:  # before any await: the span ends whatever comes next
            job = self._span_ends(job, run, timed_out, error)
        if self.journal.said(job):
            # Its last words before its outcome: whoever sees the run ended sees all it said.
            await self.journal.flush()
        if METRICS.on:
            cancelled = run.cancel_requested
            METRICS.job_ended(
                job, duration_ms / 1000, cancelled=cancelled, timed_out=timed_out, error=error
            )
        if run.cancel_requested:
            await self._finish(job, "cancelled", duration_ms, {"reason": run.cancel_reason})
        elif timed_out:
            await self._fail(job, duration_ms, None, timed_out=True)
        elif error is not None:
            await self._fail(job, duration_ms, error)
        else:
            await self._finish(job, "completed", duration_ms, {}, self._result(job, value))

    # The steps of a TracedRunner's span (rsched._worker.traced), run only when ``traced``: it
    # starts and becomes current before the handler runs; it ends, with the attempt's outcome,
    # once that is known, before it is recorded; a shutdown abandons it.

    def _span_starts(self, job: Job) -> None:
        raise NotImplementedError

    def _span_ends(
        self, job: Job, run: Running, timed_out: bool, error: BaseException | None
    ) -> Job:
        raise NotImplementedError

    def _span_abandoned(self) -> None:
        raise NotImplementedError

    def _result(self, job: Job, value: Any) -> bytes | None:
        """The JSON of a handler's return value to keep, or None (None returned, too large,
        or not JSON: both logged)."""
        if value is None:
            return None
        try:
            body = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
        except TypeError as exc:
            log.warning("job.result_dropped", execution_id=job.execution_id, error=str(exc))
            return None
        most = self.state.cfg.result_max_bytes
        if len(body) > most:
            log.warning(
                "job.result_dropped",
                execution_id=job.execution_id,
                error=f"{len(body)} bytes of JSON, more than result_max_bytes={most}",
            )
            return None
        return body

    async def _finish(
        self,
        job: Job,
        event: str,
        duration_ms: float,
        extra: dict[str, Any],
        result: bytes | None = None,
    ) -> None:
        """Hand a run that needs no retry (completed, cancelled) to the acker."""
        state = self.state
        _log_end(jobs_log.info, job, event, duration_ms=duration_ms)
        state.completed += event == "completed"
        item = (
            (job.partition, job.queue, job.priority),
            Done(
                job.entry_id,
                job.execution_id,
                # A flow's starter does not end its occurrence's run: the flow's end does.
                None if job.task == FLOW_TASK and event == "completed" else job.schedule_id,
                job.attempt,
                event,
                fragment({"duration_ms": duration_ms, **extra}) if job.schedule_id else "",
                "dedup" in job.fields,
                result,
                run=run_record(
                    job.fields,
                    queue=job.queue,
                    status=event,
                    worker=state.consumer,
                    duration_ms=duration_ms,
                    error_type=str(extra.get("reason", "")),  # why it was cancelled
                ),
                limits=_keys(job),
                home=job.home,
                counted=job.options.pause_after_failures is not None,
                **self._flow_end(job, event, result, str(extra.get("reason", ""))),
            ),
        )
        try:
            self.acks.send_nowait(item)  # no checkpoint per job on the hot path
        except anyio.WouldBlock:
            await self.acks.send(item)

    def _flow_end(self, job: Job, event: str, result: bytes | None, reason: str) -> dict[str, Any]:
        """What a flow step's Done carries (nothing for any other job): its flow, step, the
        keys its end may write, and what its children get in its place (its result; a
        cancelled step's error record)."""
        flow = job.fields.get("flow")
        if not flow:
            return {}
        return {
            "flow": flow,
            "step": int(job.fields.get("step") or 0),
            "flow_keys": tuple(step_keys(self.state.stores[job.partition].keys, job.fields)),
            "parent_result": (
                (result or b"").decode()
                if event == "completed"
                else error_record("cancelled", reason)
            ),
        }

    async def _fail(
        self, job: Job, duration_ms: float, error: BaseException | None, *, timed_out: bool = False
    ) -> None:
        """A run that did not complete: it failed, timed out, or its handler raised
        :class:`Retry` (an outcome of its own, not a failure, but an attempt all the same: past
        ``max_retries`` the job is dead-lettered, as in Celery and arq)."""
        error_type, message, tb = self._describe(job, error, timed_out)
        if job.ends_with(error):
            if isinstance(error, Retry):
                message = _exhausted(job, message)
            final = isinstance(error, JobFailed) and not error.retryable
            await self._dead(
                job, duration_ms, error_type, message, tb, timed_out=timed_out, final=final
            )
            return
        delay_ms = round(_next_delay_s(job, error) * 1000)
        if isinstance(error, Retry):
            await self._retry_asked(job, error, duration_ms, delay_ms)
        else:
            event = "timed_out" if timed_out else "failed"
            await self._retry_failed(job, event, duration_ms, delay_ms, error_type, message)
        if delay_ms < self.state.cfg.promote_interval_ms:
            self.state.promote_wake.set()

    def _describe(
        self, job: Job, error: BaseException | None, timed_out: bool
    ) -> tuple[str, str, str]:
        """(error type, message, traceback) of a run that did not complete."""
        if timed_out:
            return "TimeoutError", f"timed out after {job.timeout_s}s", ""
        if isinstance(error, Retry):
            return "Retry", str(error), ""
        if isinstance(error, JobFailed):  # a built-in task's failure: its message says it all
            return type(error).__name__, str(error), ""
        assert error is not None
        tb = "".join(traceback.format_exception(error))[-self.state.cfg.traceback_max_chars :]
        return type(error).__name__, str(error), tb

    async def _dead(
        self,
        job: Job,
        duration_ms: float,
        error_type: str,
        message: str,
        tb: str,
        *,
        timed_out: bool,
        final: bool = False,
    ) -> None:
        """Dead-letter a job whose last attempt did not complete, or whose failure no other
        attempt would mend (``final``)."""
        state = self.state
        state.failed += 1
        reason = "timeout" if timed_out else "not_retryable" if final else "max_retries"
        extra = {"duration_ms": duration_ms, "error_type": error_type, "error": message[:500]}
        _log_end(
            jobs_log.error,
            job,
            "dead",
            reason=reason,
            duration_ms=duration_ms,
            error_type=error_type,
            error=message,
        )
        await self._record(
            job,
            lambda: state.stores[job.partition].dead(
                job.queue,
                job.entry_id,
                raw=dict(job.fields),
                elsewhere=job.home is not None,
                reason=reason,
                error_type=error_type,
                error_message=message,
                traceback=tb,
                deliveries=job.deliveries,
                worker=state.consumer,
                first_event="timed_out" if timed_out else "",
                extra=fragment({**extra, "reason": reason}),
                priority=job.priority,
                run=run_record(
                    job.fields,
                    queue=job.queue,
                    status="dead",
                    worker=state.consumer,
                    duration_ms=duration_ms,
                    error_type=error_type,
                    error=message,
                ),
                limits=_keys(job),
            ),
            ("dead", fragment({**extra, "reason": reason}), True),
            error=last_error(error_type, message),
        )

    async def _retry_asked(self, job: Job, error: Retry, duration_ms: float, delay_ms: int) -> None:
        """Schedule the next attempt of a job whose handler raised :class:`Retry`."""
        self.state.retried += 1
        extra: dict[str, Any] = {"duration_ms": duration_ms}
        if error.reason:
            extra["reason"] = error.reason[:500]
        _log_end(
            jobs_log.info,
            job,
            "retry",
            duration_ms=duration_ms,
            retry_in_ms=delay_ms,
            **({"reason": error.reason} if error.reason else {}),
        )
        reason = str(extra.get("reason", ""))
        await self._retry(job, "retry", duration_ms, delay_ms, extra, "", reason)

    async def _retry_failed(
        self,
        job: Job,
        event: str,
        duration_ms: float,
        delay_ms: int,
        error_type: str,
        message: str,
    ) -> None:
        """Schedule the next attempt of a job that failed or timed out."""
        self.state.failed += 1
        extra = {"duration_ms": duration_ms, "error_type": error_type, "error": message[:500]}
        _log_end(
            jobs_log.warning,
            job,
            event,
            duration_ms=duration_ms,
            retry_in_ms=delay_ms,
            error_type=error_type,
            error=message,
        )
        await self._retry(job, event, duration_ms, delay_ms, extra, error_type, message)

    async def _retry(
        self,
        job: Job,
        event: str,
        duration_ms: float,
        delay_ms: int,
        extra: dict[str, Any],
        error_type: str,
        error: str,
    ) -> None:
        """Record the attempt and put the job's next attempt in its delayed set."""
        state = self.state
        await self._record(
            job,
            lambda: state.stores[job.partition].retry(
                job.queue,
                job.entry_id,
                next_fields=job.next_attempt_fields(),
                delay_ms=delay_ms,
                execution_id=job.execution_id,
                schedule_id=job.schedule_id if job.home is None else None,
                attempt=job.attempt,
                event=event,
                extra=fragment(extra),
                priority=job.priority,
                run=run_record(
                    job.fields,
                    queue=job.queue,
                    status=event,
                    worker=state.consumer,
                    duration_ms=duration_ms,
                    error_type=error_type,
                    error=error,
                ),
                limits=_keys(job),
            ),
            (event, fragment({**extra, "retry_in_ms": delay_ms}), False),
        )

    async def _record(
        self,
        job: Job,
        call: Callable[[], Awaitable[Any]],
        home: tuple[str, str, bool] | None = None,
        *,
        error: str = "",
    ) -> None:
        """Run a recording script until Redis takes it (the entry stays pending meanwhile);
        then, for a job whose schedule is in another partition (Job.home), record ``home``
        (event, extra, whether the run is over; ``error``: a dead run's) there."""
        # The script releases the job's limit holds: the heartbeat stops renewing them now.
        self.state.holding.pop(job.execution_id, None)
        try:
            refused = await until_taken(call, "runner")
            if refused is not None:
                log.error("job.unrecorded", execution_id=job.execution_id, error=str(refused))
            elif job.home is not None and job.schedule_id and home is not None:
                await finish_home(
                    self.state, job.home, job.queue, job.priority, job.schedule_id,
                    job.execution_id, job.attempt, *home[:2], over=home[2],
                    counted=job.options.pause_after_failures is not None, error=error,
                )  # fmt: skip
        finally:
            self.state.inflight.discard((job.partition, job.queue, job.priority, job.entry_id))
            if job.limits:
                self.state.promote_wake.set()  # a released key may start a waiting job


def _exhausted(job: Job, message: str) -> str:
    """The dead letter's message of a job whose handler asked for an attempt past the last."""
    return (
        f"retries exhausted: the handler asked for another attempt after attempt "
        f"{job.attempt} of {job.max_retries + 1} (max_retries={job.max_retries})"
        + (f": {message}" if message else "")
    )


def _next_delay_s(job: Job, error: BaseException | None) -> float:
    """How long the next attempt waits: what the handler's :class:`Retry` asked for (bounded),
    else the job's backoff, or more when the failure asks to wait longer (an HTTP target's
    Retry-After: a server that said when to come back is not called sooner)."""
    requested = error.delay_s if isinstance(error, Retry) else None
    if isinstance(requested, int | float) and not math.isnan(requested):
        return min(max(float(requested), 0.0), MAX_RETRY_DELAY_S)
    backoff = retry_delay_s(job.options, job.attempt)
    if isinstance(error, JobFailed) and error.retry_after_s is not None:
        return min(max(error.retry_after_s, backoff), MAX_RETRY_DELAY_S)
    return backoff


def _log_end(log_at: Callable[..., None], job: Job, outcome: str, **fields: Any) -> None:
    """The ``job.end`` line of a run, at the level the outcome deserves."""
    log_at(
        "job.end",
        execution_id=job.execution_id,
        task=job.task,
        attempt=job.attempt,
        queue=job.queue,
        outcome=outcome,
        **fields,
    )


def _keys(job: Job) -> tuple[tuple[str, str], ...]:
    """The limits a job holds, (key, template) each: released by the script that records its
    outcome (the template names the metrics' count)."""
    if not job.limits:  # most jobs: no tuple built on the hot path
        return ()
    return tuple((lim.key, lim.template) for lim in job.limits)
