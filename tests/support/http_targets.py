"""A local HTTP server for HTTP target tests (127.0.0.1, a free port), with faults on demand:
each path answers what the test scripted for it (a status, headers, a body, a delay), in
order, then 200; every request is recorded, with the time it arrived."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


class TargetServer(http.server.ThreadingHTTPServer):
    """Records each request; answers the ``script`` of its path first, then 200 ``ok``."""

    daemon_threads = True

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.script: dict[str, list[Answer]] = {}
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"

    def calls_to(self, path: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.path == path]

    def next_answer(self, path: str) -> Answer:
        with self.lock:
            answers = self.script.get(path)
            return answers.pop(0) if answers else Answer()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: TargetServer
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with self.server.lock:
            self.server.calls.append(
                Call(self.command, self.path, dict(self.headers.items()), body, time.monotonic())
            )
        answer = self.server.next_answer(self.path)
        if answer.delay_s:
            time.sleep(answer.delay_s)
        try:
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(answer.body)
        except OSError:  # the caller gave up (its timeout) and closed the connection
            pass

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

    def log_message(self, format: str, *args: object) -> None:
        pass


S = TypeVar("S", bound=http.server.HTTPServer)


def in_thread(server: S) -> Iterator[S]:
    """``server`` serving in a thread until the generator is closed (a fixture's body)."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def serving() -> Iterator[TargetServer]:
    """A target server serving in a thread until the generator is closed (a fixture's body)."""
    return in_thread(TargetServer())


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed): connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
