"""Serving ``rsched.web`` apps over real HTTP for the web tests: uvicorn on a free loopback port
in a thread of the test process, with its own event loop."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from rsched import Settings
from rsched.web import create_app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve(settings: Settings, **options: Any) -> Iterator[str]:
    """Serve ``create_app(settings=settings, **options)``; yields its base URL (no slash)."""
    app = create_app(settings=settings, **options)
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"web-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the web server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}{options.get('base_path', '').rstrip('/')}"
    finally:
        server.should_exit = True
        thread.join(10)
