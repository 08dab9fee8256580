"""The rsched_env fixture of the rsched pytest plugin, used as a project would: a conftest.py
(here, this module) names the worker with the rsched_worker fixture."""

from __future__ import annotations

import pytest

import rsched
from rsched.testing import TestEnv

worker = rsched.Worker(["default"])
greeted: list[str] = []


@worker.task("greet")
async def greet(job: rsched.Job) -> None:
    greeted.append(job.payload["name"])


@pytest.fixture
def rsched_worker() -> rsched.Worker:
    return worker


@pytest.fixture
def rsched_start() -> str:
    return "2031-06-01T08:00:00+00:00"


async def test_the_fixture_runs_the_projects_worker(rsched_env: TestEnv) -> None:
    greeted.clear()
    await rsched_env.client.add(
        rsched.Schedule(id="hello", task="greet", cron="0 9 * * *", payload={"name": "Ada"})
    )
    ran = await rsched_env.advance("1d")
    assert [(r.schedule_id, r.status) for r in ran] == [("hello", "completed")]
    assert greeted == ["Ada"]


async def test_each_test_gets_a_fresh_environment(rsched_env: TestEnv) -> None:
    assert rsched_env.now().isoformat() == "2031-06-01T08:00:00+00:00"
    assert (await rsched_env.client.list()).items == []
