"""The runners' inbox: jobs the reader has started and no runner has taken yet.

A deque, and an Event for each runner waiting on it. anyio's memory object stream did this
before at about a fifth of a no-op job's CPU: each receive made an Event, a generic receiver
object and a task lookup, and each send checked the waiting receiver's cancellation. Here a
runner waits on an Event only when there is nothing to take, and a job wakes one runner.

Nothing bounds the inbox: the worker's slots bound what the reader hands over, so that every
job in it has a runner that is waiting, woken, or coming back from its job.
"""

from __future__ import annotations

from collections import deque

import anyio
from anyio.lowlevel import checkpoint

from rsched._core.job import Job


class Inbox:
    """Jobs from the reader to the runners, oldest first."""

    def __init__(self) -> None:
        self._jobs: deque[Job] = deque()
        self._idle: deque[anyio.Event] = deque()  # runners waiting, the longest first
        self._closed = False

    def put(self, job: Job) -> None:
        """Hand over ``job`` (never waits)."""
        if self._closed:
            raise anyio.ClosedResourceError
        self._jobs.append(job)
        if self._idle:
            self._idle.popleft().set()

    def close(self) -> None:
        """No more jobs: the runners take those left, then :meth:`get` returns None."""
        self._closed = True
        while self._idle:
            self._idle.popleft().set()

    def drain(self) -> list[Job]:
        """Take every job waiting now (the test kit runs them one at a time itself)."""
        jobs = list(self._jobs)
        self._jobs.clear()
        return jobs

    async def get(self) -> Job | None:
        """The next job; None once closed and empty."""
        if self._jobs:
            # A turn of the loop a job, as a stream's receive takes: a runner whose handlers
            # never wait lets the reader, the acker and the other runners run in between.
            await checkpoint()
        while not self._jobs:
            if self._closed:
                return None
            woken = anyio.Event()
            self._idle.append(woken)
            try:
                await woken.wait()
            except BaseException:  # cancelled (a forced stop): the wake it took goes on
                if woken in self._idle:
                    self._idle.remove(woken)
                elif self._jobs and self._idle:
                    self._idle.popleft().set()
                raise
        return self._jobs.popleft()
