"""The runners' inbox (rsched._worker.inbox): every job handed over is taken once, in order, by
runners that wait only when there is nothing to take; closing lets them take what is left."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from rsched._core.job import Job, parse_entry
from rsched._worker.inbox import Inbox


def job(n: int) -> Job:
    return parse_entry("q", f"{n}-0", {"execution_id": f"j{n}", "task": "t"})


async def test_each_job_is_taken_once_in_order_by_many_runners() -> None:
    inbox, taken = Inbox(), []

    async def runner() -> None:
        while (j := await inbox.get()) is not None:
            taken.append(j.execution_id)
            if len(taken) % 3 == 0:
                await anyio.lowlevel.checkpoint()  # some handlers wait, some do not

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(runner)
        await anyio.wait_all_tasks_blocked()
        for n in range(100):  # in bursts, runners waiting and runners busy
            inbox.put(job(n))
            if n % 7 == 0:
                await anyio.wait_all_tasks_blocked()
        inbox.close()
    assert taken == [f"j{n}" for n in range(100)]


async def test_closing_lets_the_runners_take_what_is_left_then_stop() -> None:
    inbox = Inbox()
    for n in range(3):
        inbox.put(job(n))
    inbox.close()
    assert [(await inbox.get()) is not None for _ in range(2)] == [True] * 2
    assert [j.execution_id for j in inbox.drain()] == ["j2"]  # what waits, taken at once
    assert await inbox.get() is None
    with pytest.raises(anyio.ClosedResourceError):
        inbox.put(job(9))


async def test_a_runner_cancelled_while_waiting_leaves_no_job_behind() -> None:
    """Cancelled before a job came (its wake is withdrawn), or in the turn its wake came (it
    takes the job, as a stream's receive would, and its cancellation comes at its next
    wait): every job is taken once, and the other runner takes the rest."""
    for cancel_first in (True, False):
        inbox, doomed = Inbox(), anyio.CancelScope()
        taken: list[str] = []

        async def runner(inbox: Inbox = inbox, taken: list[str] = taken) -> None:
            while (j := await inbox.get()) is not None:
                taken.append(j.execution_id)
                await anyio.lowlevel.checkpoint()

        async def doomed_runner(doomed: anyio.CancelScope = doomed) -> None:
            with doomed:
                await runner()

        async with anyio.create_task_group() as tg:
            tg.start_soon(doomed_runner)  # the first to wait: the first woken
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(runner)
            await anyio.wait_all_tasks_blocked()
            if cancel_first:
                doomed.cancel()
                await anyio.wait_all_tasks_blocked()
            inbox.put(job(1))
            doomed.cancel()
            await anyio.wait_all_tasks_blocked()
            inbox.put(job(2))
            inbox.put(job(3))
            await anyio.wait_all_tasks_blocked()
            inbox.close()
        assert sorted(taken) == ["j1", "j2", "j3"]
