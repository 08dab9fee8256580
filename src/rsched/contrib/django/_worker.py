"""The worker of Django tasks: an rsched Worker with a handler for each task of the project,
and the schedules of the ``RSCHED_SCHEDULES`` setting synced as it starts (docs/django.md).

Which tasks: those of each installed app's ``tasks`` module (Django's convention, as for
``admin.py``) and of the modules an RschedBackend's ``TASK_MODULES`` option lists, found once
at start. Each is registered under its ``module_path``, the task name the backend enqueues
with, so the worker takes only jobs it can run, the worker registry lists them, and a job of
a task no worker has waits (``unknown_task_grace_s``) and is then dead-lettered, as any job.
"""

from __future__ import annotations

import importlib
import os
import traceback
from collections.abc import Callable, Mapping, Sequence
from inspect import iscoroutinefunction
from types import ModuleType
from typing import Any, cast

import anyio
from anyio.abc import TaskStatus
from asgiref.sync import sync_to_async
from django.apps import apps
from django.conf import settings as django_settings
from django.utils import timezone
from django.utils.module_loading import module_has_submodule
from redis.asyncio import Redis

from rsched import (
    Client,
    ConfigError,
    InvalidArgument,
    Job,
    Schedule,
    ScheduleFileError,
    Worker,
)
from rsched.contrib.django._backend import RschedBackend, rsched_priority
from rsched.contrib.django._framework import (
    FAILED,
    RUNNING,
    SUCCESSFUL,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)

#: The source of the schedules of RSCHED_SCHEDULES (the audit trail says ``sync:django``).
DEFAULT_SOURCE = "django"


class DjangoWorker(Worker):
    """A Worker that syncs the project's schedules (``RSCHED_SCHEDULES``) before it reads;
    ``schedules`` None (the setting is absent) syncs nothing."""

    def __init__(
        self,
        backend: RschedBackend,
        queues: Sequence[str],
        schedules: list[Schedule | dict[str, Any]] | None,
        *,
        source: str,
        prune: bool,
    ) -> None:
        super().__init__(queues, settings=backend.rsched.settings)
        self.schedules = schedules
        self.source = source
        self.prune = prune

    async def run(
        self,
        redis: Redis | None = None,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Sync the schedules, then :meth:`rsched.Worker.run`. Raises ConfigError listing every
        problem of RSCHED_SCHEDULES (nothing synced, the worker does not start)."""
        if self.schedules is not None:
            settings = self.resolve_settings()
            client = Client.from_settings(settings) if redis is None else Client(redis, settings)
            async with client:
                try:
                    await client.sync_schedules(
                        self.schedules, source=self.source, prune=self.prune
                    )
                except ScheduleFileError as exc:
                    raise ConfigError(f"RSCHED_SCHEDULES: {exc}") from None
                except InvalidArgument as exc:  # the source's name
                    raise ConfigError(f"RSCHED_SCHEDULES_SOURCE: {exc.message}") from None
        await super().run(redis, task_status=task_status)


def build_worker(alias: str | None = None) -> DjangoWorker:
    """The worker of the Django project this process has set up (``django.setup()`` is called
    when it was not): its RschedBackend (``alias``, or the only one of ``TASKS``), a handler
    for each of its tasks, and the RSCHED_SCHEDULES setting. Raises ConfigError naming what is
    missing (no RschedBackend, no task found)."""
    import django
    from django.core.exceptions import ImproperlyConfigured

    try:
        django.setup()
    except (ImportError, ImproperlyConfigured) as exc:
        raise ConfigError(
            f"cannot set Django up (DJANGO_SETTINGS_MODULE="
            f"{os.environ.get('DJANGO_SETTINGS_MODULE')!r}): {exc}"
        ) from None
    try:
        backend = _backend(alias)
    except ImproperlyConfigured as exc:  # a backend of TASKS that cannot be loaded
        raise ConfigError(f"TASKS: {exc}") from None
    tasks = _tasks(backend)
    if not tasks:
        where = ", ".join(_modules(backend)) or "no module"
        raise ConfigError(
            f"no task of backend {backend.alias!r} found (looked in {where}): define them with "
            "@task in an app's tasks.py, or list their modules in OPTIONS TASK_MODULES"
        )
    queues = sorted({backend.rsched_queue(q) for q in backend.queues})
    source = getattr(django_settings, "RSCHED_SCHEDULES_SOURCE", DEFAULT_SOURCE)
    prune = getattr(django_settings, "RSCHED_SCHEDULES_PRUNE", True)
    if not isinstance(prune, bool):
        raise ConfigError("RSCHED_SCHEDULES_PRUNE: True or False")
    entries = getattr(django_settings, "RSCHED_SCHEDULES", None)
    if entries is not None and (
        isinstance(entries, str | Mapping) or not isinstance(entries, Sequence)
    ):
        raise ConfigError("RSCHED_SCHEDULES: a list of schedules (dicts or rsched.Schedule)")
    schedules = None if entries is None else [_schedule(e, tasks, backend) for e in entries]
    worker = DjangoWorker(
        backend, queues or [backend.rsched.default_queue], schedules, source=source, prune=prune
    )
    for name, task in sorted(tasks.items()):
        worker.add_task(name, _handler(task, worker))
    return worker


def _backend(alias: str | None) -> RschedBackend:
    aliases = [alias] if alias is not None else list(getattr(django_settings, "TASKS", {}))
    ours = [task_backends[a] for a in aliases if isinstance(task_backends[a], RschedBackend)]
    if alias is not None and not ours:
        raise ConfigError(f"TASKS[{alias!r}] is not an rsched.contrib.django.RschedBackend")
    if not ours:
        raise ConfigError(
            'no backend of the TASKS setting is "rsched.contrib.django.RschedBackend"'
        )
    if len(ours) > 1:
        raise ConfigError(
            f"TASKS has {len(ours)} RschedBackends ({', '.join(b.alias for b in ours)}): run "
            "one worker per backend, each from a module of yours holding "
            "worker = rsched.contrib.django.build_worker(ALIAS)"
        )
    backend: RschedBackend = ours[0]
    return backend


def _modules(backend: RschedBackend) -> list[str]:
    found = [
        f"{app.name}.tasks"
        for app in apps.get_app_configs()
        if module_has_submodule(app.module, "tasks")
    ]
    return found + [m for m in backend.rsched.task_modules if m not in found]


def _tasks(backend: RschedBackend) -> dict[str, Task[Any, Any]]:
    """The backend's tasks in the task modules, by module path."""
    tasks: dict[str, Task[Any, Any]] = {}
    for name in _modules(backend):
        try:
            module: ModuleType = importlib.import_module(name)
        except ImportError as exc:
            raise ConfigError(f"cannot import task module {name!r} ({exc})") from None
        for value in vars(module).values():
            if isinstance(value, Task) and value.backend == backend.alias:
                tasks.setdefault(value.module_path, value)
    return tasks


def _schedule(
    entry: Any, tasks: Mapping[str, Task[Any, Any]], backend: RschedBackend
) -> Schedule | dict[str, Any]:
    """An RSCHED_SCHEDULES entry as a schedule spec: ``task`` a Task or its module path,
    ``args`` / ``kwargs`` its arguments; queue and priority the task's unless given."""
    if not isinstance(entry, Mapping):
        # An rsched.Schedule (anything else is refused by the sync, naming its index).
        return cast(Schedule, entry)
    spec = dict(entry)
    task = spec.get("task")
    if isinstance(task, Task):
        spec["task"] = task = task.module_path
    found = tasks.get(task) if isinstance(task, str) else None
    if "args" in spec or "kwargs" in spec:
        spec["payload"] = {"args": spec.pop("args", []), "kwargs": spec.pop("kwargs", {})}
    if found is not None:
        spec.setdefault("queue", backend.rsched_queue(found.queue_name))
        spec.setdefault("priority", rsched_priority(found.priority))
    return spec


def _arguments(job: Job) -> tuple[list[Any], dict[str, Any]]:
    payload = job.payload
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if set(payload) - {"args", "kwargs"} or not isinstance(args, list):
        raise ValueError(
            f"job {job.execution_id}: the payload of a Django task is "
            '{"args": [...], "kwargs": {...}}, not ' + repr(payload)[:200]
        )
    if not isinstance(kwargs, dict):
        raise ValueError(f"job {job.execution_id}: kwargs must be a JSON object")
    return args, kwargs


def _running(
    task: Task[Any, Any], job: Job, worker: Worker
) -> tuple[TaskResult[Any], list[Any], dict[str, Any]]:
    """The job's TaskResult as it starts (one worker id per attempt: this worker's, as the
    earlier attempts' are not at hand), and the function's arguments: the job's, after a
    TaskContext for a ``takes_context`` task."""
    args, kwargs = _arguments(job)
    now = timezone.now()
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=job.execution_id,
        status=RUNNING,
        enqueued_at=job.fired_at,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=[],
        worker_ids=[worker.consumer] * job.attempt,
    )
    if task.takes_context:
        args = [TaskContext(task_result=result), *args]
    return result, args, kwargs


