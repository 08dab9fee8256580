"""The tasks of the test project: sync, async, failing, taking the context, on another queue
with a priority, and one a schedule of the settings runs."""

from __future__ import annotations

import sys
from typing import Any

import anyio
import anyio.lowlevel

if sys.version_info >= (3, 12):
    from django.tasks import task
    from django.tasks.base import TaskContext
else:
    from django_tasks import task
    from django_tasks.base import TaskContext


class Boom(Exception):
    """What ``explode`` raises (a class of this module: its path is in the TaskError)."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def greet(name: str, *, punctuation: str = "!") -> str:
    await anyio.lowlevel.checkpoint()
    return f"hello {name}{punctuation}"


@task
def explode(message: str) -> None:
    raise Boom(message)


@task(takes_context=True)
def whoami(context: TaskContext, tag: str) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt, "tag": tag}


@task(queue_name="urgent", priority=50)
def urgent(n: int) -> int:
    return n * 2


@task(priority=-20)
def later() -> str:
    return "later"


@task
def tick(note: str) -> str:
    return note
