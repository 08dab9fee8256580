"""rsched's spans in the test's own process, kept in memory (the SDK's in-memory exporter)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rsched._core import tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@contextmanager
def spans_kept() -> Iterator[InMemorySpanExporter]:
    """A provider given to rsched alone (``tracing.set_provider``) whose spans go to the
    exporter yielded, each as it ends; the global provider again on exit."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    found = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(found))
    tracing.set_provider(provider)
    try:
        yield found
    finally:
        tracing.set_provider(None)
