"""Signals in rsched's processes. The two-signal shutdown of ``rsched-scheduler``,
``rsched-worker`` and the demo: the first SIGTERM or SIGINT asks for a graceful stop, a second
one for an immediate exit (an operator who signals twice does not want to wait). And a CLI
command's Ctrl-C (interruptible)."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def two_signal_stop(
    graceful: Callable[[str], None],
    immediate: Callable[[str], None],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Call ``graceful(signal name)`` on the first SIGTERM/SIGINT and ``immediate(name)`` on the
    second, then return. Start it with ``await tg.start(...)``: the signals are handled from the
    moment it has started."""
    with anyio.open_signal_receiver(*SIGNALS) as signals:
        task_status.started()
        stopping = False
        async for signum in signals:
            name = signal.Signals(signum).name
            if stopping:
                immediate(name)
                return
            stopping = True
            graceful(name)


async def interruptible(fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn()``; a Ctrl-C (SIGINT) cancels it and raises KeyboardInterrupt, for a command
    that waits (``--follow``). asyncio's own handling of a first Ctrl-C cancels the main task
    natively, which a cancellation caught on the way can leave running, and does nothing in a
    process started with SIGINT ignored; the event loop's own handler, set here, stops ``fn``
    in both cases. In a thread other than the main one (no signal handler can be set there)
    ``fn`` just runs."""
    if threading.current_thread() is not threading.main_thread():
        await fn()
        return
    loop = asyncio.get_running_loop()  # the command line runs on asyncio
    with anyio.CancelScope() as scope:
        loop.add_signal_handler(signal.SIGINT, scope.cancel)
        try:
            await fn()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
    if scope.cancelled_caught:
        raise KeyboardInterrupt
