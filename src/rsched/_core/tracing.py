"""OpenTelemetry tracing (docs/tracing.md): whether a process traces, and the spans it makes.

A process traces when OpenTelemetry is installed and a tracer provider is configured (the
``tracing`` setting, ``auto`` by default; ``on`` / ``off`` force it). Each Client, Worker and
Scheduler decides once, when it is created or starts (:func:`decide`), and keeps the answer
as a boolean: with tracing off nothing here is imported on any path but that decision, and
``auto`` imports nothing either (a provider can only be configured by a program that imported
``opentelemetry.trace`` already, so the decision looks in ``sys.modules``).

A PRODUCER span (enqueue, trigger, each job of a fire) puts its W3C ``traceparent`` into the
job's stream entry (field :data:`PARENT`); a worker runs each attempt in a CONSUMER span whose
parent that is, current while the handler runs. A retry's entry carries the failed attempt's
span context in :data:`LINK`, and the retry's span links to it.

OpenTelemetry is imported on first use, never at import time (a worker's per-job names are bound
once, in :class:`_OpenTelemetry`): rsched does not depend on it, and a process that does not
trace never loads it.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal

from rsched._core.codes import Code
from rsched._core.errors import ConfigError, Retry
from rsched._core.keys import GROUP

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, Tracer, TracerProvider

    from rsched._core.fire_plan import FireItem
    from rsched._core.job import Job

#: The ``tracing`` setting: ``auto`` traces when a tracer provider is configured.
TracingMode = Literal["auto", "on", "off"]
#: The job entry's field holding the producer span's W3C traceparent.
PARENT = "traceparent"
#: A retry's field holding the failed attempt's consumer span context (traceparent format).
LINK = "tracelink"
#: ``messaging.system`` of every span.
SYSTEM = "rsched"
# The fire actions that write a job (the others record history only).
_RUNS = frozenset({"fire", "misfire", "catch_up"})
_CODES = frozenset(c.value for c in Code)
# A traceparent rsched follows: W3C's form, a version other than ff, ids other than all zeros.
_TRACEPARENT = re.compile(
    r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}\Z"
)
_ODD = frozenset("13579bdf")

# A provider given to rsched alone (set_provider), before the global one.
_provider: TracerProvider | None = None
# (provider, its tracer, whether that tracer drops every span whose parent was not sampled).
_tracer_of: tuple[object, Tracer, bool] | None = None
# Whether _tracer_of is the one for good: a provider other than the API's proxy, which only
# set_provider replaces (the API sets its global provider once), so a worker's job does not
# look it up again.
_settled = False


def decide(mode: TracingMode) -> bool:
    """Whether this process traces under ``mode``: ``off`` never; ``on`` always (the global
    provider, even one configured later: until then spans are no-ops and jobs carry nothing);
    ``auto`` when OpenTelemetry is loaded and a tracer provider other than its default no-op
    one is configured. Raises ConfigError for ``on`` without OpenTelemetry installed."""
    if mode == "off":
        return False
    if mode == "on":
        try:
            import opentelemetry.trace  # noqa: F401
        except ImportError:
            raise ConfigError(
                "tracing='on' needs OpenTelemetry: pip install 'rsched[otel]' (and an SDK), or "
                "set RSCHED_TRACING=auto to trace only when it is configured"
            ) from None
        return True
    if _provider is not None:
        return True
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def set_provider(provider: TracerProvider | None) -> None:
    """Make rsched's spans in this process go to ``provider`` rather than the global one (None:
    the global one again); ``auto`` then traces. For programs (and tests) that keep a provider
    of their own."""
    global _provider, _settled
    _provider, _settled = provider, False


def _tracer() -> Tracer:
    return _current()[1]


def _current() -> tuple[object, Tracer, bool]:
    """The provider rsched's spans go to, its tracer, and whether that drops every span whose
    parent was not sampled (:func:`_drops_unsampled`); looked up again only when the provider
    changed."""
    global _tracer_of, _settled
    if _settled and _tracer_of is not None:
        return _tracer_of
    ot = _loaded or _ot()
    owner = _provider if _provider is not None else ot.get_tracer_provider()
    if _tracer_of is None or _tracer_of[0] is not owner:
        tracer = ot.get_tracer("rsched", tracer_provider=owner)
        _tracer_of = (owner, tracer, _drops_unsampled(tracer))
    _settled = not isinstance(owner, ot.Proxy)
    return _tracer_of


def _drops_unsampled(tracer: Tracer) -> bool:
    """Whether ``tracer`` records no span whose parent was not sampled: the SDK's tracer with the
    SDK's default sampler, ``ParentBased`` (``parentbased_*`` of OTEL_TRACES_SAMPLER), as long as
    its samplers for a parent not sampled, remote and local, are the SDK's ALWAYS_OFF (their
    defaults). For such a tracer the span of an attempt whose producer was not sampled is known
    in advance to record nothing, and :func:`consuming` does not ask the SDK for it. Any other
    tracer or sampler (another SDK, a sampler of the user's own) is asked for every span."""
    sampling = sys.modules.get("opentelemetry.sdk.trace.sampling")
    sampler = getattr(tracer, "sampler", None)
    if sampling is None or not isinstance(sampler, sampling.ParentBased):
        return False
    if type(sampler).should_sample is not sampling.ParentBased.should_sample:
        return False
    # The SDK keeps them as private fields (the defaults are the module's ALWAYS_OFF); a version
    # that names them otherwise only loses the shortcut.
    return all(
        getattr(sampler, name, None) is sampling.ALWAYS_OFF
        for name in ("_remote_parent_not_sampled", "_local_parent_not_sampled")
    )


def traceparent(span: Span) -> str:
    """The W3C traceparent of ``span`` ("" for a span that is not one: a no-op provider's)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return ""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def span_context(text: str | None) -> SpanContext | None:
    """The remote span context of a traceparent written by someone else; None when absent or
    malformed (a job is never refused for it). Read by hand rather than by OpenTelemetry's
    propagator (which takes a carrier and returns a whole context): a worker reads one per job."""
    if text is None or _TRACEPARENT.match(text) is None:
        return None
    return _read(text)


def _read(text: str) -> SpanContext:
    """The span context of a traceparent :data:`_TRACEPARENT` matched."""
    ot = _loaded or _ot()
    # The flags' last hex digit holds the sampled bit (the other bits are not rsched's).
    return ot.SpanContext(
        int(text[3:35], 16), int(text[36:52], 16), True, ot.FLAGS[text[54] in _ODD]
    )


def _messaging(operation_type: str, operation: str, queue: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation_type,
        "messaging.operation.name": operation,
        "messaging.destination.name": queue,
    }


# --- producers ------------------------------------------------------------------------------


@contextmanager
def producing(operation: str, queue: str | None, **attributes: Any) -> Iterator[Span]:
    """A current PRODUCER span around an enqueue or a trigger (``operation``), child of the
    caller's current span; ``queue`` None when it is known only later (:func:`destination`).
    An exception ends it with status ERROR, recorded."""
    from opentelemetry.trace import SpanKind

    attrs = _messaging("send", operation, queue or "")
    if queue is None:
        del attrs["messaging.destination.name"]
    attrs.update((f"rsched.{k}", v) for k, v in attributes.items() if v is not None)
    name = f"{operation} {queue}" if queue else operation
    with _tracer().start_as_current_span(name, kind=SpanKind.PRODUCER, attributes=attrs) as span:
        yield span


def destination(span: Span, operation: str, queue: str) -> str:
    """Name the queue of a producer span known only once the job's queue was read; returns
    the traceparent to write into the job."""
    span.update_name(f"{operation} {queue}")
    span.set_attribute("messaging.destination.name", queue)
    return traceparent(span)


def produced(span: Span, execution_id: str, **attributes: Any) -> None:
    """What the write did: the job's execution id, and ``rsched.<name>`` attributes."""
    span.set_attribute("messaging.message.id", execution_id)
    span.set_attribute("rsched.execution_id", execution_id)
    for name, value in attributes.items():
        span.set_attribute(f"rsched.{name}", value)


def produced_many(span: Span, count: int, **attributes: int) -> None:
    """What a write of several jobs did (a backfill): ``count`` occurrences sent, and how many
    had each outcome (``rsched.<outcome>``)."""
    span.set_attribute("messaging.batch.message_count", count)
    for name, value in attributes.items():
        span.set_attribute(f"rsched.{name}", value)


class FireSpans:
    """The PRODUCER spans of one fire call: one per item that writes a job (a root span each:
    every fired job is a trace of its own), with the traceparents fire.lua writes into the
    jobs ('' for an item that writes none). Only what the traceparents need is made before the
    call (the span, its ids); the attributes, most of a span's cost, are set after it, so that
    the jobs are not written later for them."""

    def __init__(self, items: Sequence[FireItem]) -> None:
        from opentelemetry.trace import SpanKind

        start = _tracer().start_span
        root = _ot().root
        now = time.time_ns()
        self.items = items
        self.spans: list[Span | None] = []
        self.parents: list[str] = []
        for item in items:
            if item.action in _RUNS:
                span = start(
                    f"fire {_queue(item)}",
                    context=root,
                    kind=SpanKind.PRODUCER,
                    start_time=now,
                )
                self.spans.append(span)
                self.parents.append(traceparent(span))
            else:
                self.spans.append(None)
                self.parents.append("")

    def end(self, codes: Sequence[int] | None) -> None:
        """Set each span's attributes and end it, with its item's code as ``rsched.outcome``
        (``fired``, ``skipped``, ``buffered``, ``debounced``, ``stale``, ...; None: the call
        failed or was refused)."""
        from opentelemetry.trace import StatusCode

        for i, (item, span) in enumerate(zip(self.items, self.spans, strict=True)):
            if span is None:
                continue
            exec_id = f"{item.schedule_id}@{item.sched}"
            attrs = _messaging("create", "fire", _queue(item))
            attrs["messaging.message.id"] = exec_id
            attrs["rsched.execution_id"] = exec_id
            attrs["rsched.schedule_id"] = item.schedule_id
            attrs["rsched.origin"] = "schedule" if item.action == "fire" else "misfire"
            if codes is None:
                span.set_attributes(attrs)
                span.set_status(StatusCode.ERROR, "the fire call did not complete")
            else:
                code = codes[i]
                outcome = Code(code).name.lower() if code in _CODES else str(code)
                attrs["rsched.outcome"] = outcome
                span.set_attributes(attrs)
                if code < 0:
                    span.set_status(StatusCode.ERROR, outcome)
            span.end()


def _queue(item: FireItem) -> str:
    """The queue of a fire item (its spec names the stream of its level: ``default#high``)."""
    return item.spec.queue.partition("#")[0]


# --- consumers ------------------------------------------------------------------------------


def consuming(job: Job) -> Span:
    """Start the CONSUMER span of one attempt of ``job`` (not ended, not yet current): child of
    the job's producer span, linked to the attempt before (a retry). Run for every job of a
    worker that traces: the SDK's cost per attribute is most of it, so only those of
    docs/tracing.md are set, all in the one call that starts the span.

    A producer that was not sampled (its traceparent's flags ``00``) under a tracer that drops
    such spans (the SDK's default sampler: :func:`_drops_unsampled`) gives the producer's own
    span context back as a non-recording span (read from the traceparent only when something
    asks for it), without a call to the SDK: the SDK's answer would record nothing either, and
    the handler's spans, and the traceparent of whatever it enqueues, carry the trace and its
    decision the same (only the SDK's own count of spans started, a metric of its own, misses
    these)."""
    _, tracer, drops_unsampled = _tracer_of if _settled and _tracer_of else _current()
    ot = _loaded or _ot()
    fields = job.fields
    text = fields.get(PARENT)
    if text is None or _TRACEPARENT.match(text) is None:
        ctx = ot.root
    elif drops_unsampled and text[54] not in _ODD:
        return ot.Unsampled(text)
    else:
        ctx = ot.with_parent(ot.remote(_read(text)), ot.root)
    links = None
    if LINK in fields:
        before = span_context(fields[LINK])
        links = [ot.Link(before)] if before is not None else None
    queue = job.queue
    execution_id = job.execution_id
    attrs: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": queue,
        "messaging.consumer.group.name": GROUP,
        "messaging.message.id": execution_id,
        "rsched.execution_id": execution_id,
        "rsched.task": job.task,
        "rsched.attempt": job.attempt,
    }
    if job.schedule_id:
        attrs["rsched.schedule_id"] = job.schedule_id
    now = time.time_ns()
    due = job.scheduled_ms if job.scheduled_ms is not None else job.fired_ms
    if due is not None:
        attrs["rsched.start_lag_ms"] = now // 1_000_000 - due
    return tracer.start_span(
        f"process {queue}",
        context=ctx,
        kind=ot.CONSUMER,
        attributes=attrs,
        links=links,
        start_time=now,
    )


