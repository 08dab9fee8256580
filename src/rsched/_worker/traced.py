"""The runner of a worker that traces (docs/tracing.md): each attempt in a CONSUMER span.

The worker picks :class:`TracedRunner` instead of :class:`Runner` once, at start, when
``rsched._core.tracing.decide`` says the process traces; a worker that does not trace runs the
plain Runner and pays nothing per job. The span is current while the handler runs (a sync
handler's thread runs in a copy of the runner's context), so the handler's own spans nest
under it; its outcome is set where the Runner decides it.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from rsched._core import tracing
from rsched._core.job import Job
from rsched._worker.runner import Runner

if TYPE_CHECKING:
    from opentelemetry.trace import Span


class TracedRunner(Runner):
    """A :class:`Runner` whose attempts each run in a CONSUMER span."""

    # The span of the attempt this runner runs (a runner runs one job at a time), None when it
    # records nothing (its producer not sampled): no outcome to set, no link for its retry.
    _span: Span | None = None

    async def run_job(self, job: Job) -> None:
        span = tracing.consuming(job)
        token = tracing.enter(span)
        recording = self._span = span if span.is_recording() else None
        try:
            await super().run_job(job)
        except BaseException:  # stopped by shutdown, its outcome not recorded
            if recording is not None:
                tracing.interrupted(span)
            raise
        finally:
            self._span = None
            tracing.leave(token, span)

    def _finish(
        self,
        job: Job,
        event: str,
        duration_ms: float,
        extra: dict[str, Any],
        result: bytes | None = None,
    ) -> Coroutine[Any, Any, None]:
        # Not a coroutine of its own: the Runner's is returned, awaited by the caller.
        span = self._span
        if span is not None:
            tracing.finished(span, event, str(extra.get("reason") or ""))
        return super()._finish(job, event, duration_ms, extra, result)

    async def _fail(
        self,
        job: Job,
        duration_ms: float,
        error: BaseException | None,
        *,
        timed_out: bool = False,
    ) -> None:
        span = self._span
        if span is not None:
            tracing.failed(span, job, error, timed_out)
            if not job.ends_with(error):
                job = tracing.linked(job, span)  # the retry links to this attempt
        await super()._fail(job, duration_ms, error, timed_out=timed_out)
