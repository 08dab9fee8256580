"""The jobs' timeouts: one loop timer at the earliest deadline among the running jobs
(rsched._worker.runner.Timeouts), each job cancelled at its own deadline."""

from __future__ import annotations

import time

import anyio

from rsched._core.job import Job
from rsched._worker.runner import Timeouts
from rsched._worker.state import Running
from tests.support.waiting import eventually


def _run(name: str) -> Running:
    return Running(Job(execution_id=name, task="t", queue="q"))


async def test_each_job_times_out_at_its_own_deadline() -> None:
    running: dict[str, Running] = {}
    timeouts = Timeouts(running)
    long, short, gone, later = _run("long"), _run("short"), _run("gone"), _run("later")
    started = time.monotonic()
    for run, timeout_s in ((long, 3.0), (short, 0.05), (gone, 0.1), (later, 0.4)):
        running[run.job.execution_id] = run
        timeouts.watch(run, timeout_s)  # a shorter timeout than the timer's sets it earlier
    del running["gone"]  # ended before its deadline: nothing left to cancel

    await eventually(lambda: short.scope.cancel_called)
    assert not long.scope.cancel_called
    await eventually(lambda: later.scope.cancel_called)
    assert time.monotonic() - started >= 0.4
    assert not long.scope.cancel_called
    assert not gone.scope.cancel_called
    await eventually(lambda: long.scope.cancel_called, timeout_s=30)
    assert time.monotonic() - started >= 3.0


async def test_a_job_started_after_the_timer_is_watched_too() -> None:
    running: dict[str, Running] = {}
    timeouts = Timeouts(running)
    first = _run("first")
    running["first"] = first
    timeouts.watch(first, 0.05)
    await eventually(lambda: first.scope.cancel_called)
    del running["first"]
    await anyio.sleep(0.01)  # the timer has run: none is set
    second = _run("second")
    running["second"] = second
    timeouts.watch(second, 0.05)
    await eventually(lambda: second.scope.cancel_called)
