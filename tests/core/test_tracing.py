"""Tracing's pure parts: deciding whether a process traces, traceparents read and written, the
spans of a job's attempt and of a fire call (docs/tracing.md)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from rsched._core import tracing
from rsched._core.errors import ConfigError, Retry
from rsched._core.fire_plan import FireItem, FireSpec
from rsched._core.job import Job

pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider, sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from tests.support.spans import spans_kept

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    with spans_kept() as found:
        yield found


def test_off_never_traces_and_auto_needs_a_provider() -> None:
    assert not tracing.decide("off")
    assert not tracing.decide("auto")  # the global provider is OpenTelemetry's no-op default
    assert tracing.decide("on")


def test_a_provider_of_its_own_makes_auto_trace(exporter: InMemorySpanExporter) -> None:
    assert tracing.decide("auto")
    assert not tracing.decide("off")


@pytest.mark.parametrize(
    "text",
    [
        "",
        None,
        "garbage",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",  # no flags
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # forbidden version
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # zero span id
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # upper case
        PARENT + "-extra",
    ],
)
def test_a_malformed_traceparent_is_no_parent(text: str | None) -> None:
    assert tracing.span_context(text) is None


@pytest.mark.parametrize("runtime", ["the API's own", "another"])
def test_an_attempts_span_is_current_until_detached(
    monkeypatch: pytest.MonkeyPatch, runtime: str
) -> None:
    # The API's own runtime context is set directly; another (OTEL_PYTHON_CONTEXT) through
    # attach and detach: either way the span is current, alone, and the context restored.
    from opentelemetry import context
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

    if runtime == "another":

        class Another(ContextVarsRuntimeContext):
            pass

        monkeypatch.setattr(context, "_RUNTIME_CONTEXT", Another())
    monkeypatch.setattr(tracing, "_loaded", None)  # bound again, with this runtime
    span = trace.NonRecordingSpan(tracing.span_context(PARENT))  # type: ignore[arg-type]
    outer = context.attach(context.set_value("caller's", 1))
    try:
        enter, detach = tracing.context_setters()
        token = enter(span)
        assert trace.get_current_span() is span
        assert context.get_value("caller's") is None  # nothing of the worker's context
        detach(token)
        assert trace.get_current_span() is trace.INVALID_SPAN
        assert context.get_value("caller's") == 1
    finally:
        context.detach(outer)


def test_the_tracer_is_looked_up_again_only_when_the_provider_changes() -> None:
    first, second = TracerProvider(), TracerProvider()
    tracing.set_provider(first)
    try:
        tracer = tracing._tracer()
        assert tracing._settled  # not looked up per job
        assert tracing._tracer() is tracer
        tracing.set_provider(second)
        assert tracing._current()[0] is second
    finally:
        tracing.set_provider(None)
    # The API's proxy again, looked up each time: a global provider may be set later.
    assert not isinstance(tracing._current()[0], TracerProvider)
    assert not tracing._settled


def test_a_traceparent_reads_back() -> None:
    ctx = tracing.span_context(PARENT)
    assert ctx is not None
    assert ctx.is_remote
    assert f"{ctx.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert f"{ctx.span_id:016x}" == "b7ad6b7169203331"
    assert ctx.trace_flags.sampled


def _job(**fields: str) -> Job:
    base = {"execution_id": "e1", "task": "t", "attempt": "1"}
    return Job(
        execution_id="e1",
        task="t",
        queue="q",
        attempt=int(fields.get("attempt", "1")),
        scheduled_ms=1_000,
        schedule_id="s1",
        fields={**base, **fields},
    )


def test_an_attempt_continues_its_producer_and_links_the_attempt_before(
    exporter: InMemorySpanExporter,
) -> None:
    first = tracing.consuming(_job(traceparent=PARENT))
    enter, detach = tracing.context_setters()
    token = enter(first)
    outcome = tracing.failed(first, _job(traceparent=PARENT), ValueError("boom"), False)
    retry = tracing.linked(_job(traceparent=PARENT), first)
    detach(token)
    first.end()
    assert outcome == "failed"
    assert retry.fields[tracing.PARENT] == PARENT
    assert retry.fields[tracing.LINK] == tracing.traceparent(first)
    again = _job(**{**retry.fields, "attempt": "2"})
    second = tracing.consuming(again)
    tracing.finished(second, "completed")
    second.end()
    one, two = exporter.get_finished_spans()
    assert one.parent is not None
    assert two.parent is not None
    assert f"{one.parent.span_id:016x}" == "b7ad6b7169203331"
    assert one.context is not None
    assert two.context is not None
    assert one.context.trace_id == two.context.trace_id == int(PARENT[3:35], 16)
    assert one.status.status_code.name == "ERROR"
    assert [e.name for e in one.events] == ["exception"]
    assert [link.context.span_id for link in two.links] == [one.context.span_id]
    attrs = two.attributes or {}
    assert attrs["rsched.attempt"] == 2
    assert attrs["rsched.outcome"] == "completed"
    assert attrs["rsched.schedule_id"] == "s1"
    assert isinstance(attrs["rsched.start_lag_ms"], int)
    assert attrs["rsched.start_lag_ms"] > 0
    assert attrs["messaging.consumer.group.name"] == "rsched"
    assert (one.attributes or {})["rsched.outcome"] == "failed"


@pytest.mark.parametrize(
    ("attempt", "error", "timed_out", "outcome", "status"),
    [
        ("1", Retry(delay_s=1), False, "retry", "UNSET"),
        ("1", None, True, "timed_out", "ERROR"),
        ("4", RuntimeError("x"), False, "dead", "ERROR"),
        ("4", Retry(), False, "dead", "ERROR"),
    ],
)
def test_the_outcome_of_an_attempt_that_did_not_complete(
    exporter: InMemorySpanExporter,
    attempt: str,
    error: BaseException | None,
    timed_out: bool,
    outcome: str,
    status: str,
) -> None:
    job = _job(attempt=attempt)
    span = tracing.consuming(job)
    assert tracing.failed(span, job, error, timed_out) == outcome
    span.end()
    (done,) = exporter.get_finished_spans()
    assert (done.attributes or {})["rsched.outcome"] == outcome
    assert done.status.status_code.name == status


@pytest.mark.parametrize(
    "text",
    [
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        "00-00000000000000000000000000000000-b7ad6b7169203331-00",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-00",
    ],
)
def test_a_malformed_traceparent_not_sampled_is_no_parent_either(
    exporter: InMemorySpanExporter, text: str
) -> None:
    # Not taken for a producer's decision not to sample: the attempt starts a trace.
    span = tracing.consuming(_job(traceparent=text))
    assert span.is_recording()
    span.end()
    (done,) = exporter.get_finished_spans()
    assert done.parent is None


def test_a_job_without_a_traceparent_starts_a_trace(exporter: InMemorySpanExporter) -> None:
    span = tracing.consuming(_job(traceparent="nonsense", tracelink="nonsense"))
    span.end()
    (done,) = exporter.get_finished_spans()
    assert done.parent is None
    assert list(done.links) == []


def test_a_fire_call_has_a_span_per_job_it_writes(exporter: InMemorySpanExporter) -> None:
    items = [
        FireItem("a", "1:1", 5_000, 5_000, 6_000, "fire", spec=FireSpec(queue="q#high")),
        FireItem("b", "1:1", 5_000, 5_000, 6_000, "skip", 2),
        FireItem("c", "1:1", 5_000, 4_000, 6_000, "misfire", 1),
    ]
    spans = tracing.FireSpans(items)
    assert spans.parents[1] == ""
    assert all(tracing.span_context(p) for p in (spans.parents[0], spans.parents[2]))
    spans.end([1, 4, 2])
    fired, skipped = exporter.get_finished_spans()
    assert (fired.attributes or {})["rsched.outcome"] == "fired"
    assert (fired.attributes or {})["messaging.message.id"] == "a@5000"
    assert fired.name == "fire q"  # the queue, whatever the level's stream
    assert (fired.attributes or {})["messaging.destination.name"] == "q"
    assert (skipped.attributes or {})["rsched.outcome"] == "skipped"
    assert (skipped.attributes or {})["rsched.origin"] == "misfire"


def test_without_a_provider_on_writes_no_traceparent() -> None:
    # tracing="on" before any provider is configured: OpenTelemetry's no-op spans.
    with tracing.producing("enqueue", "q", task="t") as span:
        assert tracing.traceparent(span) == ""


def test_on_without_opentelemetry_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with pytest.raises(ConfigError, match=r"rsched\[otel\]"):
        tracing.decide("on")
    assert not tracing.decide("off")


NOT_SAMPLED = PARENT[:-2] + "00"


def _provider_with(sampler: object) -> tuple[TracerProvider, InMemorySpanExporter]:
    found = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)  # type: ignore[arg-type]
    provider.add_span_processor(SimpleSpanProcessor(found))
    return provider, found


def test_an_attempt_whose_producer_was_not_sampled_records_nothing_and_carries_the_trace(
    exporter: InMemorySpanExporter,
) -> None:
    # The SDK's default sampler (ParentBased): no span, the producer's context passed on.
    span = tracing.consuming(_job(traceparent=NOT_SAMPLED))
    assert not span.is_recording()
    assert tracing.traceparent(span) == NOT_SAMPLED
    assert span.get_span_context() is span.get_span_context()  # read once
    enter, detach = tracing.context_setters()
    token = enter(span)
    with TracerProvider().get_tracer("handler").start_as_current_span("handler's own") as inner:
        assert not inner.is_recording()
        assert inner.get_span_context().trace_id == int(NOT_SAMPLED[3:35], 16)
    tracing.finished(span, "completed")
    retry = tracing.linked(_job(traceparent=NOT_SAMPLED), span)
    detach(token)
    assert retry.fields[tracing.LINK] == NOT_SAMPLED
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize(
    ("sampler", "recorded"),
    [
        # OTEL_TRACES_SAMPLER's parentbased_*: what the producer decided.
        (sampling.ParentBasedTraceIdRatio(0.01), []),
        # Samplers that may record what the producer did not: the SDK is asked for each span.
        (sampling.ALWAYS_ON, ["inner", "process q"]),
        (
            sampling.ParentBased(sampling.ALWAYS_ON, remote_parent_not_sampled=sampling.ALWAYS_ON),
            ["inner", "process q"],
        ),
        (
            sampling.ParentBased(sampling.ALWAYS_ON, local_parent_not_sampled=sampling.ALWAYS_ON),
            ["inner"],
        ),
    ],
)
def test_an_unsampled_producer_is_followed_as_the_sampler_says(
    sampler: sampling.Sampler, recorded: list[str]
) -> None:
    provider, found = _provider_with(sampler)
    tracing.set_provider(provider)
    try:
        span = tracing.consuming(_job(traceparent=NOT_SAMPLED))
        recording = span.is_recording()
        enter, detach = tracing.context_setters()
        token = enter(span)
        # A handler's span under it: its parent, the attempt's span, was not sampled.
        inner = trace.get_tracer("handler", tracer_provider=provider).start_span("inner")
        inner.end()
        tracing.finished(span, "completed")
        detach(token)
        span.end()
    finally:
        tracing.set_provider(None)
    assert recording is ("process q" in recorded)
    assert span.get_span_context().trace_id == int(NOT_SAMPLED[3:35], 16)
    assert [s.name for s in found.get_finished_spans()] == recorded


@pytest.mark.parametrize(
    ("flags", "sampled"), [("00", False), ("01", True), ("02", False), ("03", True)]
)
def test_a_traceparent_says_whether_it_was_sampled(flags: str, sampled: bool) -> None:
    ctx = tracing.span_context(PARENT[:-2] + flags)
    assert ctx is not None
    assert ctx.trace_flags.sampled is sampled
