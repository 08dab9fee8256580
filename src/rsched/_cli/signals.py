"""Two-signal shutdown, shared by ``rsched-scheduler``, ``rsched-worker`` and the demo: the first
SIGTERM or SIGINT asks for a graceful stop, a second one for an immediate exit (an operator who
signals twice does not want to wait)."""

from __future__ import annotations

import signal
from collections.abc import Callable

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