def finished(span: Span, outcome: str, reason: str = "") -> None:
    """An attempt that needs no retry: ``completed`` or ``cancelled`` (``reason`` why)."""
    span.set_attribute("rsched.outcome", outcome)
    if reason:
        span.set_attribute("rsched.cancel_reason", reason)


def failed(span: Span, job: Job, error: BaseException | None, timed_out: bool) -> str:
    """An attempt that did not complete: its outcome (``dead`` past the last attempt, else
    ``retry`` when the handler asked for one, ``timed_out`` or ``failed``) on the span, status
    ERROR and the exception recorded (but for :class:`Retry`, an outcome of its own)."""
    from opentelemetry.trace import StatusCode

    if job.ends_with(error):
        outcome = "dead"
    elif isinstance(error, Retry):
        outcome = "retry"
    else:
        outcome = "timed_out" if timed_out else "failed"
    span.set_attribute("rsched.outcome", outcome)
    if timed_out:
        span.set_attribute("error.type", "TimeoutError")
        span.set_status(StatusCode.ERROR, f"timed out after {job.timeout_s}s")
    elif isinstance(error, Retry):
        if outcome == "dead":
            span.set_attribute("error.type", "Retry")
            span.set_status(StatusCode.ERROR, "retries exhausted")
    elif error is not None:
        span.set_attribute("error.type", type(error).__qualname__)
        span.record_exception(error)
        span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}")
    return outcome


