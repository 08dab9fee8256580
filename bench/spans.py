"""What a worker's tracing costs per job, without Redis (docs/tracing.md, "Cost").

``python -m bench.spans [--jobs N] [--repeat R] [--profile CASE]``

Each case runs ``N`` no-op jobs through one runner's ``run_job`` (the plain :class:`Runner`,
or the :class:`TracedRunner` with the SDK's provider, a BatchSpanProcessor and an exporter that
drops the spans), or makes ``N`` spans with the SDK directly with the consumer span's
attributes; the CPU µs per job of each case is printed, best and median of ``R`` runs. The
cases run in turns, so that a loaded machine slows them alike. ``--profile CASE`` runs one case
under cProfile instead and prints its 25 most expensive functions.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import anyio

from bench.worker import nowhere_provider
from rsched._core import tracing
from rsched._core.job import Job, parse_entry
from rsched._core.settings import Settings
from rsched._worker.journal import Journal
from rsched._worker.runner import Runner
from rsched._worker.state import WorkerState
from rsched._worker.traced import TracedRunner

SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
NOT_SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


def _jobs(n: int, parent: Callable[[int], str | None]) -> Iterator[Job]:
    """``n`` jobs, each parsed when it is run (as a worker does: only those in flight are
    alive, so that the collector's work is what a worker's is)."""
    now = str(int(time.time() * 1000))
    for i in range(n):
        fields = {
            "execution_id": f"job-{uuid.uuid4().hex}",
            "task": "bench.noop",
            "payload": "{}",
            "attempt": "1",
            "origin": "enqueue",
            "opts": "{}",
            "scheduled_at": now,
            "fired_at": now,
        }
        tp = parent(i)
        if tp is not None:
            fields[tracing.PARENT] = tp
        yield parse_entry("bench", f"{i}-0", fields)


def _sampled_1pc(i: int) -> str:
    """The traceparents a producer sampling 1 % of its traces writes (1 in 100 sampled)."""
    return f"00-{uuid.uuid4().hex}-b7ad6b7169203331-{'01' if i % 100 == 0 else '00'}"


async def _noop(job: Job) -> None:
    pass


async def _run_jobs(runner_class: type[Runner], jobs: Iterable[Job]) -> float:
    state = WorkerState(
        handlers={"bench.noop": (_noop, True)},
        consumer="bench",
        stores=[None],  # type: ignore[list-item]  # no call reaches Redis
        settings=Settings(),
    )
    send, receive = anyio.create_memory_object_stream[Any](1)
    runner = runner_class(state, send, Journal(state))
    t0 = time.process_time()
    for job in jobs:
        state.slots.used += 1
        await runner.run_job(job)
        receive.receive_nowait()  # what the acker would take
        # The runner's next receive lets the loop run (it drops the cancelled timers of the
        # jobs' deadlines, each holding its job and the context it ran in).
        await anyio.lowlevel.checkpoint()
    took = time.process_time() - t0
    send.close()
    receive.close()
    return took


def _sdk_spans(jobs: Iterable[Job]) -> float:
    """The consumer span's attributes and parent, made directly with the SDK."""
    from opentelemetry import context, trace

    tracer = nowhere_provider().get_tracer("bench")
    root = context.Context()
    t0 = time.process_time()
    for job in jobs:
        parent = tracing.span_context(job.fields.get(tracing.PARENT))
        ctx = root if parent is None else trace.set_span_in_context(trace.NonRecordingSpan(parent))
        span = tracer.start_span(
            "process bench",
            context=ctx,
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "messaging.system": "rsched",
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": "bench",
                "messaging.consumer.group.name": "rsched",
                "messaging.message.id": job.execution_id,
                "rsched.execution_id": job.execution_id,
                "rsched.task": job.task,
                "rsched.attempt": job.attempt,
                "rsched.start_lag_ms": 3,
                "rsched.outcome": "completed",
            },
        )
        span.end()
    return time.process_time() - t0


def _cases(n: int) -> dict[str, Callable[[], float]]:

    def plain() -> float:
        return anyio.run(_run_jobs, Runner, _jobs(n, lambda i: SAMPLED))

    def traced(
        parent: Callable[[int], str | None], ratio: float | None = None
    ) -> Callable[[], float]:
        def case() -> float:
            tracing.set_provider(nowhere_provider(ratio))
            try:
                return anyio.run(_run_jobs, TracedRunner, _jobs(n, parent))
            finally:
                tracing.set_provider(None)

        return case

    def sdk() -> float:
        return _sdk_spans(_jobs(n, lambda i: SAMPLED))

    def parsed() -> float:
        t0 = time.process_time()
        for _ in _jobs(n, lambda i: SAMPLED):
            pass
        return time.process_time() - t0

    return {
        "jobs parsed, nothing run (the baseline of the others)": parsed,
        "runner, untraced": plain,
        "TracedRunner, parent sampled": traced(lambda i: SAMPLED),
        "TracedRunner, parent not sampled": traced(lambda i: NOT_SAMPLED),
        "TracedRunner, no parent (root, sampled)": traced(lambda i: None),
        "TracedRunner, producer at 1 %": traced(_sampled_1pc, 0.01),
        "SDK span alone, same attributes": sdk,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", help="one case's name (a prefix will do), under cProfile")
    args = parser.parse_args()
    cases = _cases(args.jobs)
    if args.profile:
        name = next(c for c in cases if c.startswith(args.profile))
        prof = cProfile.Profile()
        prof.runcall(cases[name])
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, case in cases.items():
            times[name].append(case() / args.jobs * 1e6)
    print(f"| case ({args.jobs} jobs, {args.repeat} runs) | CPU µs/job best | median |")
    print("|---|---|---|")
    for name, runs in times.items():
        print(f"| {name} | {min(runs):.1f} | {statistics.median(runs):.1f} |")


if __name__ == "__main__":
    main()
