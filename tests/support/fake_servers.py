"""Loopback TCP servers that are not a healthy Redis, for the robustness tests.

Each listens on a free 127.0.0.1 port in a daemon thread and is closed by ``close()`` (or as a
context manager): a black hole that accepts and never answers, a server that answers every
command with one canned RESP reply (``-MOVED ...``), one that answers anything with garbage, and
a plain HTTP server.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from types import TracebackType
from typing import Self


class FakeServer:
    """Accepts connections on 127.0.0.1:<free port>; ``serve(conn)`` handles each one."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = int(self.sock.getsockname()[1])
        self.conns: list[socket.socket] = []
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve_quietly, args=(conn,), daemon=True).start()

    def _serve_quietly(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            self.serve(conn)

    def serve(self, conn: socket.socket) -> None:
        """Never answer (a black hole); subclasses reply."""

    def close(self) -> None:
        self._closed.set()
        self.sock.close()
        for conn in self.conns:
            conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


BlackHole = FakeServer


def _commands(buffer: bytearray) -> int:
    """Remove the complete RESP commands (arrays of bulk strings) at the start of ``buffer``;
    returns how many there were."""
    count = 0
    while True:
        end = _command_end(bytes(buffer))
        if end is None:
            return count
        del buffer[:end]
        count += 1


def _command_end(data: bytes) -> int | None:
    if not data.startswith(b"*"):
        line_end = data.find(b"\r\n")  # an inline command
        return None if line_end < 0 else line_end + 2
    head = data.find(b"\r\n")
    if head < 0:
        return None
    pos = head + 2
    for _ in range(int(data[1:head])):
        size_end = data.find(b"\r\n", pos)
        if size_end < 0:
            return None
        pos = size_end + 2 + int(data[pos + 1 : size_end]) + 2
        if pos > len(data):
            return None
    return pos


class Canned(FakeServer):
    """Answers every command with the same RESP reply (e.g. ``b"-MOVED 1234 127.0.0.1:7000"``)."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply + b"\r\n"
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        buffer = bytearray()
        while data := conn.recv(65536):
            buffer += data
            conn.sendall(self.reply * _commands(buffer))


class Garbage(FakeServer):
    """Answers anything it receives with bytes that are not the Redis protocol."""

    def serve(self, conn: socket.socket) -> None:
        while conn.recv(65536):
            conn.sendall(b"\x00\x17garbage \xff\xfe\r\n")


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class HttpServer:
    """A plain HTTP server (every request gets its default error page)."""

    def __init__(self) -> None:
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
        self.port = int(self.httpd.server_address[1])
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
