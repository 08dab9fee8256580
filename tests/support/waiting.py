"""The one way a test waits: poll a condition until it holds, within a generous bound.

A test waits for the event it needs, never for a fixed time. The bound only ends a test that
would otherwise hang: it is generous (60 s) because the suite runs in parallel on small shared
machines, where a child process can take seconds to start and a lease seconds to change hands.
A test that asserts how fast something happens measures that itself, after the wait.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import anyio

WAIT_S = 60.0
POLL_S = 0.02

# Called with no arguments; ``...`` lets a lambda bind a loop variable through a default.
Check = Callable[..., Any]
What = str | Callable[[], str]


async def eventually(check: Check, *, timeout_s: float = WAIT_S, what: What = "") -> Any:
    """Call ``check`` (a function or a coroutine function) until it returns something true;
    return that. Fails with ``what`` (text, or a function giving it) after ``timeout_s``."""
    with anyio.move_on_after(timeout_s):
        while True:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result
            await anyio.sleep(POLL_S)
    raise AssertionError(_failure(check, timeout_s, what))


def eventually_blocking(check: Check, *, timeout_s: float = WAIT_S, what: What = "") -> Any:
    """:func:`eventually` for code that is not async (plain tests, threads): the same bound,
    blocking between polls."""
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(_failure(check, timeout_s, what))
        time.sleep(POLL_S)
    return result


def _failure(check: Check, timeout_s: float, what: What) -> str:
    said = what() if callable(what) else what
    return f"not true within {timeout_s:g} s: {said or getattr(check, '__qualname__', check)}"