def _ended(
    result: TaskResult[Any], value: Any = None, error: BaseException | None = None
) -> TaskResult[Any]:
    """``result`` as its run ended: SUCCESSFUL with ``value``, or FAILED with ``error``."""
    object.__setattr__(result, "finished_at", timezone.now())
    if error is None:
        object.__setattr__(result, "status", SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
    else:
        object.__setattr__(result, "status", FAILED)
        kind = type(error)
        result.errors.append(
            TaskError(
                exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
                traceback="".join(traceback.format_exception(error)),
            )
        )
    return result


def _handler(task: Task[Any, Any], worker: Worker) -> Callable[[Job], Any]:
    """The rsched handler of ``task``: calls its function with the job's arguments (an async
    one awaited, a plain one in rsched's worker threads), with Django's stale database
    connections closed before and after, as Django's request cycle does, and the framework's
    ``task_started`` and ``task_finished`` signals sent around it. The return value must be
    JSON (the framework's rule)."""
    from django.db import close_old_connections

    sender = RschedBackend
    if iscoroutinefunction(task.func):
        close = sync_to_async(close_old_connections)

        async def run_async(job: Job) -> Any:
            result, args, kwargs = _running(task, job, worker)
            await close()
            try:
                await task_started.asend(sender, task_result=result)
                value = normalize_json(await task.func(*args, **kwargs))
            except Exception as exc:
                await task_finished.asend(sender, task_result=_ended(result, error=exc))
                raise
            finally:
                await close()
            await task_finished.asend(sender, task_result=_ended(result, value))
            return value

        return run_async

    def run(job: Job) -> Any:
        result, args, kwargs = _running(task, job, worker)
        close_old_connections()
        try:
            task_started.send(sender, task_result=result)
            value = normalize_json(task.func(*args, **kwargs))
        except Exception as exc:
            task_finished.send(sender, task_result=_ended(result, error=exc))
            raise
        finally:
            close_old_connections()
        task_finished.send(sender, task_result=_ended(result, value))
        return value

    return run
