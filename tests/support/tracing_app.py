"""Tracing in the tests: a worker app for child processes that trace, the spans they hand back,
and a probe that a process which does not trace never loads OpenTelemetry.

A child ``rsched-worker tests.support.tracing_app:worker`` configures the OpenTelemetry SDK
itself when it loads this module (as an application would, before the worker starts) and
writes every span it ends as a JSON line to the file named by ``RSCHED_TEST_SPANS``, which the
test reads with :func:`read_spans`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import rsched

#: The worker children run (``tests.support.tracing_app:worker``).
worker = rsched.Worker(queues=["default"], concurrency=4)


def span_record(span: Any) -> dict[str, Any]:
    """One finished SDK span as plain data (ids as hex)."""
    ctx = span.get_span_context()
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "links": [
            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
    }


def _configure(path: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    lock = threading.Lock()

    class JsonLines(SpanExporter):
        """Appends each span to ``path`` as one JSON line (the test reads the file)."""

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            with lock, open(path, "a") as out:
                for span in spans:
                    out.write(json.dumps(span_record(span)) + "\n")
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLines()))
    trace.set_tracer_provider(provider)


if os.environ.get("RSCHED_TEST_SPANS"):
    _configure(os.environ["RSCHED_TEST_SPANS"])


def read_spans(path: Path) -> list[dict[str, Any]]:
    """The spans a child wrote so far."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _tracer() -> Any:
    from opentelemetry import trace

    return trace.get_tracer("tests.tracing_app")


@worker.task("trace.async")
async def async_handler(job: rsched.Job) -> None:
    with _tracer().start_as_current_span("handler.async"):
        pass


@worker.task("trace.sync")
def sync_handler(job: rsched.Job) -> None:
    with _tracer().start_as_current_span("handler.sync"):
        pass


@worker.task("trace.fail_once")
def fail_once(job: rsched.Job) -> None:
    if job.attempt == 1:
        raise RuntimeError("first attempt fails")


@worker.task("trace.plain")
async def plain(job: rsched.Job) -> None:
    """A job of a process that does not trace."""


# --- the probe of a process that does not trace ----------------------------------------------


async def _probe() -> None:
    """Run a worker and a scheduler in this process, enqueue a job, trigger and fire a schedule,
    wait until all three ran, then print which OpenTelemetry modules that loaded (those redis-py
    loads by itself when OpenTelemetry is installed, its own metrics, are loaded already)."""
    import anyio

    from rsched._redis.connection import connect

    before = {name for name in sys.modules if name.startswith("opentelemetry")}

    settings = rsched.Settings()
    client = rsched.Client.from_settings(settings)
    redis = connect(settings)
    ran: list[str] = []
    three = anyio.Event()
    probe = rsched.Worker(queues=["default"], settings=settings)

    @probe.task("probe.run")
    async def run(job: rsched.Job) -> None:
        ran.append(job.execution_id)
        if len(ran) >= 3:
            three.set()

    async with client, anyio.create_task_group() as tg:
        await tg.start(probe.run, redis)
        scheduler = rsched.Scheduler(connect(settings), settings)
        await tg.start(scheduler.run)
        await client.enqueue("probe.run")
        await client.add(rsched.Schedule(id="probe", task="probe.run", every="1s"))
        await client.trigger("probe")
        with anyio.fail_after(60):
            await three.wait()
        loaded = sorted(
            name for name in sys.modules if name.startswith("opentelemetry") and name not in before
        )
        print(f"opentelemetry modules loaded: {loaded}", flush=True)
        scheduler.stop()
        probe.stop()


class _Absent:
    """A meta path finder for which OpenTelemetry is not installed."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


if __name__ == "__main__":
    import anyio

    if sys.argv[1:] == ["--without-opentelemetry"]:
        for name in [n for n in sys.modules if n.startswith("opentelemetry")]:
            del sys.modules[name]
        sys.meta_path.insert(0, _Absent())

    anyio.run(_probe)
