"""The traced runner's span of each attempt, its outcome and the context a handler runs in,
through the test kit's worker (the same Runner a worker process runs; no server to start)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import rsched
from rsched.testing import TestEnv

pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from tests.support.spans import spans_kept


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    with spans_kept() as found:
        yield found


def _attempts(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is trace.SpanKind.CONSUMER]


async def test_each_outcome_is_set_on_its_attempts_span(exporter: InMemorySpanExporter) -> None:
    worker = rsched.Worker(["default"])
    current: dict[str, trace.Span] = {}

    @worker.task("ok")
    async def ok(job: rsched.Job) -> None:
        current[job.execution_id] = trace.get_current_span()

    @worker.task("flaky")
    async def flaky(job: rsched.Job) -> None:
        raise ValueError("boom")

    @worker.task("slow")
    async def slow(job: rsched.Job) -> None:
        await anyio.sleep(30)

    async with TestEnv(worker) as env:
        done = await env.client.enqueue("ok")
        await env.client.enqueue("flaky", max_retries=1)
        await env.client.enqueue("slow", timeout_s=0.05, max_retries=0)
        await env.advance("10m")  # the retry of flaky comes due, and dies
        outside = trace.get_current_span()

    by_task: dict[str, list[dict[str, Any]]] = {}
    spans: dict[tuple[Any, Any], ReadableSpan] = {}
    for span in _attempts(exporter):
        attrs = dict(span.attributes or {})
        by_task.setdefault(str(attrs["rsched.task"]), []).append(attrs)
        spans[attrs["rsched.execution_id"], attrs["rsched.attempt"]] = span
    assert sorted(by_task) == ["flaky", "ok", "slow"]
    (completed,) = by_task["ok"]
    assert completed["rsched.outcome"] == "completed"
    # The handler ran with its attempt's span current, and only then.
    attempt = spans[done.execution_id, 1]
    assert current[done.execution_id].get_span_context() == attempt.context
    assert outside is trace.INVALID_SPAN
    failed, dead = sorted(by_task["flaky"], key=lambda attrs: int(attrs["rsched.attempt"]))
    assert (failed["rsched.outcome"], failed["error.type"]) == ("failed", "ValueError")
    assert dead["rsched.outcome"] == "dead"
    first, second = (spans[failed["rsched.execution_id"], n] for n in (1, 2))
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    (timed_out,) = by_task["slow"]
    assert (timed_out["rsched.outcome"], timed_out["error.type"]) == ("dead", "TimeoutError")
