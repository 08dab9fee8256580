"""Serving ``rsched.web`` apps over real HTTP for the web tests: uvicorn on a free loopback port
in a thread of the test process, with its own event loop."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

from rsched import Settings
from rsched._devtools.embedded import free_port
from rsched.web import create_app
from tests.support.waiting import WAIT_S, eventually_blocking
from tests.support.workers import worker_thread as worker_thread


@contextmanager
def run_app(app: Any, path: str = "") -> Iterator[str]:
    """Serve an ASGI app on a free loopback port; yields its URL (plus ``path``)."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"web-{port}", daemon=True)
    thread.start()
    eventually_blocking(lambda: _started(server, thread), what="the web server to start")
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        server.should_exit = True
        thread.join(10)


def _started(server: uvicorn.Server, thread: threading.Thread) -> bool:
    if not thread.is_alive():
        raise RuntimeError("the web server did not start")
    return bool(server.started)


@contextmanager
def serve(settings: Settings, **options: Any) -> Iterator[str]:
    """Serve ``create_app(settings=settings, **options)``; yields its base URL (no slash)."""
    app = create_app(settings=settings, **options)
    with run_app(app, str(options.get("base_path", "")).rstrip("/")) as url:
        yield url


async def make_dead_letters(settings: Settings, n: int = 1, queue: str = "default") -> None:
    """``n`` real dead letters on ``queue``: jobs whose handler raises, with no retries left,
    run by an in-process worker."""
    import anyio

    import rsched
    from tests.support.worker_app import fast_settings

    worker = rsched.Worker(queues=[queue], settings=fast_settings(settings))

    @worker.task("web.boom")
    async def boom(job: rsched.Job) -> None:
        raise ValueError(f"boom <b>{job.payload.get('n')}</b>")

    async with rsched.Client.from_settings(settings) as client:
        before = (await client.stats()).dead_letters
        for i in range(n):
            await client.enqueue("web.boom", {"n": i}, queue=queue, max_retries=0)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run, None)
            with anyio.fail_after(WAIT_S):
                while (await client.stats()).dead_letters < before + n:  # noqa: ASYNC110 - polling Redis
                    await anyio.sleep(0.05)
            worker.stop()


async def apublish_event(settings: Settings, kind: str, **fields: str) -> None:
    """One entry on the events stream, as the scheduler's health watch or a worker writes it."""
    from rsched._core.keys import Keys
    from rsched._redis.connection import connect
    from rsched._store.alerts import EventLog

    redis = connect(settings.url)
    try:
        await EventLog(redis, Keys(settings.prefix)).publish(kind, **fields)
    finally:
        await redis.aclose()


def publish_event(settings: Settings, kind: str, **fields: str) -> None:
    """:func:`apublish_event` from synchronous code: in a thread with its own event loop
    (Playwright's sync API runs one in the test's thread)."""
    from concurrent.futures import ThreadPoolExecutor

    import anyio

    with ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, lambda: apublish_event(settings, kind, **fields)).result()


def api_error(
    r: httpx.Response, status: int, name: str, field: str | None = None
) -> dict[str, Any]:
    """The body of an HTTP API error reply, checked: its status, error name and field."""
    assert r.status_code == status, r.text
    body: dict[str, Any] = r.json()
    assert (body["error"], body["field"]) == (name, field), body
    return body
