"""RschedBackend: Django's tasks framework enqueuing through rsched (docs/django.md)."""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.utils import timezone
from django.utils.module_loading import import_string

from rsched import InvalidJob, JobNotFound, SyncClient
from rsched.contrib.django._framework import (
    DEFAULT_TASK_QUEUE_NAME,
    READY,
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    task_enqueued,
)
from rsched.contrib.django._options import Options
from rsched.contrib.django._results import task_result

# One SyncClient per process and rsched settings: Django makes a backend object per thread
# (and again after a settings change), and each SyncClient holds a pool and a loop thread.
# The process id is part of the key: a client made before a fork is useless in the child.
_CLIENTS: dict[tuple[int, str], SyncClient] = {}
_CLIENTS_LOCK = threading.Lock()


def rsched_priority(priority: int) -> Literal["high", "normal", "low"]:
    """Django's -100..100 on rsched's three levels: above 0 high, 0 normal, below 0 low."""
    return "high" if priority > 0 else "low" if priority < 0 else "normal"


class RschedBackend(BaseTaskBackend):
    """A backend of Django's tasks framework (``django.tasks``, or the ``django-tasks``
    backport) that enqueues each task as an rsched job: task name ``task.module_path``,
    payload ``{"args": [...], "kwargs": {...}}``, on the rsched queue of its ``queue_name``,
    at the level of its ``priority``, delayed until its ``run_after``. The jobs run in
    ``rsched-worker --django SETTINGS_MODULE``. Results are read back from rsched
    (``get_result``, ``TaskResult.refresh``). Raises ConfigError for bad OPTIONS, the
    framework's InvalidTask for a task it cannot run (arguments that are not JSON, a queue
    name rsched refuses)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.rsched = Options.parse(alias, params.get("OPTIONS", {}))

    def rsched_queue(self, queue_name: str) -> str:
        """The rsched queue of a task's ``queue_name`` (OPTIONS DEFAULT_QUEUE for Django's
        default queue, the same name for any other)."""
        if queue_name == DEFAULT_TASK_QUEUE_NAME:
            return self.rsched.default_queue
        return queue_name

    @property
    def client(self) -> SyncClient:
        """The process's SyncClient for these settings (made on first use)."""
        settings = self.rsched.settings
        key = (os.getpid(), settings.model_dump_json())
        with _CLIENTS_LOCK:
            client = _CLIENTS.get(key)
            if client is None:
                client = _CLIENTS[key] = SyncClient.from_settings(settings)
        return client

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        self.validate_task(task)
        try:
            payload = {"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))}
        except (TypeError, ValueError) as exc:
            raise InvalidTask(
                f"{task.module_path}: arguments must be JSON (str, int, float, bool, None, "
                f"lists and dicts of them): {exc}"
            ) from None
        delay = 0.0
        if task.run_after is not None:
            delay = max(0.0, (task.run_after - timezone.now()) / timedelta(seconds=1))
        options: dict[str, Any] = {"max_retries": self.rsched.max_retries}
        if self.rsched.timeout_s is not None:
            options["timeout_s"] = self.rsched.timeout_s
        try:
            done = self.client.enqueue(
                task.module_path,
                payload,
                queue=self.rsched_queue(task.queue_name),
                priority=rsched_priority(task.priority),
                delay=delay,
                **options,
            )
        except InvalidJob as exc:
            raise InvalidTask(f"{task.module_path}: {exc}") from None
        result: TaskResult[Any] = TaskResult(
            task=task,
            id=done.execution_id,
            status=READY,
            enqueued_at=timezone.now(),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        # Not thread_sensitive: the SyncClient serves any thread, so calls need not queue up
        # behind one another on the main thread.
        return await sync_to_async(self.enqueue, thread_sensitive=False)(task, args, kwargs)

    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The task's result as rsched knows it now; raises TaskResultDoesNotExist for an id
        rsched does not know (or no longer: finished jobs are kept for a while,
        docs/django.md) or one that is not a task of the framework."""
        try:
            info = self.client.job(result_id)
        except (JobNotFound, ValueError):  # ValueError: InvalidArgument, not an execution id
            raise TaskResultDoesNotExist(result_id) from None
        if info.task is None:
            raise TaskResultDoesNotExist(result_id)
        try:
            task = import_string(info.task)
        except ImportError:
            raise TaskResultDoesNotExist(result_id) from None
        if not isinstance(task, Task):
            raise TaskResultDoesNotExist(result_id)
        return task_result(self.client, task, self.alias, info)

    async def aget_result(self, result_id: str) -> TaskResult[Any]:
        return await sync_to_async(self.get_result, thread_sensitive=False)(result_id)
