"""The tasks framework this process has: ``django.tasks`` (Django 6+) or its backport
``django_tasks`` (the ``django-tasks`` package, for Django 5.2 on Python 3.11). Every other
module of rsched.contrib.django takes the framework's names from here, so the differences
between the two stay in this one place."""

from __future__ import annotations

from importlib.util import find_spec
from typing import TYPE_CHECKING, cast

#: Whether Django has the framework built in (6.0 and later).
BUILT_IN = find_spec("django.tasks") is not None

# Typed against the backport, which ships its annotations.
if TYPE_CHECKING or not BUILT_IN:
    from django_tasks import task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json
else:
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

# The statuses, typed as members (a TextChoices member reads as its (value, label) tuple to
# mypy without Django's plugin).
READY = cast(TaskResultStatus, TaskResultStatus.READY)
RUNNING = cast(TaskResultStatus, TaskResultStatus.RUNNING)
FAILED = cast(TaskResultStatus, TaskResultStatus.FAILED)
#: A finished task's success: SUCCESSFUL in Django 6.0 and the backport, SUCCEEDED later.
SUCCESSFUL = cast(TaskResultStatus, getattr(TaskResultStatus, "SUCCESSFUL", None))
if SUCCESSFUL is None:
    SUCCESSFUL = cast(TaskResultStatus, getattr(TaskResultStatus, "SUCCEEDED"))  # noqa: B009
#: The status of a cancelled job: the framework's CANCELLED where it has one, else FAILED.
CANCELLED = cast(TaskResultStatus, getattr(TaskResultStatus, "CANCELLED", FAILED))

__all__ = (
    "BUILT_IN",
    "CANCELLED",
    "DEFAULT_TASK_QUEUE_NAME",
    "FAILED",
    "READY",
    "RUNNING",
    "SUCCESSFUL",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
)