def linked(job: Job, span: Span) -> Job:
    """``job`` with its consumer span's context in :data:`LINK`, carried by the retry's entry
    (Job.next_attempt_fields copies every field)."""
    link = traceparent(span)
    if not link:
        return job
    return dataclasses.replace(job, fields={**job.fields, LINK: link})


def interrupted(span: Span) -> None:
    """An attempt stopped by the worker's shutdown: its entry goes to another worker."""
    span.set_attribute("rsched.outcome", "abandoned")


def context_setters() -> tuple[Callable[[Span], Token[Context]], Callable[[Token[Context]], None]]:
    """(enter, detach): ``enter(span)`` makes ``span`` the current span (handlers' own spans
    nest under it; a sync handler's thread runs in a copy of this context) and returns the token
    that ``detach`` takes to restore the context before. The context holds the attempt's span
    alone: a job runs in its producer's trace, nothing of the worker's own context (as the
    span's parent is read from the job, not from the worker). Bound once by a runner."""
    ot = _loaded or _ot()
    return ot.enter, ot.detach


class _OpenTelemetry:
    """What a worker's spans use of OpenTelemetry, imported once (on the first job)."""

    def __init__(self) -> None:
        from opentelemetry import context, trace

        self.root = root = context.Context()
        self.enter, self.detach = _entering(root)
        self.with_parent = trace.set_span_in_context
        self.Proxy = trace.ProxyTracerProvider
        self.remote = trace.NonRecordingSpan
        self.Link = trace.Link
        self.CONSUMER = trace.SpanKind.CONSUMER
        self.SpanContext = trace.SpanContext
        # A traceparent's flags as rsched reads them: sampled or not (other bits ignored).
        self.FLAGS = (trace.TraceFlags(0), trace.TraceFlags(trace.TraceFlags.SAMPLED))
        self.get_tracer, self.get_tracer_provider = trace.get_tracer, trace.get_tracer_provider
        self.Unsampled = _unsampled(trace.NonRecordingSpan)


