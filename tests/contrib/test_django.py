"""rsched.contrib.django: Django's tasks framework enqueuing through rsched, results read back
as TaskResults, the worker (``rsched-worker --django SETTINGS``) running the project's tasks, and
the schedules of its settings synced at the worker's start and fired by a scheduler."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, cast

import pytest

pytest.importorskip("django", reason="the django extra is not installed")
framework = pytest.importorskip(
    "django.tasks" if sys.version_info >= (3, 12) else "django_tasks",
    reason="the django extra is not installed",
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.contrib.django_app.settings")

import django  # noqa: E402

django.setup()

from django.test import override_settings  # noqa: E402
from django.utils import timezone  # noqa: E402

import rsched  # noqa: E402
from rsched.contrib.django import RschedBackend  # noqa: E402
from rsched.contrib.django._framework import (  # noqa: E402
    SUCCESSFUL,
    InvalidTask,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)
from rsched.contrib.django._results import class_path  # noqa: E402
from tests.contrib.django_app import settings as project  # noqa: E402
from tests.contrib.django_app import tasks  # noqa: E402
from tests.support.processes import Proc  # noqa: E402
from tests.support.servers import Server  # noqa: E402
from tests.support.waiting import eventually, eventually_blocking  # noqa: E402

SETTINGS_MODULE = "tests.contrib.django_app.settings"


def tasks_setting(redis_url: str, prefix: str, **options: Any) -> dict[str, Any]:
    return {
        "default": {
            "BACKEND": "rsched.contrib.django.RschedBackend",
            "QUEUES": project.QUEUES,
            "OPTIONS": {**project.OPTIONS, "REDIS_URL": redis_url, "PREFIX": prefix, **options},
        }
    }


@pytest.fixture(scope="module")
def deployment(server: Server) -> Iterator[tuple[str, str]]:
    """One deployment (URL, prefix) for the module's tests, with a worker of the test project
    (``rsched-worker --django``) and a scheduler running on it; the tests use distinct jobs."""
    prefix = f"dj{os.urandom(5).hex()}"
    env = {"RSCHED_REDIS_URL": server.url, "RSCHED_PREFIX": prefix}
    worker = Proc("rsched._cli.worker_process", "--django", SETTINGS_MODULE, env=env)
    scheduler = Proc("rsched._cli.scheduler_process", env=env)
    try:
        worker.wait_for("worker.start")
        yield server.url, prefix
    finally:
        worker.close()
        scheduler.close()


@pytest.fixture
def on_rsched(deployment: tuple[str, str]) -> Iterator[rsched.SyncClient]:
    """The project's TASKS pointed at the module's deployment; a SyncClient on it."""
    url, prefix = deployment
    with (
        override_settings(TASKS=tasks_setting(url, prefix)),
        rsched.SyncClient(url, prefix) as client,
    ):
        yield client


def finished(result: TaskResult[Any]) -> TaskResult[Any]:
    def done() -> bool:
        result.refresh()
        return bool(result.is_finished)

    eventually_blocking(done, what=lambda: f"{result.id} finished ({result.status})")
    return result


# --- through a worker -----------------------------------------------------------------------


@pytest.mark.slow
def test_a_sync_task_runs_and_its_result_reads_back(on_rsched: rsched.SyncClient) -> None:
    result = tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert result.backend == "default"
    assert (result.args, result.kwargs) == ([2, 3], {})
    finished(result)
    assert result.status == SUCCESSFUL
    assert result.return_value == 5
    assert result.errors == []
    assert len(result.worker_ids) == result.attempts == 1
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.last_attempted_at == result.started_at
    assert result.enqueued_at is not None
    assert result.enqueued_at <= result.started_at
    again = tasks.add.get_result(result.id)
    assert (again.status, again.return_value) == (SUCCESSFUL, 5)
    # On rsched: the task's module path on the queue Django's default maps to (DEFAULT_QUEUE).
    job = on_rsched.job(result.id)
    assert (job.task, job.queue, job.state) == (
        "tests.contrib.django_app.tasks.add",
        "dj",
        "completed",
    )


@pytest.mark.slow
async def test_an_async_task_is_awaited_and_aenqueue_aget_result_work(
    on_rsched: rsched.SyncClient,
) -> None:
    result: TaskResult[Any] = await tasks.greet.aenqueue("ada", punctuation="?")
    assert result.kwargs == {"punctuation": "?"}

    async def done() -> bool:
        await result.arefresh()
        return bool(result.is_finished)

    await eventually(done, what="the async task finished")
    assert result.status == SUCCESSFUL
    assert result.return_value == "hello ada?"
    again: TaskResult[Any] = await tasks.greet.aget_result(result.id)
    assert again.return_value == "hello ada?"


@pytest.mark.slow
def test_a_failing_task_is_failed_with_its_exception_and_traceback(
    on_rsched: rsched.SyncClient,
) -> None:
    result = finished(tasks.explode.enqueue("no luck"))
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 1
    error = result.errors[0]
    assert error.exception_class_path == "tests.contrib.django_app.tasks.Boom"
    assert error.exception_class is tasks.Boom
    assert "raise Boom(message)" in error.traceback
    assert "no luck" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value
    # MAX_RETRIES 0: one attempt, then a dead letter.
    assert result.attempts == 1
    assert on_rsched.job(result.id).state == "dead"


@pytest.mark.slow
def test_a_task_taking_the_context_gets_its_result_id_and_attempt(
    on_rsched: rsched.SyncClient,
) -> None:
    result = finished(tasks.whoami.enqueue("t1"))
    assert result.return_value == {"id": result.id, "attempt": 1, "tag": "t1"}


@pytest.mark.slow
def test_queue_priority_and_run_after_are_honoured(on_rsched: rsched.SyncClient) -> None:
    run_after = timezone.now() + timedelta(seconds=2)
    delayed = tasks.add.using(run_after=run_after).enqueue(1, 1)
    job = on_rsched.job(delayed.id)
    assert job.state == "delayed"
    assert job.due_at is not None
    assert job.due_at >= run_after - timedelta(seconds=1)
    assert tasks.add.get_result(delayed.id).status == TaskResultStatus.READY
    urgent = tasks.urgent.enqueue(21)
    low = tasks.later.enqueue()
    assert on_rsched.job(urgent.id).queue == "urgent"
    finished(urgent)
    finished(low)
    assert urgent.return_value == 42
    # rsched records each job's level (high, normal, low): Django's priority above, at, below 0.
    levels = {r.execution_id: r.priority for r in on_rsched.runs(limit=500).items}
    assert (levels[urgent.id], levels[low.id]) == ("high", "low")
    finished(delayed)
    assert delayed.started_at is not None
    assert delayed.started_at >= run_after - timedelta(seconds=1)


@pytest.mark.slow
def test_the_schedules_of_the_settings_are_synced_at_start_and_fire(
    on_rsched: rsched.SyncClient,
) -> None:
    schedule = on_rsched.get("dj-tick")
    assert (schedule.task, schedule.source, schedule.queue) == (
        "tests.contrib.django_app.tasks.tick",
        "django",
        "dj",
    )
    assert schedule.payload == {"args": [], "kwargs": {"note": "from settings"}}
    assert [a.source for a in on_rsched.audit("dj-tick")] == ["sync:django"]

    def ran() -> Any:
        return on_rsched.runs(schedule_id="dj-tick", status="completed").items

    runs = eventually_blocking(ran, what="a completed run of dj-tick")
    assert tasks.tick.get_result(runs[0].execution_id).return_value == "from settings"


# --- without a worker -----------------------------------------------------------------------


def test_arguments_must_be_json(redis_url: str, prefix: str) -> None:
    with override_settings(TASKS=tasks_setting(redis_url, prefix)):
        with pytest.raises(InvalidTask, match=r"tasks\.add: arguments must be JSON"):
            tasks.add.enqueue(cast(int, object()), 1)
        with rsched.SyncClient(redis_url, prefix) as client:
            assert client.jobs().items == []


def test_an_unknown_id_does_not_exist(redis_url: str, prefix: str) -> None:
    with override_settings(TASKS=tasks_setting(redis_url, prefix)):
        for unknown in ("nope", "0" * 32):
            with pytest.raises(TaskResultDoesNotExist):
                tasks.add.get_result(unknown)


def test_bad_options_name_the_option() -> None:
    bad = {"default": {"BACKEND": "rsched.contrib.django.RschedBackend", "OPTIONS": {}}}
    for options, message in (
        ({"MAX_RETRY": 1}, "unknown MAX_RETRY"),
        ({"MAX_RETRIES": -1}, r'\["MAX_RETRIES"\]: a whole number'),
        ({"TIMEOUT_S": 0}, r'\["TIMEOUT_S"\]'),
        ({"SETTINGS": {"worker": {"concurrency": 0}}}, "worker.concurrency: Input should be"),
        ({"SETTINGS": {"redis": "x"}}, "no rsched setting 'redis'"),
    ):
        with pytest.raises(rsched.ConfigError, match=message):
            RschedBackend("default", {**bad["default"], "OPTIONS": options})


def test_the_priority_mapping() -> None:
    from rsched.contrib.django._backend import rsched_priority

    assert [rsched_priority(p) for p in (-100, -1, 0, 1, 100)] == [
        "low",
        "low",
        "normal",
        "high",
        "high",
    ]


def test_the_class_path_of_a_traceback() -> None:
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1\n    raise E\nmy.mod.E: no\n'
    assert class_path(tb, "E") == "my.mod.E"
    assert class_path("Traceback ...\nValueError: bad\n", "ValueError") == "builtins.ValueError"
    assert class_path("Traceback ...\nother.Thing: x\n", "E") is None


# --- the worker's command -------------------------------------------------------------------


def test_the_worker_command_wants_a_worker_or_a_project(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rsched._cli.worker_process import main

    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2
    assert "give a Worker as module:attribute, or --django SETTINGS_MODULE" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as caught:
        main(["tests.support.worker_app:worker", "--django", SETTINGS_MODULE])
    assert caught.value.code == 2
    assert "not both" in capsys.readouterr().err


@pytest.mark.slow
def test_a_project_that_cannot_be_set_up_is_a_config_error(redis_url: str, prefix: str) -> None:
    env = {"RSCHED_REDIS_URL": redis_url, "RSCHED_PREFIX": prefix}
    proc = Proc("rsched._cli.worker_process", "--django", "no_such.settings", env=env)
    assert proc.wait() == 2
    assert "cannot set Django up (DJANGO_SETTINGS_MODULE='no_such.settings')" in proc.output()
    proc.close()


@pytest.mark.slow
def test_manage_py_rsched_worker_runs_the_worker(redis_url: str, prefix: str) -> None:
    env = {"RSCHED_REDIS_URL": redis_url, "RSCHED_PREFIX": prefix}
    # manage.py's --settings is Django's; the other flags are rsched-worker's.
    args = ("rsched_worker", "--settings", SETTINGS_MODULE, "--concurrency", "2")
    proc = Proc("django", *args, env={**env, "DJANGO_SETTINGS_MODULE": ""})
    try:
        proc.wait_for("worker.start")
        assert "concurrency=2" in proc.output()
        assert "tests.contrib.django_app.tasks.whoami" in proc.output()
    finally:
        proc.close()


async def test_bad_schedules_in_settings_stop_the_worker_before_it_reads(
    redis_url: str, prefix: str
) -> None:
    from rsched.contrib.django import build_worker

    schedules = [
        {"id": "ok", "task": tasks.tick, "every": 60, "kwargs": {"note": "n"}},
        {"id": "bad", "task": "tests.contrib.django_app.tasks.tick", "every": -1},
    ]
    with override_settings(TASKS=tasks_setting(redis_url, prefix), RSCHED_SCHEDULES=schedules):
        worker = build_worker()
        assert "tests.contrib.django_app.tasks.urgent" in worker.tasks
        with pytest.raises(
            rsched.ConfigError, match=r"(?s)RSCHED_SCHEDULES: .*schedule\[1\]\.every"
        ):
            await worker.run()
    with (
        override_settings(
            TASKS=tasks_setting(redis_url, prefix),
            RSCHED_SCHEDULES=schedules[:1],
            RSCHED_SCHEDULES_SOURCE="not a name",
        ),
        pytest.raises(rsched.ConfigError, match="RSCHED_SCHEDULES_SOURCE: "),
    ):
        await build_worker().run()
    async with rsched.Client.from_settings(
        rsched.Settings(redis_url=redis_url, prefix=prefix)
    ) as client:
        assert (await client.list()).items == []


def test_a_cancelled_task_has_the_framework_s_cancelled_status(redis_url: str, prefix: str) -> None:
    from rsched.contrib.django._framework import CANCELLED

    with (
        override_settings(TASKS=tasks_setting(redis_url, prefix)),
        rsched.SyncClient(redis_url, prefix) as client,
    ):
        result = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
        assert client.cancel(result.id) == "delayed"
        result.refresh()
        # The backport has no CANCELLED: FAILED then, with no error (it never ran).
        expected = getattr(TaskResultStatus, "CANCELLED", TaskResultStatus.FAILED)
        assert result.status == CANCELLED == expected
        assert (result.errors, result.worker_ids) == ([], [])


async def test_the_worker_in_process_sends_the_framework_s_signals(
    redis_url: str, prefix: str
) -> None:
    """build_worker (what --django runs) in this process: the task_started and task_finished
    signals reach the project's receivers, with the running and the ended TaskResult."""
    import anyio

    from rsched.contrib.django import build_worker
    from rsched.contrib.django._framework import FAILED, RUNNING, task_finished, task_started

    seen: list[tuple[str, str, str, Any]] = []

    def started(sender: Any, task_result: TaskResult[Any], **_: Any) -> None:
        seen.append(("started", task_result.id, task_result.status, None))

    def ended(sender: Any, task_result: TaskResult[Any], **_: Any) -> None:
        error = task_result.errors[0].exception_class_path if task_result.errors else None
        seen.append(("finished", task_result.id, task_result.status, error))

    task_started.connect(started)
    task_finished.connect(ended)
    try:
        with override_settings(TASKS=tasks_setting(redis_url, prefix)):
            worker = build_worker()
            good = await tasks.greet.aenqueue("bo")
            bad = await tasks.explode.aenqueue("oops")
            async with anyio.create_task_group() as tg:
                await tg.start(worker.run)
                await eventually(lambda: len(seen) == 4, what=lambda: f"4 signals in {seen}")
                worker.stop()
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(ended)
    assert sorted(seen) == sorted(
        [
            ("started", good.id, RUNNING, None),
            ("finished", good.id, SUCCESSFUL, None),
            ("started", bad.id, RUNNING, None),
            ("finished", bad.id, FAILED, "tests.contrib.django_app.tasks.Boom"),
        ]
    )
