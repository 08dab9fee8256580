"""The runner of a worker that traces (docs/tracing.md): each attempt in a CONSUMER span.

The worker picks :class:`TracedRunner` instead of :class:`Runner` once, at start, when
``rsched._core.tracing.decide`` says the process traces; a worker that does not trace runs the
plain Runner, which only tests ``traced`` per job. The span is current while the handler runs (a
sync handler's thread runs in a copy of the runner's context), so the handler's own spans nest
under it; its outcome is set, and it ends, once the Runner knows the outcome, before that is
recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rsched._core import tracing
from rsched._core.job import Job
from rsched._worker.runner import Runner
from rsched._worker.state import Running

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import Span


class TracedRunner(Runner):
    """A :class:`Runner` whose attempts each run in a CONSUMER span."""

    traced = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._enter, self._detach = tracing.context_setters()
        # What the context was before the running attempt's span was made current.
        self._token: Token[Context]
        # The span of the attempt this runner runs (a runner runs one job at a time), None when
        # it records nothing (its producer not sampled): no outcome to set, no link for a retry.
        self._span: Span | None = None

    def _span_starts(self, job: Job) -> None:
        span = tracing.consuming(job)
        self._token = self._enter(span)
        self._span = span if span.is_recording() else None

    def _span_ends(
        self, job: Job, run: Running, timed_out: bool, error: BaseException | None
    ) -> Job:
        self._detach(self._token)
        span = self._span
        if span is None:
            return job
        self._span = None
        if run.cancel_requested:
            tracing.finished(span, "cancelled", run.cancel_reason)
        elif timed_out or error is not None:
            tracing.failed(span, job, error, timed_out)
            if not job.ends_with(error):
                job = tracing.linked(job, span)  # the retry links to this attempt
        else:
            tracing.finished(span, "completed")
        span.end()
        return job

    def _span_abandoned(self) -> None:
        # Stopped by shutdown: its entry goes to another worker.
        self._detach(self._token)
        span, self._span = self._span, None
        if span is not None:
            tracing.interrupted(span)
            span.end()
