"""The tutorial's Python (docs/tutorial.md) runs as written, against a real server: its tasks
module registers its handlers and a worker runs them, and its client session adds, updates,
triggers, enqueues and reads back what the page says it does. Only the server's address is
changed (and the key prefix, through RSCHED_PREFIX, which the page leaves to its default)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

import rsched
from tests.support.waiting import eventually

PAGE = Path(__file__).parents[2] / "docs" / "tutorial.md"
PAGE_URL = "redis://localhost:6379/0"


def python_blocks() -> list[str]:
    """The page's ```python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(), flags=re.M | re.S)


def block(marker: str) -> str:
    found = [b for b in python_blocks() if marker in b]
    assert len(found) == 1, f"docs/tutorial.md: one python block with {marker!r}, found {found}"
    return found[0]


def test_the_page_has_the_blocks_this_test_runs() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 3, blocks
    assert PAGE_URL in block("async with rsched.Client.from_url")


def tasks_module() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "myapp.tasks"}
    exec(compile(block("# myapp/tasks.py"), "docs/tutorial.md (tasks)", "exec"), namespace)
    return namespace


def test_the_tasks_module_registers_its_handlers() -> None:
    worker = tasks_module()["worker"]
    assert isinstance(worker, rsched.Worker)
    assert sorted(worker.tasks) == ["files.compress", "reports.nightly"]
    assert worker.resolve_settings().worker.queues == ["default", "reports"]


async def client_session(redis_url: str) -> None:
    """The page's client block, then its continuation (the bulk upsert, indented to sit inside
    the same ``async with``), run as one coroutine."""
    session = block("async with rsched.Client.from_url").replace(PAGE_URL, redis_url)
    session += block("upsert_many(")
    source = "async def session():\n" + textwrap.indent(session, "    ")
    namespace: dict[str, Any] = {}
    exec(compile(source, "docs/tutorial.md (client)", "exec"), namespace)
    await namespace["session"]()


async def test_the_client_session_runs_and_reads_back(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RSCHED_PREFIX", prefix)
    monkeypatch.setenv("RSCHED_REDIS_URL", redis_url)
    worker = tasks_module()["worker"]
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run)
        await client_session(redis_url)
        out = capsys.readouterr().out
        async with rsched.Client.from_url(redis_url, prefix) as c:
            # What the page wrote: the two schedules, "poll" updated to 1h30m, the bulk list.
            nightly = await c.get("nightly-report")
            assert (nightly.cron, nightly.timezone, nightly.max_runs) == (
                "0 2 * * *", "Europe/Rome", 365,
            )  # fmt: skip
            assert (await c.get("poll")).every == 5400
            assert (await c.get("tenant-9999")).payload == {"tenant": 9999}
            assert (await c.stats()).schedules["total"] == 10_002
            # What it printed: three next runs, the idempotent job, the one fired event (the
            # trigger), the schedules of queue "reports" (none) and the bulk summary.
            assert "order-42 True" in out
            assert "10000 created" in out
            fired = [line for line in out.splitlines() if " fired nightly-report@" in line]
            assert len(fired) == 1, out
            # The worker of the tasks module runs the triggered occurrence's async handler.
            await eventually(
                lambda: c.history("nightly-report", status="completed"),
                what="the triggered run of nightly-report completed",
            )
        worker.stop()
    # The handler printed the job: execution id, payload, scheduled time, attempt.
    out += capsys.readouterr().out
    assert re.search(r"^nightly-report@\d+ \{'kind': 'sales'\} \S+ \S+ 1$", out, re.M), out
