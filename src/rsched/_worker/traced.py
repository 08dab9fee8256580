"""The runner of a worker that traces (docs/tracing.md): each attempt in a CONSUMER span.

The worker picks :class:`TracedRunner` instead of :class:`Runner` once, at start, when
``rsched._core.tracing.decide`` says the process traces; a worker that does not trace runs the
plain Runner and pays nothing per job. The span is current while the handler runs (a sync
handler's thread runs in a copy of the runner's context), so the handler's own spans nest
under it; its outcome is set where the Runner decides it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rsched._core import tracing
from rsched._core.job import Job
from rsched._worker.runner import Runner

if TYPE_CHECKING:
    from opentelemetry.trace import Span


class TracedRunner(Runner):
    """A :class:`Runner` whose attempts each run in a CONSUMER span."""

    # The span of the attempt this runner runs (a runner runs one job at a time).
    _span: Span | None = None

    async def run_job(self, job: Job) -> None:
        span = self._span = tracing.consuming(job)
        token = tracing.enter(span)
        try:
            await super().run_job(job)
        except BaseException:  # stopped by shutdown, its outcome not recorded
            tracing.interrupted(span)
            raise
        finally:
            self._span = None
            tracing.leave(token, span)

    async def _finish(self, job: Job, event: str, *args: Any, **kwargs: Any) -> None:
        span = self._span
        if span is not None:
            extra = args[1] if len(args) > 1 else kwargs.get("extra", {})
            tracing.finished(span, event, str(extra.get("reason") or ""))
        await super()._finish(job, event, *args, **kwargs)

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
