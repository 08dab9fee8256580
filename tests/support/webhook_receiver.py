"""A local HTTP receiver for alert webhook tests (127.0.0.1, a free port)."""

from __future__ import annotations

import hashlib
import hmac
import http.server
from collections.abc import Iterator

from rsched._ops.webhook import SIGNATURE_HEADER, TIMESTAMP_HEADER
from tests.support.http_targets import in_thread


class Receiver(http.server.ThreadingHTTPServer):
    """Records each POST (headers, body); answers the statuses in ``answers`` first, then 200."""

    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.answers: list[int] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = self.server.answers.pop(0) if self.server.answers else 200
        if status == 200:
            self.server.posts.append((dict(self.headers.items()), body))
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def receiving() -> Iterator[Receiver]:
    """A receiver serving in a thread until the generator is closed (a fixture's body)."""
    return in_thread(Receiver())


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """Whether ``headers`` carry the signature of ``body`` with ``secret``."""
    timestamp = headers[TIMESTAMP_HEADER]
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return hmac.compare_digest(headers[SIGNATURE_HEADER], "sha256=" + mac.hexdigest())