def _entering(
    root: Context,
) -> tuple[Callable[[Span], Token[Context]], Callable[[Token[Context]], None]]:
    """:func:`context_setters`. With the API's own runtime context (a
    ContextVar, unless OTEL_PYTHON_CONTEXT names another), the context holding the span is set
    on that variable directly: a worker sets one per job, and ``attach(set_span_in_context(span,
    root))`` costs twice as much (a copy of the empty context, two layers of calls, a ``try``
    each way). The two names it needs are the API's private ones; where a version of it names
    them otherwise, it calls the API."""
    from opentelemetry import context, trace
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

    runtime = getattr(context, "_RUNTIME_CONTEXT", None)
    current = getattr(runtime, "_current_context", None)
    key = getattr(trace.propagation, "_SPAN_KEY", None)
    if (
        type(runtime) is ContextVarsRuntimeContext
        and isinstance(current, ContextVar)
        and isinstance(key, str)
    ):
        context_of, set_context = context.Context, current.set

        def enter(span: Span) -> Token[Context]:
            return set_context(context_of({key: span}))

        return enter, current.reset
    attach, with_span = context.attach, trace.set_span_in_context
    return (lambda span: attach(with_span(span, root))), context.detach


def _unsampled(base: type[NonRecordingSpan]) -> Callable[[str], Span]:
    """The class of :func:`consuming`'s span for an attempt whose producer was not sampled."""

    class Unsampled(base):  # type: ignore[valid-type,misc]  # a class known only at run time
        """The producer's span context, not recording, read from its traceparent the first
        time something asks for it (a handler's own span, a traceparent it passes on): most
        attempts of a worker sampling 1 % are these, and most never ask."""

        _context: SpanContext | None = None

        def __init__(self, text: str) -> None:
            self._text = text

        def get_span_context(self) -> SpanContext:
            if self._context is None:
                self._context = _read(self._text)
            return self._context

    return Unsampled


# Read as ``_loaded or _ot()`` on a worker's per-job path: a global's read, not a call.
_loaded: _OpenTelemetry | None = None


def _ot() -> _OpenTelemetry:
    global _loaded
    if _loaded is None:
        _loaded = _OpenTelemetry()
    return _loaded
